"""GE penalties: the cost of each model rate ``p_k`` against its target ``t_k``.

A :class:`Penalty` maps rates, targets, the words (or arcs) each rate was measured on and
each constraint's own margin, all ``(K,)``, to the ``(K,)`` terms that the loss weights and sums. Configs name them by their short names
(:data:`PENALTIES`), mapped to objects in one place (:func:`as_penalty`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..conventions import ConfigurationError

__all__ = ["Penalty", "Squared", "AbsoluteError", "OneSided", "BernoulliKL", "PENALTIES", "as_penalty"]

EPS = 1e-6  # rates and targets are clamped to [eps, 1 - eps] inside the Bernoulli KL


class Penalty:
    """The cost of each rate: ``(K,)`` rates, targets (finite), the words each rate was
    measured on (> 0) and margins (>= 0: a band around the target that costs nothing, where
    the penalty has one) -> ``(K,)`` terms."""

    def __call__(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class _Banded(Penalty):
    """A penalty of the gap ``p_k - t_k``, shrunk by ``tolerance`` standard errors or the
    constraint's own margin, whichever is wider.

    With ``tolerance`` z > 0 a rate within z standard errors of its target costs nothing: the
    gap is shrunk by ``z sqrt(t_k (1 - t_k) / n_k)``, the binomial standard error of a rate
    measured on the batch's ``n_k`` child words, so that a batch is not pushed to match the
    corpus-wide rate where it differs from it by sampling noise alone (the slack of posterior
    regularisation's box constraints, Ganchev et al. 2010). A margin ``m_k`` (a statistic's
    stated tolerance, e.g. its bootstrap standard error: Effland & Collins 2023) shrinks it by
    at least ``m_k``. Rates above 1 (dependents per head) take their margin only.
    """

    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ConfigurationError(f"tolerance must be >= 0 standard errors, got {self.tolerance}")

    def gap(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        """``p_k - t_k`` ``(K,)``, shrunk towards 0 by the band."""
        gap = rates - targets
        band = margins
        if self.tolerance:  # the root over the target alone: a target of 0 or 1 has no band, and no infinite slope
            band = band.maximum(self.tolerance * (targets * (1 - targets)).clamp_min(0).sqrt() * counts.rsqrt())
        return gap.sign() * (gap.abs() - band).clamp_min(0.0)


class Squared(_Banded):
    """``(p_k - t_k)^2`` (of the banded gap)."""

    def __call__(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        return self.gap(rates, targets, counts, margins) ** 2


class AbsoluteError(_Banded):
    """``|p_k - t_k|`` (of the banded gap): Effland & Collins's (2023) L1 loss with a margin,
    whose pull does not fade as a rate nears its band."""

    def __call__(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        return self.gap(rates, targets, counts, margins).abs()


class OneSided(_Banded):
    """``max(0, t_k - p_k)^2`` (of the banded gap): a target read as a lower bound (the rules
    of Naseem et al. 2010 say how often an attachment should at least occur, in the spirit of
    posterior regularisation): 0 while every rate reaches its target."""

    def __call__(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        return (-self.gap(rates, targets, counts, margins)).clamp_min(0.0) ** 2


@dataclass(frozen=True)
class BernoulliKL(Penalty):
    """``KL(Bernoulli(t_k) || Bernoulli(p_k))`` with ``p_k`` and ``t_k`` clamped to
    ``[1e-6, 1 - 1e-6]``, so that a rate equal to a target of 0 or 1 costs exactly 0 (no band:
    margins are not read)."""

    def __call__(self, rates: Tensor, targets: Tensor, counts: Tensor, margins: Tensor) -> Tensor:
        rates, targets = rates.clamp(EPS, 1 - EPS), targets.clamp(EPS, 1 - EPS)
        return targets * (targets / rates).log() + (1 - targets) * ((1 - targets) / (1 - rates)).log()


PENALTIES = {"squared": Squared, "l1": AbsoluteError, "kl": BernoulliKL, "one_sided": OneSided}
"""The penalties by the names configs give them."""


def as_penalty(penalty: str | Penalty, tolerance: float = 0.0) -> Penalty:
    """The penalty named ``penalty`` (:data:`PENALTIES`) with ``tolerance``, or ``penalty`` itself
    (then it carries its own tolerance)."""
    if isinstance(penalty, Penalty):
        if tolerance:
            raise ConfigurationError("tolerance goes with a penalty's name; a Penalty object carries its own")
        return penalty
    if penalty not in PENALTIES:
        raise ConfigurationError(f"penalty must be one of {', '.join(PENALTIES)} (or a Penalty), got {penalty!r}")
    if not issubclass(PENALTIES[penalty], _Banded):
        if tolerance:
            raise ConfigurationError("tolerance applies to the 'squared', 'l1' and 'one_sided' penalties, not 'kl'")
        return PENALTIES[penalty]()
    return PENALTIES[penalty](tolerance)
