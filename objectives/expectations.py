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
from torch.autograd.function import once_differentiable

from .mtt import (
    Factorisation,
    _exact_derivatives,
    _inference,
    _Marginals,
    _laplacian,
    _marginals_from,
    _no_autocast,
    _prepare,
    _sum_labels,
    _weighted_adjoint,
    arc_mask,
    check_arguments,
    laplacian,
    log_partition,
    log_partition_and_marginals,
    marginal_vjp,
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
    """Scores with -inf (forbidden arcs, marginal exactly 0) replaced by 0 so products stay finite."""
    return scores.masked_fill(~torch.isfinite(scores), 0.0)


def _check_features(scores: Tensor, r: Tensor, name: str) -> None:
    if r.dim() != scores.dim() + 1 or r.shape[:-1] != scores.shape:
        raise ValueError(
            f"{name} must have shape {tuple(scores.shape)} + (features,), got {tuple(r.shape)}"
        )


def expectation(scores: Tensor, lengths: Tensor, r: Tensor, multiroot: bool = False) -> Tensor:
    """T1: ``E[r(d)]`` for an additively decomposable ``r``. Returns ``(B, R)``."""
    _check_features(scores, r, "r")
    if scores.dim() != 3 or r.requires_grad:  # labeled, or r needs its own gradient
        mu = _inference(scores, lengths, multiroot, True, False)
        return _contract(mu, r.to(mu.dtype))
    lengths = torch.as_tensor(lengths, device=scores.device)
    with _no_autocast(scores.device):
        _, arcs, factor = _prepare(scores, lengths, multiroot, validate=True)
        if torch.is_grad_enabled() and arcs.requires_grad:
            return _Expectation.apply(arcs, r, factor)
        return _contract(_marginals_from(factor), r.to(factor.weights.dtype)).to(arcs.dtype)


def _contract(mu: Tensor, r: Tensor) -> Tensor:
    """``sum_e mu_e r_e``: ``(B, ...)``, ``(B, ..., R)`` -> ``(B, R)`` (one batched matmul)."""
    return (mu.flatten(1).unsqueeze(1) @ r.flatten(1, -2)).squeeze(1)


class _Expectation(torch.autograd.Function):
    """Unlabeled scores -> ``E[r]`` for constant ``r``; the gradient ``sum_k g_k Cov(r_k, 1_e)``
    is one closed-form marginal VJP in the direction ``r g`` (T2 with R = 1)."""

    @staticmethod
    def forward(ctx, arcs: Tensor, r: Tensor, factor: Factorisation) -> Tensor:
        ctx.factor, ctx.r = factor, r
        return _contract(_marginals_from(factor), r.to(factor.weights.dtype)).to(arcs.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        factor = ctx.factor
        mu = _marginals_from(factor)
        with _no_autocast(grad.device):
            r = ctx.r.to(mu.dtype)
            direction = (r.flatten(1, -2) @ grad.to(mu.dtype).unsqueeze(-1)).view(mu.shape)  # sum_k r_k g_k
            vjp = marginal_vjp(factor, direction, mu)
        return vjp.to(grad.dtype), None, None


def entropy(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """Shannon entropy in nats, ``log Z - sum_e mu_e scores_e``: ``(B,)``."""
    lengths = torch.as_tensor(lengths, device=scores.device)
    if scores.dim() != 3:  # labeled (or invalid: the checks below name the problem)
        log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
        value = log_z - (mu * _finite(scores).to(mu.dtype)).flatten(1).sum(1)
        return value.clamp_min(0.0)  # only rounding can make it negative
    with _no_autocast(scores.device):
        _, arcs, factor = _prepare(scores, lengths, multiroot, validate=True)
        finite = factor.scores.nan_to_num(0.0, 0.0, 0.0)  # non-arcs and forbidden arcs (mu = 0) -> 0
        if torch.is_grad_enabled() and arcs.requires_grad:
            return _Entropy.apply(arcs, finite, factor)
        return _entropy_value(factor, finite).to(arcs.dtype)


def _entropy_value(factor: Factorisation, finite: Tensor) -> Tensor:
    mu = _marginals_from(factor)
    return (factor.log_partition - (mu * finite).sum((-2, -1))).clamp_min(0.0)  # < 0 only by rounding


class _Entropy(torch.autograd.Function):
    """Unlabeled scores -> entropy; the gradient ``-H s`` (``H`` the Hessian of log Z) is one
    closed-form marginal VJP, with no autograd graph through log Z and the marginals."""

    @staticmethod
    def forward(ctx, arcs: Tensor, finite: Tensor, factor: Factorisation) -> Tensor:
        ctx.factor, ctx.finite = factor, finite
        return _entropy_value(factor, finite).to(arcs.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        factor = ctx.factor
        with _no_autocast(grad.device):
            vjp = marginal_vjp(factor, ctx.finite, _marginals_from(factor))
            out = vjp * -grad.to(vjp.dtype)[:, None, None]
        return out.to(grad.dtype), None, None


def cross_entropy(p_scores: Tensor, q_scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """``-E_p[log q(d)] = log Z_q - sum_e mu^p_e q_e``: ``(B,)``."""
    return _cross_entropy_terms(p_scores, q_scores, lengths, multiroot)[0]


def kl_divergence(p_scores: Tensor, q_scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """``KL(p || q) = log Z_q - log Z_p + sum_e mu^p_e (p_e - q_e)`` over one tree set: ``(B,)``."""
    cross, log_zp, mu_p = _cross_entropy_terms(p_scores, q_scores, lengths, multiroot)
    kl = cross - log_zp + (mu_p * _finite(p_scores).to(mu_p.dtype)).flatten(1).sum(1)
    return kl.clamp_min(0.0)  # only rounding can make it negative


def _cross_entropy_terms(p_scores, q_scores, lengths, multiroot):
    """Cross-entropy ``(B,)`` plus the ``log Z_p`` and ``mu^p`` it was built from."""
    if p_scores.shape != q_scores.shape:
        raise ValueError(f"q_scores must have the shape of p_scores {tuple(p_scores.shape)}, got {tuple(q_scores.shape)}")
    log_zp, mu_p = log_partition_and_marginals(p_scores, lengths, multiroot)
    log_zq = log_partition(q_scores, lengths, multiroot)
    q = q_scores.to(mu_p.dtype)
    cross = log_zq - (mu_p * _finite(q)).flatten(1).sum(1)
    impossible = ((mu_p > 0) & (q == float("-inf"))).flatten(1).any(1)  # p puts mass where q has none
    return cross.masked_fill(impossible, float("inf")), log_zp, mu_p


def renyi_entropy(scores: Tensor, lengths: Tensor, alpha: float, multiroot: bool = False) -> Tensor:
    """Renyi entropy of order ``alpha`` in nats: ``(log Z(a s) - a log Z(s)) / (1 - a)``, ``(B,)``.

    ``alpha = 1`` is the Shannon entropy (the limit); ``alpha`` must be positive.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    if alpha == 1:
        return entropy(scores, lengths, multiroot)
    return (log_partition(alpha * scores, lengths, multiroot) - alpha * log_partition(scores, lengths, multiroot)) / (1 - alpha)


def covariance(scores: Tensor, lengths: Tensor, r: Tensor, s: Tensor, multiroot: bool = False) -> Tensor:
    """T2: ``Cov(r(d), s(d))``, ``(B, R, S)``, differentiable w.r.t. ``scores``, ``r`` and ``s``.

    Labeled scores: ``r`` and ``s`` are per labeled arc; labels are independent given the
    tree (softmax ``q``), so ``Cov = Cov_arcs(rbar, sbar) + sum_e mu_e Cov_q(r_e, s_e)`` with
    ``rbar_e = E_q[r_e]``.
    """
    _check_features(scores, r, "r")
    _check_features(scores, s, "s")
    lengths = torch.as_tensor(lengths, device=scores.device)
    check_arguments(scores, lengths)
    if scores.dim() == 4:
        return _labeled_covariance(scores, lengths, r, s, multiroot)
    return _arc_covariance(scores, lengths, r, s, multiroot)


def second_order(scores: Tensor, lengths: Tensor, r: Tensor, s: Tensor, multiroot: bool = False) -> Tensor:
    """T2: ``E[r(d) s(d)^T] = Cov(r, s) + E[r] E[s]^T``, ``(B, R, S)``."""
    mean_r = expectation(scores, lengths, r, multiroot)
    mean_s = expectation(scores, lengths, s, multiroot)
    return covariance(scores, lengths, r, s, multiroot) + mean_r.unsqueeze(-1) * mean_s.unsqueeze(-2)


def _labeled_covariance(scores, lengths, r, s, multiroot):
    dtype = torch.float64 if scores.device.type != "mps" else torch.float32
    filled, arcs = _sum_labels(scores.to(dtype).masked_fill(~arc_mask(lengths, scores.shape[1] - 1)[..., None], 0.0))
    q = filled.softmax(-1)
    r, s = r.to(dtype), s.to(dtype)
    r_bar = (q.unsqueeze(-1) * r).sum(-2)
    s_bar = (q.unsqueeze(-1) * s).sum(-2)
    between = _arc_covariance(arcs, lengths, r_bar, s_bar, multiroot)
    _, mu = log_partition_and_marginals(arcs, lengths, multiroot, validate=False)
    within = torch.einsum("bhm,bhmlr,bhmls->brs", mu, q.unsqueeze(-1) * r, s) - torch.einsum(
        "bhm,bhmr,bhms->brs", mu, r_bar, s_bar
    )
    return (between + within).to(_result_dtype(scores))


def _result_dtype(scores: Tensor) -> torch.dtype:
    return scores.dtype if scores.dtype in (torch.float32, torch.float64) else torch.float32


def _arc_covariance(scores: Tensor, lengths: Tensor, r: Tensor, s: Tensor, multiroot: bool) -> Tensor:
    """Unlabeled T2 ``(B, R, S)``. The cubic part runs over the smaller of R and S."""
    if r.shape[-1] > s.shape[-1]:
        return _arc_covariance(scores, lengths, s, r, multiroot).transpose(-2, -1)
    per_arc = covariance_with_arcs(scores, lengths, r, multiroot, validate=False)
    mask = arc_mask(lengths, scores.shape[-1] - 1)
    s = s.to(per_arc.dtype).masked_fill(~mask[..., None], 0.0)
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
    :func:`~objectives.mtt._eliminate`.
    """
    lengths = torch.as_tensor(lengths, device=scores.device)
    if validate:
        check_arguments(scores, lengths)
        _check_features(scores, r, "r")
    out_dtype = _result_dtype(scores)
    with _no_autocast(scores.device):
        _, arcs, factor = _prepare(scores, lengths, multiroot, validate=False)
        dtype, mask = factor.weights.dtype, factor.mask
        r = r.to(dtype).masked_fill(~mask[..., None], 0.0).movedim(-1, 1)  # (B, R, N+1, N+1)
        if torch.is_grad_enabled() and arcs.requires_grad:
            mu = _Marginals.apply(arcs, factor).to(dtype)
            weights, inverse = _differentiable_inverse(arcs.to(dtype), mask, lengths, factor)
        else:  # constants from the factorisation (0 on dead and exact sentences)
            mu, weights, inverse = _marginals_from(factor), factor.weights, factor.inverse
        lap_r = _laplacian(weights.unsqueeze(1) * r, None, multiroot)  # (B, R, N, N)
        product = inverse.unsqueeze(1) @ lap_r @ inverse.unsqueeze(1)  # X L(w r_k) X
        per_arc = mu.unsqueeze(1) * r - _weighted_adjoint(weights.unsqueeze(1), product.mT, multiroot)
        if factor.dead is not None:
            per_arc = per_arc.masked_fill(factor.dead[:, None, None, None], 0.0)
        if factor.exact is not None and r.shape[1]:  # (no features: nothing to replace)
            exact = factor.exact
            masked = arcs.to(dtype).masked_fill(~mask, float("-inf"))[exact]
            per_arc = per_arc.index_put((exact,), _exact_derivatives(masked, factor.padding, multiroot, r[exact]))
    return per_arc.to(out_dtype)


def _differentiable_inverse(arcs: Tensor, mask: Tensor, lengths: Tensor, factor: Factorisation):
    """Shifted weights and the Laplacian's inverse with autograd (the trace is scale-free,
    so any shift works); sentences without a tree or with a cancelling LU get the identity
    (their result is replaced)."""
    masked = arcs.masked_fill(~mask, float("-inf"))
    shift = masked.detach().amax(dim=-2, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)
    weights = torch.exp(masked - shift)
    lap = laplacian(weights, lengths, factor.multiroot)
    unfactored = factor.unfactored()
    if unfactored is not None:
        eye = torch.eye(lap.shape[-1], dtype=lap.dtype, device=lap.device)
        lap = torch.where(unfactored[:, None, None], eye, lap)
    return weights, torch.linalg.inv(lap)
