"""Piecewise-linear schedules of training steps (learning rate, unsupervised weight, temperature)."""

from __future__ import annotations

__all__ = ["linear_warmup_decay", "interpolate"]


def linear_warmup_decay(step: int, warmup: int, total: int | None) -> float:
    """A factor in [0, 1]: ``step / warmup`` during the warm-up, then 1 if ``total`` is None,
    else a linear fall from 1 at ``warmup`` to 0 at ``total`` (0 from then on)."""
    if warmup > 0 and step < warmup:
        return step / warmup
    if total is None:
        return 1.0
    return max(0.0, (total - step) / max(total - warmup, 1))


def interpolate(start: float, end: float, step: int, steps: int) -> float:
    """``start`` at step 0, ``end`` from ``steps`` on, linear in between (``steps > 0``)."""
    return start + (end - start) * min(max(step / steps, 0.0), 1.0)
