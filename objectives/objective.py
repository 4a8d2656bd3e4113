"""The interface every training objective implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn


@dataclass
class Scores:
    """What a parser produces for one batch.

    Attributes:
        arcs: ``(B, N+1, N+1)`` arc log-weights, ``arcs[b, h, m]`` for h -> m.
        labels: ``(B, N+1, N+1, L)`` label logits per arc, or ``None`` for unlabeled parsers.
    """

    arcs: Tensor
    labels: Tensor | None = None


class TreeBatch(Protocol):
    """The fields of a batch an objective may read (see docs/architecture.md)."""

    lengths: Tensor  # (B,)
    upos: Tensor  # (B, N+1)
    heads: Tensor | None  # (B, N+1), gold heads or None on unlabeled data
    labels: Tensor | None  # (B, N+1), gold labels (-100 = ignore) or None


class Objective(nn.Module):
    """A loss over parser scores: ``objective(scores, batch, teacher=None) -> scalar``.

    Class attributes say what the objective needs: ``needs_gold`` (gold heads/labels, so
    labeled batches only), ``needs_teacher`` (the caller passes the teacher's
    :class:`Scores`), ``needs_upos`` (gold or predicted UPOS in the batch).
    ``global_step`` is set by the training loop before each call, for schedules.
    """

    needs_gold: bool = False
    needs_teacher: bool = False
    needs_upos: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.global_step = 0

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None) -> Tensor:
        raise NotImplementedError
