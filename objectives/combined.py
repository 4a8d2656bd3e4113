"""Several objectives on the same batch, each with its own weight and schedule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from .conventions import ConfigurationError
from .objective import Objective, ObjectiveContext, Scores, TreeBatch
from .schedule import linear_warmup_decay

Schedule = Literal["constant", "linear_decay"]


class Combined(Objective):
    """``sum_i weights[i] * f_i(step) * objectives[i](scores, batch, teacher)``.

    ``f_i`` ramps linearly from 0 over ``warmups[i]`` steps, then stays at 1
    (``"constant"``) or falls linearly to 0 at the run's last step (``"linear_decay"``),
    as the parser's own lambda does (:func:`~objectives.schedule.linear_warmup_decay`).
    Each term's value is kept in :attr:`values` (detached) for logging.

    Args:
        objectives: the terms, e.g. entropy, GE and distillation.
        weights: one weight per term (default: 1 each).
        warmups: warm-up steps per term (default: 0 each).
        schedules: ``"constant"`` or ``"linear_decay"`` per term (default: constant).
    """

    def __init__(self, objectives: Sequence[Objective], weights: Sequence[float] | None = None,
                 warmups: Sequence[int] | None = None, schedules: Sequence[Schedule] | None = None) -> None:
        super().__init__()
        n = len(objectives)
        if n == 0:
            raise ConfigurationError("Combined needs at least one objective")
        self.terms = nn.ModuleList(objectives)
        self.weights = list(weights) if weights is not None else [1.0] * n
        self.warmups = list(warmups) if warmups is not None else [0] * n
        self.schedules = list(schedules) if schedules is not None else ["constant"] * n
        for name, values in (("weights", self.weights), ("warmups", self.warmups), ("schedules", self.schedules)):
            if len(values) != n:
                raise ConfigurationError(f"{len(values)} {name} for {n} objectives")
        if not set(self.schedules) <= {"constant", "linear_decay"}:
            raise ConfigurationError(f"schedules must be 'constant' or 'linear_decay', got {self.schedules}")
        self.needs_gold = any(o.needs_gold for o in objectives)
        self.needs_teacher = any(o.needs_teacher for o in objectives)
        self.needs_upos = any(o.needs_upos for o in objectives)
        self.total_steps: int | None = None
        self.values: dict[str, Tensor] = {}

    def setup(self, context: ObjectiveContext) -> None:
        super().setup(context)
        self.total_steps = context.total_steps
        for term in self.terms:
            term.setup(context)

    def factors(self, step: int) -> list[float]:
        """Each term's weight times its schedule at ``step``."""
        out = []
        for weight, warmup, schedule in zip(self.weights, self.warmups, self.schedules):
            if schedule == "linear_decay" and self.total_steps is None:
                raise RuntimeError("a linear_decay term needs the run's length: setup() with total_steps first")
            total = self.total_steps if schedule == "linear_decay" else None
            out.append(weight * linear_warmup_decay(step, warmup, total))
        return out

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """The weighted sum of the terms (a scalar)."""
        total = torch.zeros((), device=scores.arcs.device)
        self.values = {}
        for term, factor in zip(self.terms, self.factors(step)):
            if factor == 0:
                continue  # warming up from 0, or decayed to 0: nothing to compute
            value = term(scores, batch, teacher if term.needs_teacher else None, step)
            self.values[type(term).__name__] = value.detach()
            total = total + factor * value
        return total
