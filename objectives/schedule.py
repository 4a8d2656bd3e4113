"""Numbers that change with the training step: every weight, temperature and learning-rate
factor of the project is a :class:`Schedule` (or a plain number, a constant schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .conventions import ConfigurationError

__all__ = ["Schedule", "linear_warmup_decay"]


def linear_warmup_decay(step: int, warmup: int, total: int | None) -> float:
    """A factor in [0, 1]: ``step / warmup`` during the warm-up, then 1 if ``total`` is None,
    else a linear fall from 1 at ``warmup`` to 0 at ``total`` (0 from then on)."""
    if warmup > 0 and step < warmup:
        return step / warmup
    if total is None:
        return 1.0
    return max(0.0, (total - step) / max(total - warmup, 1))


@dataclass(frozen=True)
class Schedule:
    """``value`` at a training step: ramped up linearly from 0 over ``warmup`` steps, then
    ``constant``, or with ``decay="linear"`` falling linearly to ``final`` at step ``until``
    (the run's last step when ``None``) and staying there.

    In YAML: ``weight: 0.1`` (constant) or ``weight: {value: 0.1, warmup: 100, decay: linear}``.
    """

    value: float = 1.0
    warmup: int = 0
    decay: Literal["constant", "linear"] = "constant"
    final: float = 0.0
    until: int | None = None

    def __post_init__(self) -> None:
        if self.decay not in ("constant", "linear"):
            raise ConfigurationError(f"a schedule's decay is 'constant' or 'linear', not {self.decay!r}")
        if self.warmup < 0 or (self.until is not None and self.until <= self.warmup):
            raise ConfigurationError(f"a schedule needs 0 <= warmup < until, got warmup {self.warmup}, until {self.until}")

    @classmethod
    def of(cls, value: float | Schedule) -> Schedule:
        """``value`` as a schedule (a number is a constant one)."""
        return value if isinstance(value, Schedule) else cls(float(value))

    def __call__(self, step: int, total_steps: int | None = None) -> float:
        """The value at ``step`` of a run of ``total_steps`` optimiser steps."""
        if self.decay == "constant":
            end = None
        elif self.until is not None:
            end = self.until
        elif total_steps is None:
            raise RuntimeError("a schedule decaying to the run's last step needs the run's length (total_steps)")
        else:
            end = total_steps
        factor = linear_warmup_decay(step, self.warmup, end)
        if step < self.warmup:
            return self.value * factor
        return self.final + (self.value - self.final) * factor
