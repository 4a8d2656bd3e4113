"""Attachment scores over batches of predicted and gold trees (docs/architecture.md), and a
parser's scores of a split: those and its tagger's UPOS accuracy."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from objectives.conventions import IGNORE_INDEX, word_mask

from parser.data.batch import Batch
from parser.data.vocab import universal_deprel
from parser.network import Network


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

    With ``groups`` (names, e.g. treebanks) each update says the group of each sentence;
    ``compute()`` then also gives ``uas/<name>`` and ``las/<name>`` per group that had
    words, and ``uas``/``las`` are their macro-average (each group counts once, as
    multi-treebank parsers select on).
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, universal: Sequence[int] | Tensor | None = None, groups: Sequence[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        universal = None if universal is None else torch.as_tensor(universal, dtype=torch.long)
        self.register_buffer("universal", universal, persistent=False)
        self.groups = None if groups is None else list(groups)
        size = 1 if groups is None else len(self.groups)
        for name in ("words", "correct_heads", "labeled_words", "correct_labeled"):
            self.add_state(name, default=torch.zeros(size, dtype=torch.long), dist_reduce_fx="sum")

    def group_of(self, names: Sequence[str | None] | None) -> Tensor | None:
        """The group index of each sentence, from its group's name: (B,); None without groups."""
        if self.groups is None:
            return None
        index = {name: i for i, name in enumerate(self.groups)}
        return torch.tensor([index[name] for name in names])

    def update(self, pred_heads: Tensor, pred_labels: Tensor | None, gold_heads: Tensor,
               gold_labels: Tensor | None, lengths: Tensor, group: Tensor | None = None) -> None:
        """Heads and labels: (B, N+1) long; lengths: (B,); group: (B,) index into ``groups``
        (needed with groups). Positions 0 and past ``lengths`` are ignored. Pass
        ``pred_labels=None`` for UAS only."""
        if (group is None) != (self.groups is None):
            raise ValueError("give each sentence's group exactly when the metric has groups")
        group = torch.zeros_like(lengths) if group is None else group.to(lengths.device)
        words = word_mask(lengths, gold_heads.shape[1] - 1)
        correct_heads = words & (pred_heads == gold_heads)
        self.words.index_add_(0, group, words.sum(1))
        self.correct_heads.index_add_(0, group, correct_heads.sum(1))
        if pred_labels is None:
            return
        known = (gold_labels != IGNORE_INDEX) & (pred_labels != IGNORE_INDEX)
        gold, pred = gold_labels.clamp(min=0), pred_labels.clamp(min=0)
        if self.universal is not None:
            gold, pred = self.universal[gold], self.universal[pred]
        self.labeled_words.index_add_(0, group, words.sum(1))
        self.correct_labeled.index_add_(0, group, (correct_heads & known & (pred == gold)).sum(1))

    def compute(self) -> dict[str, Tensor]:
        if self.groups is None:
            scores = {"uas": 100 * self.correct_heads[0] / self.words[0]}
            if self.labeled_words[0] > 0:
                scores["las"] = 100 * self.correct_labeled[0] / self.labeled_words[0]
            return scores
        seen, labeled = self.words > 0, self.labeled_words > 0
        uas = 100 * self.correct_heads[seen] / self.words[seen]
        las = 100 * self.correct_labeled[labeled] / self.labeled_words[labeled]
        scores = {"uas": uas.mean(), **({"las": las.mean()} if labeled.any() else {})}
        names = [name for name, s in zip(self.groups, seen.tolist()) if s]
        scores.update({f"uas/{name}": value for name, value in zip(names, uas)})
        labeled_names = [name for name, s in zip(self.groups, labeled.tolist()) if s]
        scores.update({f"las/{name}": value for name, value in zip(labeled_names, las)})
        return scores


class ParseScores(nn.Module):
    """The scores of a ``network``'s parses of a split, in percent: UAS and LAS
    (:class:`AttachmentScore`, labels compared by their universal part; per treebank too when
    the split has several ``treebanks``) and, when it has a tagger, UPOS accuracy."""

    def __init__(self, network: Network, treebanks: Sequence[str] = ()):
        super().__init__()
        self.attachment = AttachmentScore(universal_index(network.label_vocab.itos), treebanks if len(treebanks) > 1 else None)
        self.upos = None if network.tagger is None else MulticlassAccuracy(len(network.upos_vocab), average="micro",
                                                                           ignore_index=IGNORE_INDEX)

    def update(self, batch: Batch, heads: Tensor, labels: Tensor, tags: Tensor | None, gold_tags: Tensor) -> None:
        """Predicted ``heads`` and ``labels`` (B, N+1) against ``batch``'s trees; the tagger's UPOS
        logits ``tags`` (B, N+1, T; None without one) against ``gold_tags`` (B, N+1; ``IGNORE_INDEX``
        where unknown)."""
        self.attachment.update(heads, labels, batch.heads, batch.labels, batch.lengths,
                               self.attachment.group_of(batch.treebanks))
        if self.upos is not None:
            self.upos.update(tags.flatten(0, 1), gold_tags.flatten())

    def compute(self) -> dict[str, Tensor]:
        """``uas``, ``las`` (and ``uas/<treebank>`` ...) and, with a tagger, ``upos``."""
        values = dict(self.attachment.compute())
        if self.upos is not None:
            values["upos"] = 100 * self.upos.compute()
        return values

    def reset(self) -> None:
        self.attachment.reset()
        if self.upos is not None:
            self.upos.reset()
