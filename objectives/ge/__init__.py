"""Generalized expectation (GE) criteria on dependency arcs (Druck et al. 2009; Naseem et al. 2010).

A :class:`Constraint` says how often a word of tag ``child`` should attach to a word of tag
``parent`` (any word for ``"any"``, the root for ``"root"``), optionally on one side, at a
distance and with a label; GE pulls the model's expected rate of each constraint towards its
target. One module per concept:

- :mod:`~objectives.ge.rules`: :class:`Constraint` and YAML rules files (:func:`load_constraints`).
- :mod:`~objectives.ge.families`: the constraint sets named in configs (``"tag_pairs"``,
  ``"distances"``, ``"labels"``, ``"label_sides"``, ``"pair_sides"``, ``"valency"``), whose
  targets are estimated from a labeled sample.
- :mod:`~objectives.ge.facts`: a language's facts (WALS word-order features, free-form lines)
  as constraints.
- :mod:`~objectives.ge.compiled`: constraints -> tensors (tag ids, arc classes, masks).
- :mod:`~objectives.ge.counts`: expected and gold counts, rates, :func:`estimate_targets`.
- :mod:`~objectives.ge.penalties` (squared, one-sided, Bernoulli KL) and
  :mod:`~objectives.ge.targets` (rules, labeled sample, teacher): the small objects the loss takes.
- :mod:`~objectives.ge.loss`: :class:`GeneralizedExpectation` and :class:`RuleCoverage`.
"""

from .counts import MIN_COUNT, estimate_targets
from .facts import read_facts
from .families import (
    DISTANCE_BUCKETS,
    DISTANCES,
    FAMILIES,
    LABEL_SIDES,
    LABELS,
    PAIR_SIDES,
    TAG_PAIRS,
    VALENCY,
    distance_constraints,
    label_constraints,
    label_side_constraints,
    pair_side_constraints,
    tag_pair_constraints,
    valency_constraints,
)
from .loss import GeneralizedExpectation, RuleCoverage
from .penalties import PENALTIES, AbsoluteError, BernoulliKL, OneSided, Penalty, Squared
from .rules import ANY, ROOT, Constraint, load_constraints
from .targets import TARGET_SOURCES, LabeledTargets, RuleTargets, TargetSource, TeacherTargets

__all__ = [
    "ROOT", "ANY", "TAG_PAIRS", "DISTANCES", "DISTANCE_BUCKETS", "LABELS", "LABEL_SIDES", "PAIR_SIDES", "VALENCY",
    "FAMILIES", "MIN_COUNT", "Constraint", "load_constraints", "read_facts", "tag_pair_constraints",
    "distance_constraints", "label_constraints", "label_side_constraints", "pair_side_constraints",
    "valency_constraints", "estimate_targets",
    "GeneralizedExpectation", "RuleCoverage", "Penalty", "Squared", "AbsoluteError", "OneSided", "BernoulliKL",
    "PENALTIES", "TargetSource", "RuleTargets", "LabeledTargets", "TeacherTargets", "TARGET_SOURCES",
]  # fmt: skip
