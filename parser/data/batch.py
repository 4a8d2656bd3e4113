"""Padded batches of sentences (tensor conventions in docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from parser.data.sentences import Sentence
from objectives.conventions import IGNORE_INDEX

from parser.data.vocab import Vocab


@dataclass
class Batch:
    """Padded sentences, as in docs/architecture.md (``N`` = longest sentence).

    words: per sentence its words; lengths: (B,); upos: (B, N+1); heads, labels:
    (B, N+1) or None for sentences without trees (-100 where a partial tree leaves a
    head or a label unknown); index: (B,) position of each
    sentence in its dataset (in its pass, for the unlabeled stream); skipped: malformed
    unlabeled lines the stream skipped since its previous batch (same worker); subwords:
    the words tokenised for the encoder (``parser.network.encoder.Subwords``), when the data
    pipeline was given the encoder's tokenizer; treebanks: per sentence the name of its
    treebank (``Sentence.treebank``), None where unknown.
    """

    words: list[list[str]]
    lengths: Tensor
    upos: Tensor
    heads: Tensor | None
    labels: Tensor | None
    index: Tensor
    skipped: int = 0
    subwords: Any = None
    treebanks: list[str] | None = None


def collate(sentences: Sequence[Sentence], upos_vocab: Vocab, label_vocab: Vocab | None,
            index: Sequence[int] | None = None, skipped: int = 0,
            tokenize: Callable[[list[list[str]]], Any] | None = None) -> Batch:
    """Pad sentences into a Batch. Heads/labels only if every sentence has them (labels
    also need ``label_vocab``); ``index`` defaults to 0..B-1; ``tokenize`` (the encoder's
    ``SubwordTokenizer``) fills ``subwords``, in the DataLoader worker that collates."""
    lengths = torch.tensor([len(s) for s in sentences])
    shape = (len(sentences), int(lengths.max()) + 1)
    upos = torch.zeros(shape, dtype=torch.long)
    has_trees = all(s.heads is not None for s in sentences)
    heads = torch.zeros(shape, dtype=torch.long) if has_trees else None
    labels = torch.full(shape, IGNORE_INDEX) if has_trees and label_vocab is not None else None
    for b, sentence in enumerate(sentences):
        n = len(sentence)
        upos[b, 1:n + 1] = torch.tensor([upos_vocab.index(t) for t in sentence.upos])
        if heads is not None:
            heads[b, 1:n + 1] = torch.tensor([IGNORE_INDEX if h is None else h for h in sentence.heads])
        if labels is not None:
            labels[b, 1:n + 1] = torch.tensor([label_vocab.index(d) for d in sentence.deprels])
    index = torch.arange(len(sentences)) if index is None else torch.as_tensor(index)
    words = [list(s.words) for s in sentences]
    return Batch(words, lengths, upos, heads, labels, index, skipped, None if tokenize is None else tokenize(words),
                 [s.treebank for s in sentences])
