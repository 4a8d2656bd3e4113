"""Matrix-tree theorem: log-partition and arc marginals of edge-factored tree distributions.

Conventions (shared by the whole package):

* ``scores`` is ``(B, N+1, N+1)``; ``scores[b, h, m]`` is the log-weight of the arc h -> m.
  Index 0 is the root. Column 0 and the diagonal are never arcs.
* ``lengths`` is ``(B,)``: words per sentence. Everything past ``lengths[b]`` is padding and
  never changes a result (it may hold any value, even NaN).
* ``multiroot=False`` sums over single-root trees (Koo et al. 2007, the UD convention);
  ``True`` over Tutte's multi-root trees.
* A trailing label axis ``(B, N+1, N+1, L)`` means labeled arcs (Proposition 2 of Zmigrod
  et al. 2021): an arc's weight is the sum over its labels.

Numerics. Each column (the incoming arcs of one word) is shifted by its maximum before
exponentiating; this is exact because every tree has exactly one arc into each word, so
``log Z`` gets the shifts back as a sum. The Laplacian is factorised once (LU) in float64
(autocast off) and both ``log Z`` and its inverse come from that factorisation. Results
are returned in the input dtype.

Gradients. ``d log Z / d scores`` is the marginal matrix; the gradient of the marginals
(the Hessian-vector product of ``log Z``) is written from the closed form
``mu * g - w * L*((X L(w * g) X)^T)`` (T2 with one direction), so entropy, KL, risk and GE
gradients cost O(N^3) and never differentiate through a determinant twice.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "arc_mask",
    "laplacian",
    "laplacian_adjoint",
    "log_partition",
    "marginals",
    "log_partition_and_marginals",
    "check_arguments",
    "NoSpanningTreeWarning",
]


class NoSpanningTreeWarning(RuntimeWarning):
    """Raised (as a warning) when a sentence's graph has no spanning tree: ``log Z = -inf``."""


def _compute_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """float64 everywhere it exists (MPS has none: float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


def arc_mask(lengths: Tensor, n: int) -> Tensor:
    """Possible arcs: ``(B, N+1, N+1)`` bool, h in 0..len, m in 1..len, h != m."""
    positions = torch.arange(n + 1, device=lengths.device)
    inside = positions[None, :] <= lengths[:, None]  # (B, N+1)
    mask = inside[:, :, None] & inside[:, None, :]
    mask[:, :, 0] = False
    return mask & ~torch.eye(n + 1, dtype=torch.bool, device=lengths.device)


def check_arguments(scores: Tensor, lengths: Tensor, name: str = "scores") -> None:
    """Raise ``ValueError`` naming the argument when shapes, lengths or scores are invalid."""
    if not torch.is_tensor(scores) or scores.dim() not in (3, 4):
        raise ValueError(f"{name} must be a (B, N+1, N+1) or (B, N+1, N+1, L) tensor")
    batch, rows, cols = scores.shape[:3]
    if rows != cols or rows < 2:
        raise ValueError(f"{name} must be square over (N+1, N+1) with N >= 1, got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise ValueError(f"{name} must be a floating point tensor, got {scores.dtype}")
    if not torch.is_tensor(lengths) or lengths.shape != (batch,):
        raise ValueError(f"lengths must be a ({batch},) tensor matching {name}, got {getattr(lengths, 'shape', lengths)}")
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be an integer tensor, got {lengths.dtype}")
    if bool(((lengths < 1) | (lengths > rows - 1)).any()):
        raise ValueError(f"lengths must lie in 1..{rows - 1} (N), got {lengths.tolist()}")
    mask = arc_mask(lengths, rows - 1)
    if scores.dim() == 4:
        mask = mask.unsqueeze(-1)
    if bool((scores.isnan() & mask).any()):
        raise ValueError(f"{name} holds NaN on possible arcs")
    if bool(((scores == float("inf")) & mask).any()):
        raise ValueError(f"{name} holds +inf on possible arcs")


def laplacian(weights: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """The (linear) Laplacian construction applied to an arc array.

    Args:
        weights: ``(..., N+1, N+1)`` arc weights, zero on non-arcs and padding.
        lengths: ``(B,)``; the leading dimension of ``weights`` broadcasts against it.
    Returns:
        ``(..., N, N)``. Multi-root: Tutte's ``diag(rho + colsum A) - A``. Single-root: the
        root-weighted Laplacian of Koo et al. (2007), row 0 replaced by the root weights.
        Padded words get a 1 on the diagonal (identity block), so determinants and inverses
        of the real block are unchanged.
    """
    root, arcs = weights[..., 0, 1:], weights[..., 1:, 1:]
    n = arcs.shape[-1]
    diagonal = arcs.sum(-2) + (root if multiroot else 0)
    lap = torch.diag_embed(diagonal) - arcs
    if lengths is not None:
        padding = torch.arange(n, device=lengths.device)[None, :] >= lengths[:, None]
        padding = padding.view(padding.shape[:1] + (1,) * (lap.dim() - 3) + padding.shape[1:])
        lap = lap + torch.diag_embed(padding.to(lap.dtype))
    if not multiroot:
        lap = torch.cat([root.unsqueeze(-2), lap[..., 1:, :]], dim=-2)
    return lap


def laplacian_adjoint(matrix: Tensor, multiroot: bool = False) -> Tensor:
    """Adjoint of :func:`laplacian` under the Frobenius inner product.

    ``<laplacian(x), M> == <x, laplacian_adjoint(M)>`` on arcs. Args: ``matrix`` ``(..., N, N)``.
    Returns ``(..., N+1, N+1)`` (column 0 and the diagonal hold values that callers mask).
    """
    n = matrix.shape[-1]
    diagonal = matrix.diagonal(dim1=-2, dim2=-1)  # (..., N)
    out = matrix.new_zeros(matrix.shape[:-2] + (n + 1, n + 1))
    if multiroot:
        out[..., 0, 1:] = diagonal
        out[..., 1:, 1:] = diagonal.unsqueeze(-2) - matrix
    else:
        out[..., 0, 1:] = matrix[..., 0, :]
        words = diagonal.unsqueeze(-2) - matrix
        words[..., :, 0] -= diagonal[..., :1]  # word 1's diagonal entry became its root weight
        words[..., 0, :] += matrix[..., 0, :]  # and so did row 0 of the word block
        out[..., 1:, 1:] = words
    return out


@dataclass
class Factorisation:
    """Everything the closed-form gradients need, computed once without autograd.

    Attributes: ``weights`` ``(B, N+1, N+1)`` shifted arc weights (0 on non-arcs and on
    sentences without a tree), ``inverse`` ``(B, N, N)`` the Laplacian's inverse (0 on
    sentences without a tree), ``log_partition`` ``(B,)``.
    """

    weights: Tensor
    inverse: Tensor
    log_partition: Tensor
    multiroot: bool


def factorise(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Factorisation:
    """Shift, exponentiate and LU-factorise the Laplacian of unlabeled ``scores`` (no grad)."""
    with torch.no_grad():
        dtype = _compute_dtype(scores.dtype, scores.device)
        scores = scores.detach().to(dtype)
        n = scores.shape[-1] - 1
        mask = arc_mask(lengths, n)
        masked = scores.masked_fill(~mask, float("-inf"))
        shift = masked.amax(dim=-2, keepdim=True)  # (B, 1, N+1): per word
        words = mask.any(dim=-2, keepdim=True)
        dead = (words & (shift == float("-inf"))).flatten(1).any(-1)  # a word without any head
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
        weights = torch.exp(masked - shift)

        lap = laplacian(weights, lengths, multiroot)
        eye = torch.eye(n, dtype=dtype, device=scores.device)
        lap = torch.where(dead[:, None, None], eye, lap)
        lu, pivots, info = torch.linalg.lu_factor_ex(lap)
        diag = lu.diagonal(dim1=-2, dim2=-1)
        swaps = (pivots != torch.arange(1, n + 1, device=pivots.device, dtype=pivots.dtype)).sum(-1)
        negative = (diag < 0).sum(-1) + swaps
        log_det = diag.abs().log().sum(-1)
        dead = dead | (info > 0) | (negative % 2 == 1) | ~torch.isfinite(log_det)
        if bool(dead.any()):
            warnings.warn(
                f"no spanning tree (or a numerically singular Laplacian) in sentences "
                f"{dead.nonzero().flatten().tolist()} of the batch: log Z = -inf, zero marginals",
                NoSpanningTreeWarning,
                stacklevel=3,
            )
            lu, pivots = torch.linalg.lu_factor(torch.where(dead[:, None, None], eye, lap))
        inverse = torch.linalg.lu_solve(lu, pivots, eye.expand_as(lap))
        inverse = inverse.masked_fill(dead[:, None, None], 0.0)
        weights = weights.masked_fill(dead[:, None, None], 0.0)
        log_z = log_det + shift.masked_fill(~words, 0.0).sum((-2, -1))
        log_z = log_z.masked_fill(dead, float("-inf"))
    return Factorisation(weights, inverse, log_z, multiroot)


def _marginals_from(factor: Factorisation) -> Tensor:
    """``mu = w * L*(X^T)``: ``(B, N+1, N+1)`` in the compute dtype."""
    adjoint = laplacian_adjoint(factor.inverse.transpose(-2, -1), factor.multiroot)
    return factor.weights * adjoint


def marginal_vjp(factor: Factorisation, grad: Tensor, mu: Tensor) -> Tensor:
    """Vector-Jacobian product of the marginals: ``sum_e grad_e d mu_e / d scores``.

    This is ``Cov(sum_e grad_e 1_e, 1_e')`` for every arc e' (T2 with R = 1):
    ``mu * grad - w * L*((X L(w * grad) X)^T)``; O(N^3). Shapes ``(B, N+1, N+1)``.
    """
    inverse = factor.inverse
    middle = laplacian(factor.weights * grad, None, factor.multiroot)
    product = inverse @ middle @ inverse
    adjoint = laplacian_adjoint(product.transpose(-2, -1), factor.multiroot)
    return mu * grad - factor.weights * adjoint


class _Marginals(torch.autograd.Function):
    """scores -> marginals, with the closed-form (T2) backward."""

    @staticmethod
    def forward(ctx, scores: Tensor, factor: Factorisation) -> Tensor:
        mu = _marginals_from(factor)
        ctx.factor, ctx.mu = factor, mu
        return mu.to(scores.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        vjp = marginal_vjp(ctx.factor, grad.to(ctx.mu.dtype), ctx.mu)
        return vjp.to(grad.dtype), None


class _LogPartition(torch.autograd.Function):
    """scores -> log Z; its gradient is the marginals (themselves differentiable)."""

    @staticmethod
    def forward(ctx, scores: Tensor, factor: Factorisation) -> Tensor:
        ctx.factor = factor
        ctx.save_for_backward(scores)
        return factor.log_partition.to(scores.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (scores,) = ctx.saved_tensors
        mu = _Marginals.apply(scores, ctx.factor)
        return grad[:, None, None] * mu, None


def _unlabeled(scores: Tensor) -> Tensor:
    """Sum labeled arc weights over labels (Proposition 2)."""
    return scores.logsumexp(-1) if scores.dim() == 4 else scores


def log_partition_and_marginals(
    scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True
) -> tuple[Tensor, Tensor]:
    """``log Z`` ``(B,)`` and marginals (shape of ``scores``) from one factorisation.

    Both are differentiable w.r.t. ``scores`` (the marginals through the T2 closed form).
    Labeled marginals are ``mu[h, m] * softmax_l(scores[h, m, :])``. Half-precision
    inputs give float32 results: a bf16 ``log Z`` would be too coarse to train on.
    """
    lengths = torch.as_tensor(lengths, device=scores.device)
    if validate:
        check_arguments(scores, lengths)
    with torch.autocast(scores.device.type, enabled=False):
        if scores.dtype not in (torch.float32, torch.float64):
            scores = scores.float()
        arcs = _unlabeled(scores)
        mask = arc_mask(lengths, arcs.shape[-1] - 1)
        arcs = arcs.masked_fill(~mask, 0.0)  # padding may hold NaN: keep it out of autograd
        factor = factorise(arcs.masked_fill(~mask, float("-inf")), lengths, multiroot)
        log_z = _LogPartition.apply(arcs, factor)
        mu = _Marginals.apply(arcs, factor)
        if scores.dim() == 4:
            labels = scores.masked_fill(~mask[..., None], 0.0).softmax(-1)
            mu = mu.unsqueeze(-1) * labels
    return log_z, mu


def log_partition(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """``log Z``: ``(B,)``, the log of the total weight of all trees (``-inf`` if none)."""
    return log_partition_and_marginals(scores, lengths, multiroot)[0]


def marginals(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """Arc marginals ``p(h -> m in d)``, same shape as ``scores``; exactly 0 on non-arcs."""
    return log_partition_and_marginals(scores, lengths, multiroot)[1]
