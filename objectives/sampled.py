"""Self-training from trees sampled out of the teacher's distribution."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._common import full_precision
from .conventions import ConfigurationError
from .distribution import TreeCRF
from .likelihood import Likelihood
from .objective import Objective, ObjectiveContext, Scores, TreeBatch


@dataclass
class _SampledTrees:
    """The fields of a batch :class:`Likelihood` reads, with sampled trees as gold."""

    lengths: Tensor
    upos: Tensor
    heads: Tensor
    labels: Tensor | None


class SampledSelfTraining(Objective):
    """The student's negative log-likelihood of trees drawn from the teacher, per word.

    Each step draws ``samples`` exact trees per sentence from the teacher's distribution
    (:meth:`TreeCRF.sample`; with ``labeled`` and label scores on both sides, each arc's
    label from the teacher's label softmax) and averages :class:`Likelihood` of the student
    over them, the samples standing in for gold trees. The tree term's expectation is the
    cross-entropy ``H(teacher, student)``, so its gradient is an unbiased estimate of the
    exact distillation gradient (:class:`~objectives.kl.Distillation`); what sampling adds is
    hard trees, as self-training on 1-best parses has, that still follow the teacher's
    uncertainty. The samples come from the global random generator (seeded runs repeat,
    resumed runs too).

    Args:
        samples: trees drawn per sentence and step.
        labeled: draw labels too and train the student's labels on them.
    """

    needs_teacher = True

    def __init__(self, samples: int = 1, labeled: bool = True) -> None:
        super().__init__()
        if samples < 1:
            raise ConfigurationError(f"samples must be at least 1, got {samples}")
        self.samples = samples
        self.labeled = labeled
        self.likelihood = Likelihood()

    def setup(self, context: ObjectiveContext) -> None:
        super().setup(context)
        self.likelihood.setup(context)

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar loss for the student's ``scores`` given the ``teacher``'s (arcs ``(B, N+1, N+1)``,
        labels ``(B, N+1, N+1, L)``)."""
        if teacher is None:
            raise ValueError("SampledSelfTraining needs the teacher's scores")
        labeled = self.labeled and scores.labels is not None and teacher.labels is not None
        arcs = full_precision(teacher.arcs).detach()
        if labeled:
            arcs = arcs[..., None] + full_precision(teacher.labels).detach().log_softmax(-1)
        drawn = TreeCRF(arcs, batch.lengths, self.multiroot, validate_args=False).sample((self.samples,))
        heads, labels = drawn if labeled else (drawn, [None] * self.samples)
        losses = [self.likelihood(scores, _SampledTrees(batch.lengths, batch.upos, h, l)) for h, l in zip(heads, labels)]
        return torch.stack(losses).mean()
