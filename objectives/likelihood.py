"""Supervised training: negative log-likelihood of the gold (or partially given) tree under the MTT distribution."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ._common import full_precision, gold_label_logits
from .conventions import IGNORE_INDEX
from .distribution import TreeCRF
from .objective import Objective, Scores, TreeBatch
from .partial import partial_log_prob


class Likelihood(Objective):
    """Gold-tree NLL plus label cross-entropy, per word.

    ``loss = (sum_b -log p(heads_b) + label_weight * sum_m -log q(label_m | gold arc)) / W``
    with ``W = lengths.sum()`` the number of words in the batch, so the value is a per-word
    NLL (long and short sentences weigh by their words) and does not depend on how the
    batch is split. ``q`` is the softmax of the label logits on the gold arc; words whose
    gold label is ``-100`` (unseen in training) add no label term. Without label scores (or
    gold labels) only the tree term is used.

    ``labeled_mtt=True`` uses the labeled MTT (Proposition 2 of Zmigrod et al. 2021): the
    labeled arc log-weight is ``arcs[h, m] + labels[h, m, l]``, so ``p`` is the tree
    distribution over arc log-weights ``arcs + logsumexp_l labels``. Because labels are
    independent given the tree, ``log p(heads, labels) = log p(heads) + sum_m log q(label_m)``:
    with ``label_weight=1`` the loss is exactly the per-word NLL of the gold labeled tree,
    an ignored label being summed out (its arc keeps the weight of all its labels).

    Partial annotation: a word whose gold head is ``-100`` has an unknown head (and no label
    term). ``p(heads)`` is then the probability of all the trees that agree with the given
    heads (:func:`~objectives.partial.partial_log_prob`: exact, by the matrix-tree theorem);
    a sentence with no head given adds nothing. The divisor ``W`` still counts every word.

    Args:
        label_weight: weight of the label term.
        labeled_mtt: normalise labels globally with the arcs (labeled MTT) instead of
            locally (biaffine arc NLL + label cross-entropy).
    """

    needs_gold = True

    def __init__(self, label_weight: float = 1.0, labeled_mtt: bool = False) -> None:
        super().__init__()
        self.label_weight = label_weight
        self.labeled_mtt = labeled_mtt

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar loss for ``scores.arcs`` ``(B, N+1, N+1)``, ``scores.labels`` ``(B, N+1, N+1, L)``."""
        arcs = full_precision(scores.arcs)
        labeled = scores.labels is not None and batch.labels is not None
        if self.labeled_mtt:
            if not labeled:
                raise ValueError("labeled_mtt needs label scores and gold labels")
            arcs = arcs + full_precision(scores.labels).logsumexp(-1)
        crf = TreeCRF(arcs, batch.lengths, self.multiroot, validate_args=False)
        nll = -partial_log_prob(crf, batch.heads).sum()
        if labeled:
            unknown = batch.heads == IGNORE_INDEX
            logits = full_precision(gold_label_logits(scores.labels, batch.heads.masked_fill(unknown, 0)))
            gold = batch.labels.masked_fill(unknown, IGNORE_INDEX)
            label_nll = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
            nll = nll + self.label_weight * label_nll
        return nll / batch.lengths.sum()
