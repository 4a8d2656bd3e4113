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

Overhead. At UD sentence lengths (N ~ 10-40) the cubic work is a few microseconds and the
per-call cost of small tensor operations decides the run time, so the arc mask is built
once per call and passed down, the Laplacian and the adjoint are written with as few
operations as possible, and no autograd nodes are built when no input requires a gradient.
"""

from __future__ import annotations

import contextlib
import functools
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


_pad = torch.constant_pad_nd  # F.pad without its Python wrapper (zero padding only)


class NoSpanningTreeWarning(RuntimeWarning):
    """Raised (as a warning) when a sentence's graph has no spanning tree: ``log Z = -inf``."""


def _compute_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """float64 everywhere it exists (MPS has none: float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


@functools.lru_cache(maxsize=256)
def _constants(n: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Cached per (N, device), never written to: positions ``(N+1,)``, the ``(N+1, N+1)``
    mask of h != m and m != 0, and LAPACK's 1-based identity pivots ``(N,)`` (int32)."""
    positions = torch.arange(n + 1, device=device)
    static = ~torch.eye(n + 1, dtype=torch.bool, device=device)
    static[:, 0] = False
    pivots = torch.arange(1, n + 1, device=device, dtype=torch.int32)
    return positions, static, pivots


@functools.lru_cache(maxsize=256)
def _eye(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A cached ``(N, N)`` identity (never written to)."""
    return torch.eye(n, dtype=dtype, device=device)


def _masks(lengths: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``(arc mask (B, N+1, N+1), inside (B, N+1))``; ``inside[b, i]`` is ``i <= lengths[b]``."""
    positions, static, _ = _constants(n, lengths.device)
    inside = positions <= lengths.unsqueeze(-1)
    return torch.logical_and(static, inside.unsqueeze(-1)).logical_and_(inside.unsqueeze(-2)), inside


def arc_mask(lengths: Tensor, n: int) -> Tensor:
    """Possible arcs: ``(B, N+1, N+1)`` bool, h in 0..len, m in 1..len, h != m."""
    return _masks(lengths, n)[0]


def _check_shapes(scores: Tensor, lengths: Tensor, name: str) -> None:
    """Shape, dtype and length checks (one host sync for the lengths)."""
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
    low, high = (int(v) for v in torch.aminmax(lengths)) if lengths.numel() else (1, 1)
    if low < 1 or high > rows - 1:
        raise ValueError(f"lengths must lie in 1..{rows - 1} (N), got {lengths.tolist()}")


def _check_values(filled: Tensor, name: str) -> None:
    """``filled``: scores with non-arcs set to 0. NaN or +inf on an arc raises (one host sync:
    ``amax`` propagates NaN, and is +inf only if some arc is)."""
    if filled.numel() == 0:
        return
    top = float(filled.detach().amax())
    if top != top:
        raise ValueError(f"{name} holds NaN on possible arcs")
    if top == float("inf"):
        raise ValueError(f"{name} holds +inf on possible arcs")


def check_arguments(scores: Tensor, lengths: Tensor, name: str = "scores") -> None:
    """Raise ``ValueError`` naming the argument when shapes, lengths or scores are invalid."""
    _check_shapes(scores, lengths, name)
    mask = arc_mask(lengths, scores.shape[1] - 1)
    if scores.dim() == 4:
        mask = mask.unsqueeze(-1)
    _check_values(scores.masked_fill(~mask, 0.0), name)


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
    padding = None
    if lengths is not None:
        n = weights.shape[-1] - 1
        padding = torch.arange(1, n + 1, device=lengths.device)[None, :] > lengths[:, None]
        padding = padding.view(padding.shape[:1] + (1,) * (weights.dim() - 3) + padding.shape[1:])
    return _laplacian(weights, padding, multiroot)


def _laplacian(weights: Tensor, padding: Tensor | None, multiroot: bool) -> Tensor:
    """:func:`laplacian` with the padding given as a ``(B, N)`` (broadcastable) 0/1 tensor or None.

    The diagonal of ``weights`` must be zero (it always is: it is no arc).
    """
    root, arcs = weights[..., 0, 1:], weights[..., 1:, 1:]
    diagonal = arcs.sum(-2)
    if multiroot:
        diagonal = diagonal + root
    if padding is not None:
        diagonal = diagonal + padding
    lap = arcs.neg()
    lap.diagonal(dim1=-2, dim2=-1).add_(diagonal)
    if not multiroot:
        lap[..., 0, :] = root
    return lap


def laplacian_adjoint(matrix: Tensor, multiroot: bool = False) -> Tensor:
    """Adjoint of :func:`laplacian` under the Frobenius inner product.

    ``<laplacian(x), M> == <x, laplacian_adjoint(M)>`` on arcs. Args: ``matrix`` ``(..., N, N)``.
    Returns ``(..., N+1, N+1)`` (column 0 and the diagonal hold values that callers mask).
    """
    return _pad(_adjoint_columns(matrix, multiroot), (1, 0))


def _adjoint_columns(matrix: Tensor, multiroot: bool) -> Tensor:
    """Columns 1..N of :func:`laplacian_adjoint`: ``(..., N+1, N)``.

    Multi-root: row 0 (root arcs) is ``diag(M)`` and row h is ``diag(M) - M[h-1]``.
    Single-root: row 0 is ``M[0]`` (the replaced row), row 1 is ``diag(M)`` with its first
    entry zeroed, row h >= 2 is that minus ``M[h-1]``.
    """
    diagonal = matrix.diagonal(dim1=-2, dim2=-1).unsqueeze(-2)  # (..., 1, N)
    if multiroot:
        return torch.cat([diagonal, diagonal - matrix], dim=-2)
    diagonal = _pad(diagonal[..., 1:], (1, 0))  # word 1's diagonal entry is its root weight
    return torch.cat([matrix[..., :1, :], diagonal, diagonal - matrix[..., 1:, :]], dim=-2)


def _weighted_adjoint(weights: Tensor, matrix: Tensor, multiroot: bool) -> Tensor:
    """``weights * laplacian_adjoint(matrix)`` (column 0 exactly 0): ``(..., N+1, N+1)``."""
    return _pad(weights[..., 1:] * _adjoint_columns(matrix, multiroot), (1, 0))


@dataclass
class Factorisation:
    """Everything the closed-form gradients need, computed once without autograd.

    Attributes: ``weights`` ``(B, N+1, N+1)`` shifted arc weights (0 on non-arcs and on
    sentences without a tree), ``inverse`` ``(B, N, N)`` the Laplacian's inverse (0 on
    sentences without a tree), ``log_partition`` ``(B,)``. ``marginals`` is filled on first
    use by :func:`_marginals_from` and shared by every reader.
    """

    weights: Tensor
    inverse: Tensor
    log_partition: Tensor
    multiroot: bool
    marginals: Tensor | None = None
    dead: Tensor | None = None  # (B,) bool: sentences without a tree, or None if there are none
    mask: Tensor | None = None  # (B, N+1, N+1) bool arc mask, when the caller had it
    scores: Tensor | None = None  # (B, N+1, N+1) compute-dtype scores, -inf off arcs, when the caller had them


def factorise(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Factorisation:
    """Shift, exponentiate and LU-factorise the Laplacian of unlabeled ``scores`` (no grad)."""
    with torch.no_grad():
        scores = scores.detach().to(_compute_dtype(scores.dtype, scores.device))
        mask, inside = _masks(lengths, scores.shape[-1] - 1)
        return _factorise(scores.masked_fill(~mask, float("-inf")), inside, multiroot, stacklevel=3)


def _factorise(masked: Tensor, inside: Tensor, multiroot: bool, stacklevel: int = 4) -> Factorisation:
    """:func:`factorise` of compute-dtype scores already ``-inf`` on every non-arc (no grad).

    ``inside`` ``(B, N+1)``: position i is 0 or a word (``i <= lengths``).
    """
    n = masked.shape[-1] - 1
    shift = masked.amax(dim=-2, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)  # (B, 1, N+1): per word
    weights = torch.exp(masked - shift)
    lap = _laplacian(weights, ~inside[:, 1:], multiroot)
    lu, pivots, _ = torch.linalg.lu_factor_ex(lap)
    diag = lu.diagonal(dim1=-2, dim2=-1)
    log_det = diag.abs().log().sum(-1)  # -inf for an exactly singular Laplacian (no tree)
    # det < 0 (odd number of negative pivots and row swaps) is rounding on a singular matrix
    negative = (diag < 0).sum(-1) + (pivots != _constants(n, masked.device)[2]).sum(-1)
    alive = torch.isfinite(log_det).logical_and_(negative % 2 == 0)
    eye = _eye(n, masked.dtype, masked.device)
    if not bool(alive.all()):
        dead = ~alive
        warnings.warn(
            f"no spanning tree (or a numerically singular Laplacian) in sentences "
            f"{dead.nonzero().flatten().tolist()} of the batch: log Z = -inf, zero marginals",
            NoSpanningTreeWarning,
            stacklevel=stacklevel,
        )
        lu, pivots = torch.linalg.lu_factor(torch.where(dead[:, None, None], eye, lap))
        inverse = torch.linalg.lu_solve(lu, pivots, eye.expand_as(lap)).masked_fill_(dead[:, None, None], 0.0)
        weights = weights.masked_fill_(dead[:, None, None], 0.0)
        log_det = log_det.masked_fill(dead, float("-inf"))
    else:
        inverse = torch.linalg.lu_solve(lu, pivots, eye.expand_as(lap))
        dead = None
    # a real word's shift is finite unless the sentence is dead; padding and column 0 have 0
    log_z = log_det + shift.sum((-2, -1))
    return Factorisation(weights, inverse, log_z, multiroot, dead=dead)


def _marginals_from(factor: Factorisation) -> Tensor:
    """``mu = w * L*(X^T)``: ``(B, N+1, N+1)`` in the compute dtype (computed once per factor)."""
    if factor.marginals is None:
        factor.marginals = _weighted_adjoint(factor.weights, factor.inverse.mT, factor.multiroot)
    return factor.marginals


def marginal_vjp(factor: Factorisation, grad: Tensor, mu: Tensor) -> Tensor:
    """Vector-Jacobian product of the marginals: ``sum_e grad_e d mu_e / d scores``.

    This is ``Cov(sum_e grad_e 1_e, 1_e')`` for every arc e' (T2 with R = 1):
    ``mu * grad - w * L*((X L(w * grad) X)^T)``; O(N^3). Shapes ``(B, N+1, N+1)``.
    """
    inverse = factor.inverse
    middle = _laplacian(factor.weights * grad, None, factor.multiroot)
    product = inverse @ middle @ inverse
    return mu * grad - _weighted_adjoint(factor.weights, product.mT, factor.multiroot)


class _Marginals(torch.autograd.Function):
    """scores -> marginals, with the closed-form (T2) backward."""

    @staticmethod
    def forward(ctx, scores: Tensor, factor: Factorisation) -> Tensor:
        mu = _marginals_from(factor)
        ctx.factor = factor
        return mu.to(scores.dtype, copy=True)  # a fresh tensor: the cached one is shared

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        mu = _marginals_from(ctx.factor)
        with _no_autocast(grad.device):
            vjp = marginal_vjp(ctx.factor, grad.to(mu.dtype), mu)
        return vjp.to(grad.dtype), None


class _LogPartition(torch.autograd.Function):
    """scores -> log Z; its gradient is the marginals (themselves differentiable)."""

    @staticmethod
    def forward(ctx, scores: Tensor, factor: Factorisation) -> Tensor:
        ctx.factor = factor
        ctx.save_for_backward(scores)
        return factor.log_partition.to(scores.dtype, copy=True)  # not the factor's own tensor: no ref cycle

    @staticmethod
    def backward(ctx, grad: Tensor):
        (scores,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the marginals must be differentiable
            mu = _Marginals.apply(scores, ctx.factor)
        else:
            mu = _marginals_from(ctx.factor).to(grad.dtype)
        return grad[:, None, None] * mu, None


def _no_autocast(device: torch.device):
    """A context with autocast off on ``device`` (a no-op context when it is already off)."""
    kind = device.type
    if kind in ("cpu", "cuda") and not torch.is_autocast_enabled(kind):
        return contextlib.nullcontext()
    return torch.autocast(kind, enabled=False)


def _prepare(scores: Tensor, lengths: Tensor, multiroot: bool, validate: bool) -> tuple[Tensor, Tensor, Factorisation]:
    """Validate, mask and factorise once; call with autocast off.

    Returns ``filled`` (``scores`` in float32/64 with 0 on non-arcs, labeled if ``scores``
    is), ``arcs`` (the unlabeled ``(B, N+1, N+1)`` scores, 0 on non-arcs; both differentiable)
    and the :class:`Factorisation`.
    """
    if validate:
        _check_shapes(scores, lengths, "scores")
    if scores.dtype not in (torch.float32, torch.float64):
        scores = scores.float()
    labeled = scores.dim() == 4
    mask, inside = _masks(lengths, scores.shape[1] - 1)
    nonarc = ~mask
    # padding may hold NaN: keep it out of autograd (and out of the label softmax)
    filled = scores.masked_fill(nonarc[..., None] if labeled else nonarc, 0.0)
    if validate:
        _check_values(filled, "scores")
    arcs = filled.logsumexp(-1) if labeled else filled
    # detached: no graph is recorded, so no no_grad() context is needed
    masked = arcs.detach().to(_compute_dtype(arcs.dtype, arcs.device)).masked_fill(nonarc, float("-inf"))
    factor = _factorise(masked, inside, multiroot)
    factor.mask, factor.scores = mask, masked
    return filled, arcs, factor


def log_partition_and_marginals(
    scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True
) -> tuple[Tensor, Tensor]:
    """``log Z`` ``(B,)`` and marginals (shape of ``scores``) from one factorisation.

    Both are differentiable w.r.t. ``scores`` (the marginals through the T2 closed form).
    Labeled marginals are ``mu[h, m] * softmax_l(scores[h, m, :])``. Half-precision
    inputs give float32 results: a bf16 ``log Z`` would be too coarse to train on.
    """
    return _inference(scores, lengths, multiroot, validate, True)


def _inference(scores: Tensor, lengths: Tensor, multiroot: bool, validate: bool, with_log_z: bool):
    """:func:`log_partition_and_marginals`; only the marginals if not ``with_log_z``."""
    lengths = torch.as_tensor(lengths, device=scores.device)
    with _no_autocast(scores.device):
        filled, arcs, factor = _prepare(scores, lengths, multiroot, validate)
        if torch.is_grad_enabled() and arcs.requires_grad:
            log_z = _LogPartition.apply(arcs, factor) if with_log_z else None
            mu = _Marginals.apply(arcs, factor)
        else:
            log_z = factor.log_partition.to(arcs.dtype)
            mu = _marginals_from(factor).to(arcs.dtype)
        if filled.dim() == 4:
            mu = mu.unsqueeze(-1) * filled.softmax(-1)
    return (log_z, mu) if with_log_z else mu


def log_partition(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """``log Z``: ``(B,)``, the log of the total weight of all trees (``-inf`` if none)."""
    return log_partition_and_marginals(scores, lengths, multiroot)[0]


def marginals(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """Arc marginals ``p(h -> m in d)``, same shape as ``scores``; exactly 0 on non-arcs."""
    return log_partition_and_marginals(scores, lengths, multiroot)[1]
