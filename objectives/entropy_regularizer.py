"""Entropy regularisation on unlabeled text: minimise the entropy of the tree distribution."""

from __future__ import annotations

from torch import Tensor

from ._common import full_precision
from .conventions import ConfigurationError
from .expectations import entropy, renyi_entropy
from .objective import Objective, Scores, TreeBatch


class EntropyRegularizer(Objective):
    """Tree entropy per word: ``sum_b H(p_b) / lengths.sum()`` in nats.

    The entropy of a sentence grows with its length (up to ``(n-1) log n``), so it is
    normalised per word like :class:`~objectives.likelihood.Likelihood`. Minimising it
    makes the parser confident on unlabeled text (Grandvalet & Bengio's entropy
    regularisation over trees). Only arc scores are used.

    Args:
        alpha: ``None`` for the Shannon entropy, else the Renyi entropy of that (positive)
            order: two MTT calls, ``(log Z(alpha s) - alpha log Z(s)) / (1 - alpha)``.
    """

    def __init__(self, alpha: float | None = None) -> None:
        super().__init__()
        if alpha is not None and not alpha > 0:
            raise ConfigurationError(f"alpha must be positive, got {alpha}")
        self.alpha = alpha

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar loss for ``scores.arcs`` ``(B, N+1, N+1)``."""
        arcs = full_precision(scores.arcs)
        if self.alpha is None:
            value = entropy(arcs, batch.lengths, self.multiroot, validate=False)
        else:
            value = renyi_entropy(arcs, batch.lengths, self.alpha, self.multiroot, validate=False)
        return value.sum() / batch.lengths.sum()
