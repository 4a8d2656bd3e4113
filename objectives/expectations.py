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
    arc_mask,
    check_arguments,
    factorise,
    laplacian,
    laplacian_adjoint,
    log_partition,
    log_partition_and_marginals,
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
    _, mu = log_partition_and_marginals(scores, lengths, multiroot)
    r = r.to(mu.dtype)
    return (mu.unsqueeze(-1) * r).flatten(1, -2).sum(1)


def entropy(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """Shannon entropy in nats, ``log Z - sum_e mu_e scores_e``: ``(B,)``."""
    log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
    value = log_z - (mu * _finite(scores).to(mu.dtype)).flatten(1).sum(1)
    return value.clamp_min(0.0)  # only rounding can make it negative


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
    q = scores.to(dtype).masked_fill(~arc_mask(lengths, scores.shape[1] - 1)[..., None], 0.0).softmax(-1)
    r, s = r.to(dtype), s.to(dtype)
    r_bar = (q.unsqueeze(-1) * r).sum(-2)
    s_bar = (q.unsqueeze(-1) * s).sum(-2)
    arcs = scores.to(dtype).logsumexp(-1)
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
    scores only; differentiable w.r.t. ``scores`` and ``r``.
    """
    lengths = torch.as_tensor(lengths, device=scores.device)
    if validate:
        check_arguments(scores, lengths)
        _check_features(scores, r, "r")
    out_dtype = _result_dtype(scores)
    with torch.autocast(scores.device.type, enabled=False):
        _, mu = log_partition_and_marginals(scores, lengths, multiroot, validate=False)
        dtype = torch.float64 if scores.device.type != "mps" else torch.float32
        mask = arc_mask(lengths, scores.shape[-1] - 1)
        masked = scores.to(dtype).masked_fill(~mask, float("-inf"))
        shift = masked.amax(dim=-2, keepdim=True).detach()
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
        weights = torch.exp(masked - shift)  # differentiable; the trace is scale-free
        inverse = torch.linalg.inv(laplacian(weights, lengths, multiroot))
        r = r.to(dtype).masked_fill(~mask[..., None], 0.0).movedim(-1, 1)  # (B, R, N+1, N+1)
        lap_r = laplacian(weights.unsqueeze(1) * r, None, multiroot)  # (B, R, N, N)
        product = inverse.unsqueeze(1) @ lap_r @ inverse.unsqueeze(1)  # X L(w r_k) X
        adjoint = laplacian_adjoint(product.transpose(-2, -1), multiroot)
        per_arc = mu.to(dtype).unsqueeze(1) * r - weights.unsqueeze(1) * adjoint
    return per_arc.to(out_dtype)
