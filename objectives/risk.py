"""Minimum-risk training (Smith & Eisner 2006) with optional deterministic annealing."""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import full_precision, gold_label_logits
from .conventions import IGNORE_INDEX, ConfigurationError
from .distribution import TreeCRF
from .objective import Objective, ObjectiveContext, Scores, TreeBatch
from .schedule import Schedule


class Risk(Objective):
    """Expected attachment loss ``1 - E[attachment score]``, averaged over sentences.

    The attachment score of a tree is additively decomposable, ``r_e = [e in gold] / n``,
    so its expectation is T1: the sum of the marginals of the gold arcs over ``n``.
    ``labeled=True`` counts an arc when head and label match: the gold arc h -> m adds
    ``mu[h, m] * softmax(labels[h, m])[gold label]``; a gold label ``-100`` (unseen in
    training) never matches.

    Deterministic annealing (Li & Eisner 2009, eq. 14): each sentence minimises
    ``R - T * H`` with ``R`` its expected number of attachment errors and ``H`` its tree
    entropy in nats, divided by its length like the risk: ``loss = mean_b (R_b - T H_b) / n_b``
    (so ``T`` trades errors against nats per word). ``T`` is a number or a
    :class:`~objectives.schedule.Schedule` of the step, e.g. ``{value: 1.0, decay: linear,
    final: 0.0, until: 1000}`` falls linearly from 1 to 0 over the first 1000 steps (linear
    so that it can reach 0). ``T = 0`` skips the entropy.

    Args:
        labeled: labeled attachment (needs label scores and gold labels).
        temperature: ``T``, constant or scheduled.
    """

    needs_gold = True

    def __init__(self, labeled: bool = False, temperature: float | Schedule = 0.0) -> None:
        super().__init__()
        self.temperature = Schedule.of(temperature)
        if min(self.temperature.value, self.temperature.final) < 0:
            raise ConfigurationError("temperatures must be non-negative")
        self.labeled = labeled
        self.total_steps: int | None = None

    def setup(self, context: ObjectiveContext) -> None:
        super().setup(context)
        self.total_steps = context.total_steps

    def temperature_at(self, step: int) -> float:
        """The annealing temperature ``T`` at a training step."""
        return self.temperature(step, self.total_steps)

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar loss for ``scores.arcs`` ``(B, N+1, N+1)`` (and ``scores.labels`` ``(B, N+1, N+1, L)``)."""
        if self.labeled and (scores.labels is None or batch.labels is None):
            raise ValueError("labeled risk needs label scores and gold labels")
        crf = TreeCRF(full_precision(scores.arcs), batch.lengths, self.multiroot, validate_args=False)
        # mu of each word's gold arc, (B, N+1); exactly 0 at position 0 and on padding (non-arcs)
        correct = crf.marginals.gather(1, batch.heads[:, None, :]).squeeze(1)
        if self.labeled:
            label_probs = full_precision(gold_label_logits(scores.labels, batch.heads)).softmax(-1)
            known = batch.labels != IGNORE_INDEX
            gold = label_probs.gather(-1, batch.labels.masked_fill(~known, 0)[..., None]).squeeze(-1)
            correct = correct * torch.where(known, gold, 0.0)
        objective = batch.lengths - correct.sum(1)  # (B,) expected attachment errors
        temperature = self.temperature_at(step)
        if temperature:
            objective = objective - temperature * crf.entropy()
        return (objective / batch.lengths).mean()
