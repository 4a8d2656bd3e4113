"""Exact expectations under edge-factored distributions over non-projective spanning trees.

``objectives`` is a small math library over score tensors (no transformers, no Lightning):
:mod:`objectives.mtt` (log-partition, marginals), :mod:`objectives.expectations` (T1, T2,
entropies, KL), :class:`TreeCRF` (all of it as a ``torch.distributions`` object),
:mod:`objectives.baselines` (slow reference algorithms), one module per training
objective, and the project's shared conventions (:mod:`objectives.conventions`: the ignore
index, the UD tag set, the arc mask) and the :class:`Schedule` of every weight and
temperature (:mod:`objectives.schedule`).
"""

from .conventions import IGNORE_INDEX, UPOS_TAGS, ConfigurationError, arc_mask, word_mask
from .distribution import TreeCRF
from .entropy_regularizer import EntropyRegularizer
from .expectations import (
    covariance,
    cross_entropy,
    entropy,
    expectation,
    kl_divergence,
    renyi_entropy,
    second_order,
)
from .ge import Constraint, GeneralizedExpectation, RuleCoverage, estimate_targets, load_constraints
from .kl import Distillation
from .likelihood import Likelihood
from .mtt import log_partition, marginals
from .objective import Objective, ObjectiveContext, Scores
from .risk import Risk
from .sampled import SampledSelfTraining
from .schedule import Schedule, linear_warmup_decay
from .tagging import TagLikelihood

__all__ = [
    "ConfigurationError",
    "TreeCRF",
    "log_partition",
    "marginals",
    "expectation",
    "second_order",
    "covariance",
    "entropy",
    "cross_entropy",
    "kl_divergence",
    "renyi_entropy",
    "Objective",
    "Scores",
    "ObjectiveContext",
    "Likelihood",
    "Risk",
    "EntropyRegularizer",
    "TagLikelihood",
    "Distillation",
    "SampledSelfTraining",
    "GeneralizedExpectation",
    "RuleCoverage",
    "Constraint",
    "load_constraints",
    "estimate_targets",
    "IGNORE_INDEX",
    "UPOS_TAGS",
    "arc_mask",
    "word_mask",
    "linear_warmup_decay",
    "Schedule",
]
