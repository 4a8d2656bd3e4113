"""Exact expectations under edge-factored distributions over non-projective spanning trees.

``objectives`` is a small math library over score tensors (no transformers, no Lightning):
:mod:`objectives.mtt` (log-partition, marginals), :mod:`objectives.expectations` (T1, T2,
entropies, KL), :class:`TreeCRF` (all of it as a ``torch.distributions`` object),
:mod:`objectives.baselines` (slow reference algorithms), and one module per training
objective.
"""

from .distribution import TreeCRF
from .expectations import covariance, cross_entropy, entropy, expectation, kl_divergence, renyi_entropy, second_order
from .mtt import log_partition, marginals

__all__ = [
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
]
