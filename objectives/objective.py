"""The interface every training objective implements."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn


@dataclass
class Scores:
    """What a parser produces for one batch.

    Attributes:
        arcs: ``(B, N+1, N+1)`` arc log-weights, ``arcs[b, h, m]`` for h -> m.
        labels: ``(B, N+1, N+1, L)`` label logits per arc, or ``None`` for unlabeled parsers.
        tags: ``(B, N+1, T)`` UPOS logits per word, or ``None`` for parsers without a tagger.
    """

    arcs: Tensor
    labels: Tensor | None = None
    tags: Tensor | None = None


class TreeBatch(Protocol):
    """The fields of a batch an objective may read (see docs/architecture.md)."""

    lengths: Tensor  # (B,)
    # (B, N+1) long ids into the UPOS vocabulary (ObjectiveContext.tags), or (B, N+1, T) float
    # tag probabilities over that vocabulary (predicted tags; position 0 and padding ignored)
    upos: Tensor
    heads: Tensor | None  # (B, N+1), gold heads or None on unlabeled data
    labels: Tensor | None  # (B, N+1), gold labels (-100 = ignore) or None


@dataclass(frozen=True)
class ObjectiveContext:
    """What a model tells its objectives before a stage, through :meth:`Objective.setup`.

    Attributes:
        stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
        multiroot: the tree set, owned by the model: multi-root trees (``True``) or
            single-root ones (``False``).
        tags: the UPOS vocabulary; ``tags[i]`` is the tag of id ``i`` in ``batch.upos``.
        labels: the label (DEPREL) vocabulary; ``labels[i]`` is the label of id ``i``.
        labeled_batches: the labeled training sentences as batches (gold heads, labels, UPOS),
            for objectives that estimate something from them; ``None`` outside ``fit``.
        total_steps: the training run's length in optimiser steps (for schedules that
            end with it), or ``None`` outside ``fit``.
    """

    stage: str
    multiroot: bool = False
    tags: Sequence[str] = ()
    labels: Sequence[str] = ()
    labeled_batches: Callable[[], Iterable[TreeBatch]] | None = None
    total_steps: int | None = None


class Objective(nn.Module):
    """A loss over parser scores: ``objective(scores, batch, teacher=None, step=0) -> scalar``.

    Class attributes say what the objective needs: ``needs_gold`` (gold heads/labels, so
    labeled batches only), ``needs_teacher`` (the caller passes the teacher's
    :class:`Scores`), ``needs_upos`` (gold or predicted UPOS in the batch),
    ``needs_tag_scores`` (``scores.tags``: the model grows a tagging head).
    What changes at every call comes with the call: the teacher's scores and the training
    step (``step``, for schedules).
    :meth:`setup` receives the model's :class:`ObjectiveContext` before each stage; the
    tree set (``multiroot``) comes from there and defaults to single-root trees.
    """

    needs_gold: bool = False
    needs_teacher: bool = False
    needs_upos: bool = False
    needs_tag_scores: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.multiroot = False

    def setup(self, context: ObjectiveContext) -> None:
        """Take what this objective needs from the model (vocabularies, tree set, labeled
        sample, the run's length). Subclasses that override it call ``super().setup``."""
        self.multiroot = context.multiroot

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        raise NotImplementedError
