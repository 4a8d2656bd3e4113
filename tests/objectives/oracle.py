"""Tiny batches and brute-force tree enumeration shared by the objective tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from objectives import baselines as bl
from objectives.conventions import UPOS_TAGS
from objectives.objective import Objective, ObjectiveContext, Scores

UPOS_VOCAB = ("<pad>", "<unk>", *UPOS_TAGS)
TAGS = ("NOUN", "VERB", "ADJ", "DET", "<unk>")  # the tags test sentences draw from


def ready(objective: Objective, multiroot: bool = False, **context) -> Objective:
    """``objective`` after the model's setup hook: tree set, the UPOS vocabulary ``UPOS_VOCAB``."""
    objective.setup(ObjectiveContext(stage="validate", multiroot=multiroot, tags=UPOS_VOCAB, **context))
    return objective


@dataclass
class Batch:
    """The fields of a batch an objective reads (see objectives.objective.TreeBatch)."""

    lengths: Tensor
    upos: Tensor
    heads: Tensor | None = None
    labels: Tensor | None = None


def make_batch(lengths, num_labels: int | None = 3, seed: int = 0, dtype=torch.float64) -> tuple[Scores, Batch]:
    """Random scores (garbage 1e4 off the arcs), a random single-root gold tree, labels
    (word 1 of sentence 0 ignored: -100) and tags drawn from ``TAGS``."""
    generator = torch.Generator().manual_seed(seed)
    arcs, lengths = bl.random_batch(lengths, scale=1.5, dtype=dtype, generator=generator)
    labels = None
    if num_labels:
        labels = bl.random_batch(lengths.tolist(), num_labels, dtype=dtype, generator=generator)[0]
    shape = arcs.shape[:2]
    heads = torch.zeros(shape, dtype=torch.long)
    gold = torch.full(shape, -100)
    upos = torch.zeros(shape, dtype=torch.long)
    tag_ids = torch.tensor([UPOS_VOCAB.index(tag) for tag in TAGS])
    for b, n in enumerate(lengths.tolist()):
        trees = bl.enumerate_trees(n)
        heads[b, : n + 1] = trees[torch.randint(len(trees), (), generator=generator)]
        gold[b, 1 : n + 1] = torch.randint(num_labels or 1, (n,), generator=generator)
        upos[b, 1 : n + 1] = tag_ids[torch.randint(len(TAGS), (n,), generator=generator)]
    gold[0, 1] = -100
    return Scores(arcs, labels), Batch(lengths, upos, heads, gold if num_labels else None)


def trees(arcs: Tensor, n: int, multiroot: bool = False) -> tuple[Tensor, Tensor]:
    """All trees of one sentence and their log-probabilities: ``(N+1, N+1)`` scores ->
    heads ``(T, n+1)``, ``log p`` ``(T,)``."""
    heads = bl.enumerate_trees(n, multiroot)
    words = torch.arange(1, n + 1)
    return heads, arcs.double()[heads[:, 1:], words].sum(1).log_softmax(0)


def sentences(scores: Scores, batch: Batch, multiroot: bool = False):
    """Yield ``(b, n, heads (T, n+1), log p (T,))`` for each sentence of the batch."""
    for b, n in enumerate(batch.lengths.tolist()):
        yield b, n, *trees(scores.arcs[b], n, multiroot)
