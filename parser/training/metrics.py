"""Attachment scores over batches of predicted and gold trees (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

from objectives.conventions import IGNORE_INDEX, word_mask

from parser.data.vocab import universal_deprel


def universal_index(labels: Sequence[str]) -> list[int]:
    """For each label, an id of its universal part (before ``:``), so that ``nmod`` and
    ``nmod:poss`` get the same id. Ids number the distinct universal parts in order."""
    ids: dict[str, int] = {}
    return [ids.setdefault(universal_deprel(label), len(ids)) for label in labels]


class AttachmentScore(Metric):
    """Unlabeled and labeled attachment score in percent, micro-averaged over words.

    Every word counts, punctuation included. LAS compares labels through ``universal``
    (label index -> id of its universal part, see ``universal_index``; default: exact
    label match). A gold label of ``IGNORE_INDEX`` (-100, unseen in training) is always a LAS error.
    ``compute()`` returns ``{"uas": ..., "las": ...}``, without ``las`` when no update
    had predicted labels.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, universal: Sequence[int] | Tensor | None = None, **kwargs):
        super().__init__(**kwargs)
        universal = None if universal is None else torch.as_tensor(universal, dtype=torch.long)
        self.register_buffer("universal", universal, persistent=False)
        for name in ("words", "correct_heads", "labeled_words", "correct_labeled"):
            self.add_state(name, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, pred_heads: Tensor, pred_labels: Tensor | None, gold_heads: Tensor,
               gold_labels: Tensor | None, lengths: Tensor) -> None:
        """Heads and labels: (B, N+1) long; lengths: (B,). Positions 0 and past
        ``lengths`` are ignored. Pass ``pred_labels=None`` for UAS only."""
        words = word_mask(lengths, gold_heads.shape[1] - 1)
        correct_heads = words & (pred_heads == gold_heads)
        self.words += words.sum()
        self.correct_heads += correct_heads.sum()
        if pred_labels is None:
            return
        known = (gold_labels != IGNORE_INDEX) & (pred_labels != IGNORE_INDEX)
        gold, pred = gold_labels.clamp(min=0), pred_labels.clamp(min=0)
        if self.universal is not None:
            gold, pred = self.universal[gold], self.universal[pred]
        self.labeled_words += words.sum()
        self.correct_labeled += (correct_heads & known & (pred == gold)).sum()

    def compute(self) -> dict[str, Tensor]:
        scores = {"uas": 100 * self.correct_heads / self.words}
        if self.labeled_words > 0:
            scores["las"] = 100 * self.correct_labeled / self.labeled_words
        return scores
