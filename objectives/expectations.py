"""First- and second-order expectations under edge-factored tree distributions.

The algorithms T1 and T2 of Zmigrod, Vieira & Cotterell (2021). Conventions are those of
:mod:`objectives.mtt`: ``scores`` ``(B, N+1, N+1)`` (or ``(B, N+1, N+1, L)`` labeled),
``lengths`` ``(B,)``, ``multiroot`` picks the tree set. An additively decomposable function
``r(d) = sum_{e in d} r_e`` is given per arc as ``r`` ``(B, N+1, N+1, R)`` (labeled:
``(B, N+1, N+1, L, R)``); values on non-arcs and padding are ignored.

* T1 (``expectation``, ``entropy``, ``cross_entropy``, ``kl_divergence``): one
  factorisation and a contraction with the marginals, O(N^3 + R N^2). Their gradients
  come from the closed-form marginal backward of :mod:`objectives.mtt` (O(N^3)).
* T2 (``second_order``, ``covariance``): ``Cov(r, s)_kl = sum_e mu_e r_ek s_el -
  tr(L(w r_k) X L(w s_l) X)`` with ``X = L^{-1}``, O(min(R, S) N^3 + R S N^2), never the
  N^2 x N^2 Hessian.
* Zeroth order (``renyi_entropy``): two MTT calls.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .mtt import (
    Factorisation,
    Prepared,
    closed_form_gradient,
    exact_derivatives,
    laplacian,
    log_partition_and_marginals_from,
    no_autocast,
    prepare,
    weighted_adjoint,
)

__all__ = [
    "expectation",
    "second_order",
    "covariance",
    "covariance_with_arcs",
    "entropy",
    "cross_entropy",
    "kl_divergence",
    "renyi_entropy",
]


def _finite(scores: Tensor) -> Tensor:
    """Scores with -inf (forbidden arcs, marginal exactly 0) and padding garbage replaced by 0
    so that products with the marginals stay finite."""
    return scores.masked_fill(~torch.isfinite(scores), 0.0)


def _check_features(scores: Tensor, r: Tensor, name: str) -> None:
    if r.dim() != scores.dim() + 1 or r.shape[:-1] != scores.shape:
        raise ValueError(
            f"{name} must have shape {tuple(scores.shape)} + (features,), got {tuple(r.shape)}"
        )


def _prepared(scores: Tensor, lengths: Tensor, multiroot: bool, validate: bool) -> Prepared:
    with no_autocast(scores.device):
        return prepare(scores, lengths, multiroot, validate)


# --------------------------------------------------------------------------- T1


def expectation(scores: Tensor, lengths: Tensor, r: Tensor, multiroot: bool = False, validate: bool = True) -> Tensor:
    """T1: ``E[r(d)]`` for an additively decomposable ``r``. Returns ``(B, R)``."""
    _check_features(scores, r, "r")  # before the factorisation
    return expectation_from(_prepared(scores, lengths, multiroot, validate), r)


def expectation_from(prepared: Prepared, r: Tensor) -> Tensor:
    """:func:`expectation` of a :class:`~objectives.mtt.Prepared` batch."""
    filled, arcs, factor = prepared
    _check_features(filled, r, "r")
    with no_autocast(arcs.device):
        if filled.dim() == 4 or r.requires_grad:  # labeled, or r needs its own gradient
            mu = log_partition_and_marginals_from(prepared, with_log_z=False)[1]
            return _contract(mu, r.to(mu.dtype))
        features = r.to(factor.weights.dtype)
        value = _contract(factor.marginals(), features).to(arcs.dtype)
        if not (torch.is_grad_enabled() and arcs.requires_grad):
            return value
        # the gradient sum_k g_k Cov(r_k, 1_e): one marginal VJP in the direction r g
        direction = lambda grad: (features.flatten(1, -2) @ grad.unsqueeze(-1)).view_as(factor.weights)  # noqa: E731
        return closed_form_gradient(arcs, value, factor, direction)


def _contract(mu: Tensor, r: Tensor) -> Tensor:
    """``sum_e mu_e r_e``: ``(B, ...)``, ``(B, ..., R)`` -> ``(B, R)`` (one batched matmul)."""
    return (mu.flatten(1).unsqueeze(1) @ r.flatten(1, -2)).squeeze(1)


def entropy(scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True) -> Tensor:
    """Shannon entropy in nats, ``log Z - sum_e mu_e scores_e``: ``(B,)``."""
    return entropy_from(_prepared(scores, lengths, multiroot, validate))


def entropy_from(prepared: Prepared) -> Tensor:
    """:func:`entropy` of a :class:`~objectives.mtt.Prepared` batch (no new factorisation)."""
    filled, arcs, factor = prepared
    with no_autocast(arcs.device):
        if filled.dim() == 4:
            log_z, mu = log_partition_and_marginals_from(prepared)
            return (log_z - (mu * _finite(filled)).flatten(1).sum(1)).clamp_min(0.0)  # < 0 only by rounding
        value = _entropy(factor).to(arcs.dtype)
        if not (torch.is_grad_enabled() and arcs.requires_grad):
            return value
        # the gradient -H s (H the Hessian of log Z): the marginal VJP in the direction -g s
        direction = lambda grad: factor.finite_log_weights() * grad.neg().view(-1, 1, 1)  # noqa: E731
        return closed_form_gradient(arcs, value, factor, direction)


def _entropy(factor: Factorisation) -> Tensor:
    """``H`` ``(B,)`` from the log-weights ``s = factor.finite_log_weights()`` ``(B, N+1, N+1)``
    (0 off the arcs and on forbidden arcs).

    ``H = log Z - sum_e mu_e scores_e = log det L(w) - sum_e mu_e log w_e``: each word's
    marginals sum to 1, so the per-word shifts cancel exactly instead of in rounding; and
    the Hessian of log Z maps per-word shifts to 0, so ``s`` also gives the gradient.
    """
    expected = (factor.marginals() * factor.finite_log_weights()).sum((-2, -1))  # sum_e mu_e s_e
    return (factor.log_det - expected).clamp_min_(0.0)  # < 0 only by rounding


def cross_entropy(
    p_scores: Tensor, q_scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True
) -> Tensor:
    """``-E_p[log q(d)] = log Z_q - sum_e mu^p_e q_e``: ``(B,)``."""
    p, log_zq = _pair(p_scores, q_scores, lengths, multiroot, validate)
    return cross_entropy_terms(p, q_scores, log_zq)[0]


def kl_divergence(
    p_scores: Tensor, q_scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True
) -> Tensor:
    """``KL(p || q) = log Z_q - log Z_p + sum_e mu^p_e (p_e - q_e)`` over one tree set: ``(B,)``."""
    p, log_zq = _pair(p_scores, q_scores, lengths, multiroot, validate)
    return kl_from(p, q_scores, log_zq)


def _pair(p_scores, q_scores, lengths, multiroot, validate) -> tuple[Prepared, Tensor]:
    """p prepared, and ``log Z_q`` ``(B,)``."""
    if p_scores.shape != q_scores.shape:
        raise ValueError(f"q_scores must have the shape of p_scores {tuple(p_scores.shape)}, got {tuple(q_scores.shape)}")
    q = _prepared(q_scores, lengths, multiroot, validate)
    with no_autocast(q_scores.device):
        log_zq = log_partition_and_marginals_from(q)[0]
    return _prepared(p_scores, lengths, multiroot, validate), log_zq


def kl_from(p: Prepared, q_scores: Tensor, log_zq: Tensor) -> Tensor:
    """:func:`kl_divergence` from p :class:`~objectives.mtt.Prepared`, q's scores and ``log Z_q``."""
    cross, log_zp, mu_p = cross_entropy_terms(p, q_scores, log_zq)
    kl = cross - log_zp + (mu_p * _finite(p.filled).to(mu_p.dtype)).flatten(1).sum(1)
    return kl.clamp_min(0.0)  # only rounding can make it negative


def cross_entropy_terms(p: Prepared, q_scores: Tensor, log_zq: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Cross-entropy ``(B,)`` plus the ``log Z_p`` and ``mu^p`` it was built from."""
    with no_autocast(q_scores.device):
        log_zp, mu_p = log_partition_and_marginals_from(p)
        q = q_scores.to(mu_p.dtype)
        cross = log_zq.to(mu_p.dtype) - (mu_p * _finite(q)).flatten(1).sum(1)
        impossible = ((mu_p > 0) & (q == float("-inf"))).flatten(1).any(1)  # p puts mass where q has none
    return cross.masked_fill(impossible, float("inf")), log_zp, mu_p


def renyi_entropy(scores: Tensor, lengths: Tensor, alpha: float, multiroot: bool = False, validate: bool = True) -> Tensor:
    """Renyi entropy of order ``alpha`` in nats: ``(log Z(a s) - a log Z(s)) / (1 - a)``, ``(B,)``.

    ``alpha = 1`` is the Shannon entropy (the limit); ``alpha`` must be positive.
    """
    prepared = _prepared(scores, lengths, multiroot, validate)
    return entropy_from(prepared) if alpha == 1 else renyi_from(prepared, scores, lengths, alpha, multiroot)


def renyi_from(prepared: Prepared, scores: Tensor, lengths: Tensor, alpha: float, multiroot: bool) -> Tensor:
    """:func:`renyi_entropy` (``alpha != 1``) with ``log Z(s)`` from ``prepared``."""
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    log_z = log_partition_and_marginals_from(prepared)[0]
    scaled = log_partition_and_marginals_from(_prepared(alpha * scores, lengths, multiroot, False))[0]
    return (scaled - alpha * log_z) / (1 - alpha)


# --------------------------------------------------------------------------- T2


def covariance(scores: Tensor, lengths: Tensor, r: Tensor, s: Tensor, multiroot: bool = False) -> Tensor:
    """T2: ``Cov(r(d), s(d))``, ``(B, R, S)``, differentiable w.r.t. ``scores``, ``r`` and ``s``.

    Labeled scores: ``r`` and ``s`` are per labeled arc; labels are independent given the
    tree (softmax ``q``), so ``Cov = Cov_arcs(rbar, sbar) + sum_e mu_e Cov_q(r_e, s_e)`` with
    ``rbar_e = E_q[r_e]``.
    """
    _check_features(scores, r, "r")
    _check_features(scores, s, "s")
    return covariance_from(_prepared(scores, lengths, multiroot, True), r, s)


def second_order(scores: Tensor, lengths: Tensor, r: Tensor, s: Tensor, multiroot: bool = False) -> Tensor:
    """T2: ``E[r(d) s(d)^T] = Cov(r, s) + E[r] E[s]^T``, ``(B, R, S)``."""
    _check_features(scores, r, "r")
    _check_features(scores, s, "s")
    return second_order_from(_prepared(scores, lengths, multiroot, True), r, s)


def second_order_from(prepared: Prepared, r: Tensor, s: Tensor) -> Tensor:
    """:func:`second_order` of a :class:`~objectives.mtt.Prepared` batch (one factorisation)."""
    mean_r, mean_s = expectation_from(prepared, r), expectation_from(prepared, s)
    return covariance_from(prepared, r, s) + mean_r.unsqueeze(-1) * mean_s.unsqueeze(-2)


def covariance_from(prepared: Prepared, r: Tensor, s: Tensor) -> Tensor:
    """:func:`covariance` of a :class:`~objectives.mtt.Prepared` batch (no new factorisation)."""
    filled, arcs, factor = prepared
    _check_features(filled, r, "r")
    _check_features(filled, s, "s")
    with no_autocast(arcs.device):
        if filled.dim() == 3:
            return _arc_covariance(prepared, r, s).to(arcs.dtype)
        dtype = factor.weights.dtype
        q = filled.to(dtype).softmax(-1)
        r, s = r.to(dtype), s.to(dtype)
        r_bar = (q.unsqueeze(-1) * r).sum(-2)
        s_bar = (q.unsqueeze(-1) * s).sum(-2)
        between = _arc_covariance(Prepared(arcs, arcs, factor), r_bar, s_bar)
        mu = log_partition_and_marginals_from(Prepared(arcs, arcs, factor), with_log_z=False)[1].to(dtype)
        within = torch.einsum("bhm,bhmlr,bhmls->brs", mu, q.unsqueeze(-1) * r, s) - torch.einsum(
            "bhm,bhmr,bhms->brs", mu, r_bar, s_bar
        )
        return (between + within).to(arcs.dtype)


def _arc_covariance(prepared: Prepared, r: Tensor, s: Tensor) -> Tensor:
    """Unlabeled T2 ``(B, R, S)`` in the compute dtype. The cubic part runs over the smaller of R and S."""
    if r.shape[-1] > s.shape[-1]:
        return _arc_covariance(prepared, s, r).transpose(-2, -1)
    per_arc = _per_arc_covariance(prepared, r)
    s = s.to(per_arc.dtype).masked_fill(~prepared.factor.mask.unsqueeze(-1), 0.0)
    return torch.einsum("brhm,bhms->brs", per_arc, s)


def covariance_with_arcs(
    scores: Tensor, lengths: Tensor, r: Tensor, multiroot: bool = False, validate: bool = True
) -> Tensor:
    """T2 against every arc indicator: ``Cov(r_k(d), [e in d])`` for all arcs e, ``(B, R, N+1, N+1)``.

    ``mu_e r_ek - w_e L*((X L(w r_k) X)^T)_e``: O(R N^3) and no one-hot ``s`` of size N^2.
    With ``r = dF/dE[f]`` contracted over features this is the gradient of ``F(E[f])``
    w.r.t. the scores (the covariance route of Druck & Smith, made cubic). Unlabeled
    scores only; differentiable w.r.t. ``scores`` and ``r``. Sentences without a tree
    get 0; those whose LU cancels (``factor.exact``) get double backward through
    the subtraction-free elimination of :mod:`objectives.mtt`.
    """
    if validate:
        _check_features(scores, r, "r")
    prepared = _prepared(scores, lengths, multiroot, validate)
    dtype = prepared.arcs.dtype
    return _per_arc_covariance(prepared, r).to(dtype)


def _per_arc_covariance(prepared: Prepared, r: Tensor) -> Tensor:
    """:func:`covariance_with_arcs` of an unlabeled :class:`~objectives.mtt.Prepared` batch:
    ``r`` ``(B, N+1, N+1, R)`` -> ``(B, R, N+1, N+1)`` in the compute dtype."""
    _, arcs, factor = prepared
    with no_autocast(arcs.device):
        dtype, mask, multiroot = factor.weights.dtype, factor.mask, factor.multiroot
        r = r.to(dtype).masked_fill(~mask[..., None], 0.0).movedim(-1, 1)  # (B, R, N+1, N+1)
        if torch.is_grad_enabled() and arcs.requires_grad:
            mu = log_partition_and_marginals_from(prepared, with_log_z=False)[1].to(dtype)
            weights, inverse = _differentiable_inverse(arcs.to(dtype), factor)
        else:  # constants from the factorisation (0 on dead and exact sentences)
            mu, weights, inverse = factor.marginals(), factor.weights, factor.inverse
        lap_r = laplacian(weights.unsqueeze(1) * r, None, multiroot)  # (B, R, N, N)
        product = inverse.unsqueeze(1) @ lap_r @ inverse.unsqueeze(1)  # X L(w r_k) X
        per_arc = mu.unsqueeze(1) * r - weighted_adjoint(weights.unsqueeze(1), product.mT, multiroot)
        if factor.dead is not None:
            per_arc = per_arc.masked_fill(factor.dead[:, None, None, None], 0.0)
        if factor.exact is not None and r.shape[1]:  # (no features: nothing to replace)
            exact = factor.exact
            masked = arcs.to(dtype).masked_fill(~mask, float("-inf"))[exact]
            per_arc = per_arc.index_put((exact,), exact_derivatives(masked, factor.padding, multiroot, r[exact]))
    return per_arc


def _differentiable_inverse(arcs: Tensor, factor: Factorisation) -> tuple[Tensor, Tensor]:
    """Shifted weights and the Laplacian's inverse with autograd (the trace is scale-free,
    so any shift works); sentences without a tree or with a cancelling LU get the identity
    (their result is replaced)."""
    masked = arcs.masked_fill(~factor.mask, float("-inf"))
    shift = masked.detach().amax(dim=-2, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)
    weights = torch.exp(masked - shift)
    lap = laplacian(weights, None, factor.multiroot)
    lap.diagonal(dim1=-2, dim2=-1).add_(~factor.mask[:, 0, 1:])  # padded words: no root arc
    unfactored = factor.unfactored()
    if unfactored is not None:
        eye = torch.eye(lap.shape[-1], dtype=lap.dtype, device=lap.device)
        lap = torch.where(unfactored[:, None, None], eye, lap)
    return weights, torch.linalg.inv(lap)
