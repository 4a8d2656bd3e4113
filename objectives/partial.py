"""Partial annotation: the probability of the trees that agree with the arcs that are given.

A head vector ``(B, N+1)`` may leave words' heads unknown (``IGNORE_INDEX``). The trees
that agree with the given heads are the spanning trees of the graph in which a word whose
head is given keeps only that incoming arc, so by the matrix-tree theorem
``log p(agreeing trees) = log Z(constrained scores) - log Z(scores)``: exact, and the gold
tree's ``log p`` when every head is given (its graph then holds that one tree).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from .conventions import IGNORE_INDEX, word_mask
from .distribution import TreeCRF
from .mtt import NoSpanningTreeWarning


def constrain(scores: Tensor, heads: Tensor) -> Tensor:
    """``scores`` ``(B, N+1, N+1)`` with every arc into a word of known head other than the
    given one at ``-inf``; ``heads`` ``(B, N+1)``, ``IGNORE_INDEX`` where unknown."""
    given = heads != IGNORE_INDEX  # (B, N+1)
    positions = torch.arange(scores.shape[1], device=scores.device)
    other = positions[None, :, None] != heads[:, None, :]  # (B, N+1 heads, N+1 words)
    return scores.masked_fill(other & given[:, None, :], float("-inf"))


def partial_log_prob(crf: TreeCRF, heads: Tensor) -> Tensor:
    """``log p`` of the trees of ``crf`` (unlabeled) that agree with ``heads`` ``(B, N+1)``
    (``IGNORE_INDEX`` = unknown; position 0 and padding are ignored): ``(B,)``.

    0 for a sentence with no head given; ``crf.log_prob(heads)`` when every head is given.
    Raises ``ValueError`` naming the sentences whose given heads no tree of the set agrees
    with (a cycle, a word attached to itself, two words attached to the root of
    single-root trees), rather than returning ``-inf``.
    """
    words = word_mask(crf.lengths, crf.scores.shape[1] - 1)
    heads = heads.masked_fill(~words, IGNORE_INDEX)
    if not bool((words & (heads == IGNORE_INDEX)).any()):
        return crf.log_prob(heads.masked_fill(~words, 0))
    constrained = TreeCRF(constrain(crf.scores, heads), crf.lengths, crf.multiroot, validate_args=False)
    with warnings.catch_warnings():  # reported below as the annotation's fault
        warnings.simplefilter("ignore", NoSpanningTreeWarning)
        log_z = constrained.log_partition
    impossible = log_z == float("-inf")
    if bool(impossible.any()):
        kind = "multi-root" if crf.multiroot else "single-root"
        raise ValueError(f"the given heads of sentences {impossible.nonzero().flatten().tolist()} of the batch agree "
                         f"with no {kind} tree (a cycle, a word attached to itself or, for single-root trees, "
                         "several words attached to the root)")
    return log_z - crf.log_partition
