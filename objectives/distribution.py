"""``TreeCRF``: the edge-factored distribution over spanning trees as a torch distribution."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints, register_kl
from torch.distributions.utils import lazy_property

from . import expectations
from .conventions import word_mask
from .mtt import (
    Prepared,
    check_arguments,
    log_partition_and_marginals_from,
    no_autocast,
    prepare,
)


class TreeCRF(Distribution):
    """Distribution over the (single- or multi-root) spanning trees of each sentence.

    Args:
        scores: ``(B, N+1, N+1)`` arc log-weights ``scores[b, h, m]`` for h -> m, or
            ``(B, N+1, N+1, L)`` for labeled arcs.
        lengths: ``(B,)`` words per sentence; the rest is padding.
        multiroot: ``False`` (default) for single-root trees, ``True`` for multi-root.
        validate_args: check shapes, lengths and scores (NaN/+inf on arcs) on construction
            (host syncs); ``None`` follows ``torch.distributions.Distribution``'s default.

    The Laplacian is factorised once, on first use, and every quantity (``log_partition``,
    ``marginals``, ``log_prob``, ``entropy``, ``expectation``, ``cross_entropy``,
    ``kl_divergence``, T2) reads that factorisation. A value is a head vector ``(B, N+1)``
    (``heads[b, m]`` is the head of word m; 0 at position 0 and on padding). Example::

        >>> crf = TreeCRF(torch.randn(2, 4, 4), torch.tensor([3, 2]))
        >>> crf.marginals.shape, crf.entropy().shape
        (torch.Size([2, 4, 4]), torch.Size([2]))
    """

    arg_constraints = {}
    has_rsample = False
    support = constraints.independent(constraints.nonnegative_integer, 1)

    def __init__(self, scores: Tensor, lengths: Tensor, multiroot: bool = False, validate_args: bool | None = None):
        self.scores = scores
        self.lengths = torch.as_tensor(lengths, device=scores.device)
        self.multiroot = multiroot
        if Distribution._validate_args if validate_args is None else validate_args:
            check_arguments(scores, self.lengths)
        super().__init__(batch_shape=scores.shape[:1], event_shape=scores.shape[1:2], validate_args=False)

    @property
    def labeled(self) -> bool:
        return self.scores.dim() == 4

    @lazy_property
    def prepared(self) -> Prepared:
        """The masked scores and their one :class:`~objectives.mtt.Factorisation`."""
        with no_autocast(self.scores.device):
            return prepare(self.scores, self.lengths, self.multiroot, validate=False)

    @lazy_property
    def _inference(self) -> tuple[Tensor, Tensor]:
        with no_autocast(self.scores.device):
            return log_partition_and_marginals_from(self.prepared)

    @property
    def log_partition(self) -> Tensor:
        """``log Z``: ``(B,)``."""
        return self._inference[0]

    @property
    def marginals(self) -> Tensor:
        """Arc (or arc-label) marginals, the shape of ``scores``."""
        return self._inference[1]

    def log_prob(self, heads: Tensor, labels: Tensor | None = None) -> Tensor:
        """``log p(tree)``: ``(B,)``. ``labels`` ``(B, N+1)`` is required for labeled scores."""
        if self.labeled != (labels is not None):
            raise ValueError("labels must be given exactly when the scores are labeled")
        words = word_mask(self.lengths, self.scores.shape[1] - 1)  # (B, N+1)
        heads = heads.masked_fill(~words, 0)
        index = heads[:, None, :, None].expand(-1, 1, -1, self.scores.shape[-1]) if self.labeled else heads[:, None, :]
        chosen = self.scores.gather(1, index).squeeze(1)  # (B, N+1[, L]): scores of the chosen arcs
        if self.labeled:
            chosen = chosen.gather(-1, labels.masked_fill(~words, 0)[:, :, None]).squeeze(-1)
        total = chosen.masked_fill(~words, 0).sum(-1)
        return total.to(self.log_partition.dtype) - self.log_partition

    def entropy(self) -> Tensor:
        """Shannon entropy in nats: ``(B,)``."""
        return expectations.entropy_from(self.prepared)

    def expectation(self, r: Tensor) -> Tensor:
        """T1 ``E[r(d)]``: ``(B, R)`` for ``r`` of shape ``scores.shape + (R,)``."""
        return expectations.expectation_from(self.prepared, r)

    def second_order(self, r: Tensor, s: Tensor) -> Tensor:
        """T2 ``E[r(d) s(d)^T]``: ``(B, R, S)``."""
        return expectations.second_order_from(self.prepared, r, s)

    def covariance(self, r: Tensor, s: Tensor) -> Tensor:
        """T2 ``Cov(r(d), s(d))``: ``(B, R, S)``."""
        return expectations.covariance_from(self.prepared, r, s)

    def cross_entropy(self, other: "TreeCRF") -> Tensor:
        """``-E_self[log other(d)]``: ``(B,)``."""
        return expectations.cross_entropy_terms(self.prepared, other.scores, other.log_partition)[0]

    def kl_divergence(self, other: "TreeCRF") -> Tensor:
        """``KL(self || other)``: ``(B,)``."""
        return expectations.kl_from(self.prepared, other.scores, other.log_partition)

    def renyi_entropy(self, alpha: float) -> Tensor:
        """Renyi entropy of order ``alpha`` in nats: ``(B,)``."""
        if alpha == 1:
            return self.entropy()
        return expectations.renyi_from(self.prepared, self.scores, self.lengths, alpha, self.multiroot)


@register_kl(TreeCRF, TreeCRF)
def _kl_tree_crf(p: TreeCRF, q: TreeCRF) -> Tensor:
    if p.multiroot != q.multiroot or not torch.equal(p.lengths, q.lengths):
        raise ValueError("KL needs two TreeCRFs over the same tree set (lengths and multiroot)")
    return p.kl_divergence(q)
