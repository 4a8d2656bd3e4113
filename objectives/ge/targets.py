"""Where a GE loss's targets come from: the rules (:class:`RuleTargets`), the gold trees of
the labeled sample (:class:`LabeledTargets`), or a teacher's expected rates on each batch
(:class:`TeacherTargets`). Configs name them by their short names (:data:`TARGET_SOURCES`),
mapped to objects in one place (:func:`as_target_source`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

from torch import Tensor

from ..conventions import ConfigurationError
from ..objective import ObjectiveContext, Scores, TreeBatch
from .rules import Constraint

__all__ = ["TargetSource", "RuleTargets", "LabeledTargets", "TeacherTargets", "NoTargets", "TARGET_SOURCES",
           "as_target_source"]

log = logging.getLogger(__name__)


class TargetSource:
    """Where the targets ``(K,)`` of a GE loss come from (NaN: no target for that constraint).

    The loss keeps the targets it is given at construction (:meth:`initial`) and estimated in
    its setup hook (:meth:`setup`); each batch's targets are :meth:`__call__`'s.
    """

    needs_teacher = False

    def initial(self, constraints: Sequence[Constraint]) -> list[float]:
        """The targets known when the loss is built: none (NaN)."""
        return [math.nan] * len(constraints)

    def setup(self, fit_targets: Callable[[Iterable[TreeBatch]], Tensor], context: ObjectiveContext) -> None:
        """Estimate the targets before a stage (nothing to estimate here); ``fit_targets`` sets
        the loss's targets ``(K,)`` to their rates in the gold trees of labeled batches."""

    def ready(self, targets: Tensor) -> bool:
        """Whether the loss has targets to read, from its ``(K,)`` targets (a host sync)."""
        return not bool(targets.isnan().all())

    def __call__(self, targets: Tensor, teacher: Scores | None, rates: Callable[[Scores], Tensor]) -> Tensor:
        """This batch's targets ``(K,)``, from the loss's ``targets`` ``(K,)``, the teacher's
        scores, and ``rates``: the expected rates ``(K,)`` of any scores on this batch."""
        return targets


class RuleTargets(TargetSource):
    """The constraints' own targets (each constraint must have one)."""

    def initial(self, constraints: Sequence[Constraint]) -> list[float]:
        if any(c.target is None for c in constraints):
            raise ConfigurationError("constraints without a target need targets_from='labeled' or 'teacher'")
        return [c.target for c in constraints]


class LabeledTargets(TargetSource):
    """The constraints' rates in the gold trees of the labeled training sentences, estimated
    by the loss's ``fit_targets`` in the setup hook when training starts."""

    def setup(self, fit_targets: Callable[[Iterable[TreeBatch]], Tensor], context: ObjectiveContext) -> None:
        if context.stage != "fit":
            return
        if context.labeled_batches is None:
            raise ConfigurationError("GE with targets_from='labeled' estimates its targets from labeled sentences, but none were given")
        targets = fit_targets(context.labeled_batches())
        log.info("GE targets from the labeled sample: %d of %d constraints kept", int(targets.isfinite().sum()), len(targets))


class TeacherTargets(TargetSource):
    """The teacher's own expected rates on each batch, ``E_teacher[sum_e f_k(e)] / #child_k``
    (its arc marginals with the same tags), so the student matches the teacher's attachment
    statistics on the unlabeled text rather than rates measured on a labeled sample of other
    text; rule targets are not used."""

    needs_teacher = True

    def ready(self, targets: Tensor) -> bool:
        return True

    def __call__(self, targets: Tensor, teacher: Scores | None, rates: Callable[[Scores], Tensor]) -> Tensor:
        if teacher is None:
            raise ValueError("GeneralizedExpectation with targets_from='teacher' needs the teacher's scores")
        return rates(teacher)


class NoTargets(TargetSource):
    """No target per constraint: the loss brings its own (:class:`RuleCoverage`'s coverage)."""

    def ready(self, targets: Tensor) -> bool:
        return True


TARGET_SOURCES = {"rules": RuleTargets, "labeled": LabeledTargets, "teacher": TeacherTargets}
"""The target sources by the names configs give them."""


def as_target_source(source: str | TargetSource) -> TargetSource:
    """The target source named ``source`` (:data:`TARGET_SOURCES`), or ``source`` itself."""
    if isinstance(source, TargetSource):
        return source
    if source not in TARGET_SOURCES:
        raise ConfigurationError(f"targets_from must be 'rules', 'labeled' or 'teacher' (or a TargetSource), got {source!r}")
    return TARGET_SOURCES[source]()
