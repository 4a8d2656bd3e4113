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

Cancellation. When the best incoming arcs of some words form a cycle with a large score
gap, the shifted Laplacian has O(1) entries but a tiny determinant and the LU loses about
``log(prod_m S_m / det)`` nats of digits (``S_m`` the weight into word m: Hadamard's bound).
Sentences losing more than half the digits, and those the LU finds singular, are redone by
:func:`_eliminate`, which has no subtractions; their marginals and marginal gradients are
taken by autograd through it. Arcs more than ~700 nats (float64 ``exp`` underflow) below
the best arc into the same word count as absent, in both paths.

Gradients. ``d log Z / d scores`` is the marginal matrix; the gradient of the marginals
(the Hessian-vector product of ``log Z``) is written from the closed form
``mu * g - w * L*((X L(w * g) X)^T)`` (T2 with one direction), so entropy, KL, risk and GE
gradients cost O(N^3) and never differentiate through a determinant twice.

Overhead. At UD sentence lengths (N ~ 10-40) the cubic work is small and the per-call cost
of tensor operations (and of touching freshly allocated memory) decides much of the run
time, so the arc mask is built once per call, the Laplacian and its adjoint are written
with as few operations and buffers as possible, validation (``validate=True``) reads its
few numbers with ``item()`` once the factorisation is queued (on the CPU, packing them into
one tensor for a single read cost ten times more), and no autograd nodes are built when no
input requires a gradient.

Engine interface (for :mod:`objectives.expectations`, :class:`~objectives.TreeCRF` and the
objectives): :func:`prepare` validates, masks and factorises once and returns a
:class:`Prepared` (the differentiable scores and their :class:`Factorisation`); every
quantity is then read from it: :func:`log_partition_and_marginals_from` (differentiable
``log Z`` and marginals), :meth:`Factorisation.marginals` and
:meth:`Factorisation.marginal_vjp` (constants and the closed-form T2 product, for custom
autograd Functions), :func:`weighted_adjoint` and :func:`exact_derivatives` (the pieces of
T2 with many directions). :func:`no_autocast` wraps every call into it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .conventions import arc_mask, masks, word_mask

__all__ = [
    "log_partition",
    "marginals",
    "log_partition_and_marginals",
    "laplacian",
    "check_arguments",
    "NoSpanningTreeWarning",
    # the engine's interface inside the package (expectations, distribution, ge)
    "Factorisation",
    "Prepared",
    "prepare",
    "factorise",
    "log_partition_and_marginals_from",
    "weighted_adjoint",
    "exact_derivatives",
    "sum_labels",
    "no_autocast",
]


_pad = torch.constant_pad_nd  # F.pad without its Python wrapper (zero padding only)


class NoSpanningTreeWarning(RuntimeWarning):
    """Raised (as a warning) when a sentence's graph has no spanning tree: ``log Z = -inf``."""


def _compute_dtype(device: torch.device) -> torch.dtype:
    """float64 everywhere it exists (MPS has none: float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


@functools.lru_cache(maxsize=64)
def _eye(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A cached ``(N, N)`` identity (never written to)."""
    return torch.eye(n, dtype=dtype, device=device)


def _check_shapes(scores: Tensor, lengths: Tensor, name: str) -> None:
    """Shape and dtype checks (no host sync; :func:`_check_ranges` checks the values)."""
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


def _check_ranges(lengths: Tensor, top: Tensor, n: int, name: str) -> None:
    """Raise unless ``lengths`` lie in 1..N and ``top`` (the largest score on a possible
    arc, a 0-dim tensor) is neither NaN nor +inf (``amax`` propagates NaN, and is +inf only
    if some arc is). Reads three numbers: on a GPU the first waits for the queue, the others
    are small copies; on the CPU each costs about a microsecond (packing them into one
    tensor first costs tens)."""
    low, high = torch.aminmax(lengths) if lengths.numel() else (lengths.new_ones(()), lengths.new_ones(()))
    top = top.item()
    if not 1 <= low.item() <= high.item() <= n:
        raise ValueError(f"lengths must lie in 1..{n} (N), got {lengths.tolist()}")
    if math.isnan(top):
        raise ValueError(f"{name} holds NaN on possible arcs")
    if top == float("inf"):
        raise ValueError(f"{name} holds +inf on possible arcs")


def check_arguments(scores: Tensor, lengths: Tensor, name: str = "scores") -> None:
    """Raise ``ValueError`` naming the argument when shapes, lengths or scores are invalid."""
    _check_shapes(scores, lengths, name)
    mask = arc_mask(lengths, scores.shape[1] - 1)
    filled = scores.detach().masked_fill(~(mask.unsqueeze(-1) if scores.dim() == 4 else mask), float("-inf"))
    _check_ranges(lengths, filled.amax() if filled.numel() else filled.new_zeros(()), scores.shape[1] - 1, name)


def laplacian(weights: Tensor, lengths: Tensor | None, multiroot: bool = False) -> Tensor:
    """The (linear) Laplacian construction applied to an arc array.

    Args:
        weights: ``(..., N+1, N+1)`` arc weights, zero on non-arcs and padding.
        lengths: ``(B,)``; the leading dimension of ``weights`` broadcasts against it
            (``None``: no padding).
    Returns:
        ``(..., N, N)``. Multi-root: Tutte's ``diag(rho + colsum A) - A``. Single-root: the
        root-weighted Laplacian of Koo et al. (2007), row 0 replaced by the root weights.
        Padded words get a 1 on the diagonal (identity block), so determinants and inverses
        of the real block are unchanged.
    """
    padding = None
    if lengths is not None:
        padding = ~word_mask(lengths, weights.shape[-1] - 1)[:, 1:]
        padding = padding.view(padding.shape[:1] + (1,) * (weights.dim() - 3) + padding.shape[1:])
    return _laplacian(weights, padding, multiroot)


def _laplacian(weights: Tensor, padding: Tensor | None, multiroot: bool, into: Tensor | None = None) -> Tensor:
    """:func:`laplacian` with the padding as a ``(B, N)`` (broadcastable) bool tensor or None,
    and optionally the column sums of the word arcs ``into`` ``(..., N)`` already computed.

    The diagonal of ``weights`` must be zero (it always is: it is no arc).
    """
    root, arcs = weights[..., 0, 1:], weights[..., 1:, 1:]
    diagonal = arcs.sum(-2) if into is None else into
    if multiroot:
        diagonal = diagonal + root
    if padding is not None:
        diagonal = diagonal + padding
    lap = arcs.neg()
    lap.diagonal(dim1=-2, dim2=-1).add_(diagonal)
    if not multiroot:
        lap[..., 0, :] = root
    return lap


def _laplacian_block(block: Tensor, root: Tensor, multiroot: bool) -> Tensor:
    """The Laplacian ``(B, N, N)`` built in place from ``block``, minus the word-to-word
    weights ``(B, N, N)``, and the root weights ``root`` ``(B, N)`` (no padding)."""
    diagonal = block.sum(-2).neg_()
    if multiroot:
        diagonal += root
    block.diagonal(dim1=-2, dim2=-1).add_(diagonal)
    if not multiroot:
        block[:, 0, :] = root
    return block


def _adjoint(matrix: Tensor, multiroot: bool) -> Tensor:
    """The adjoint of :func:`laplacian` (``<L(x), M> = <x, L*(M)>`` on arcs) applied to
    ``matrix`` ``(..., N, N)``: ``(..., N+1, N+1)``, column 0 exactly 0.

    Multi-root: row 0 (root arcs) is ``diag(M)`` and row h is ``diag(M) - M[h-1]``, i.e.
    ``diag(M') - M'`` for ``M'`` the matrix padded with a zero row and column in front.
    Single-root: row 0 is ``M[0]`` (the replaced row), row 1 is ``diag(M)`` with its first
    entry zeroed, row h >= 2 is that minus ``M[h-1]``.
    """
    if multiroot:
        padded = _pad(matrix, (1, 0, 1, 0))
        return padded.diagonal(dim1=-2, dim2=-1).unsqueeze(-2) - padded
    diagonal = _pad(matrix.diagonal(dim1=-2, dim2=-1)[..., 1:], (2, 0)).unsqueeze(-2)  # word 1's entry: its root weight
    adjoint = diagonal - _pad(matrix[..., 1:, :], (1, 0, 2, 0))
    adjoint[..., 0, 1:] = matrix[..., 0, :]
    return adjoint


def weighted_adjoint(weights: Tensor, matrix: Tensor, multiroot: bool) -> Tensor:
    """``weights * L*(matrix)``: ``(..., N+1, N+1)`` weights, ``(..., N, N)`` matrix ->
    ``(..., N+1, N+1)``, column 0 exactly 0. ``L*`` is the adjoint of :func:`laplacian`."""
    adjoint = _adjoint(matrix, multiroot)
    if torch.is_grad_enabled() and (weights.requires_grad or matrix.requires_grad):
        return weights * adjoint
    return adjoint.mul_(weights)  # in place: one buffer less


@dataclass
class Factorisation:
    """One LU factorisation of a batch's Laplacian and everything read from it (no autograd).

    Attributes:
        weights: ``(B, N+1, N+1)`` shifted arc weights ``exp(scores - column max)``, 0 off arcs.
        inverse: ``(B, N, N)`` the Laplacian's inverse ``X``.
        log_det: ``(B,)`` ``log det L(weights)``, the log-partition of the shifted weights
            (:attr:`log_partition` adds the shift back).
        multiroot: the tree set.
        mask: ``(B, N+1, N+1)`` bool arc mask.
        log_weights: ``(B, N+1, N+1)`` ``log(weights)`` in the compute dtype (the scores minus
            each word's largest incoming score), ``-inf`` off arcs; :meth:`finite_log_weights`
            turns the ``-inf`` into 0 in place, on first use.
        shift: ``(B,)`` the sum of those largest scores, ``log_partition - log_det``.
        dead: ``(B,)`` bool, sentences without a tree, or None if there are none.
        exact: ``(F,)`` long, sentences with a tree whose LU cancels, or None; their ``log Z``
            comes from :func:`_eliminate` and their marginals and VJPs from autograd through it.
        padding: ``(F, N)`` bool, the padded words of the ``exact`` sentences.
        exact_scores: ``(F, N+1, N+1)`` their log-weights, ``-inf`` off arcs.

    ``weights`` and ``inverse`` are 0 on ``dead`` and ``exact`` sentences. :meth:`marginals`
    is computed on first use and shared by every reader.
    """

    weights: Tensor
    inverse: Tensor
    log_det: Tensor
    multiroot: bool
    mask: Tensor
    log_weights: Tensor
    shift: Tensor
    dead: Tensor | None = None
    exact: Tensor | None = None
    padding: Tensor | None = None
    exact_scores: Tensor | None = None
    _marginals: Tensor | None = None
    _finite: bool = False

    @property
    def log_partition(self) -> Tensor:
        """``(B,)`` ``log Z`` of the scores (a new tensor at each read)."""
        return self.log_det + self.shift

    def finite_log_weights(self) -> Tensor:
        """``log_weights`` with 0 off the arcs and on forbidden arcs (in place, once)."""
        if not self._finite:
            self.log_weights.nan_to_num_(0.0, 0.0, 0.0)
            self._finite = True
        return self.log_weights

    def marginals(self) -> Tensor:
        """``mu = w * L*(X^T)``: ``(B, N+1, N+1)`` in the compute dtype, computed once."""
        if self._marginals is None:
            mu = weighted_adjoint(self.weights, self.inverse.mT, self.multiroot)
            if self.exact is not None:
                mu[self.exact] = exact_derivatives(self.exact_scores, self.padding, self.multiroot)
            self._marginals = mu
        return self._marginals

    def marginal_vjp(self, grad: Tensor) -> Tensor:
        """Vector-Jacobian product of the marginals: ``sum_e grad_e d mu_e / d scores``.

        This is ``Cov(sum_e grad_e 1_e, 1_e')`` for every arc e' (T2 with R = 1):
        ``mu * grad - w * L*((X L(w * grad) X)^T)``; O(N^3). ``grad`` ``(B, N+1, N+1)`` in
        the compute dtype, finite. Not differentiable (for custom backwards).
        """
        inverse, weights, multiroot = self.inverse, self.weights, self.multiroot
        weighted = weights * grad
        lap = _laplacian_block(weighted[:, 1:, 1:].neg(), weighted[:, 0, 1:], multiroot)
        vjp = torch.mul(self.marginals(), grad).addcmul_(_adjoint((inverse @ lap @ inverse).mT, multiroot), weights, value=-1)
        if self.exact is not None:  # double backward through _eliminate
            scores, direction = self.exact_scores, grad[self.exact].unsqueeze(1)
            vjp[self.exact] = exact_derivatives(scores, self.padding, multiroot, direction).squeeze(1)
        return vjp

    def unfactored(self) -> Tensor | None:
        """``(B,)`` bool: ``dead`` or ``exact`` sentences (weights and inverse 0), or None if none."""
        if self.exact is None:
            return self.dead
        unfactored = torch.zeros_like(self.log_det, dtype=torch.bool).index_fill_(0, self.exact, True)
        return unfactored if self.dead is None else unfactored.logical_or_(self.dead)


def factorise(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Factorisation:
    """Shift, exponentiate and LU-factorise the Laplacian of unlabeled ``scores`` (no grad)."""
    return prepare(scores.detach(), lengths, multiroot, validate=False).factor


class Prepared(NamedTuple):
    """Scores ready for the engine, from :func:`prepare`.

    ``filled``: the scores in float32/64, labeled ones ``(B, N+1, N+1, L)`` with 0 on
    non-arcs and on arcs that allow no label (unlabeled ones as given); ``arcs``: the
    unlabeled ``(B, N+1, N+1)`` scores the autograd Functions differentiate (their
    gradients are exactly 0 off the arcs, whatever the padding holds); ``factor``: the
    :class:`Factorisation` of ``arcs``.
    """

    filled: Tensor
    arcs: Tensor
    factor: Factorisation


def prepare(scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True) -> Prepared:
    """Validate (shapes, lengths, NaN/+inf on arcs: host syncs) if asked, mask and factorise
    once. Call with autocast off (:func:`no_autocast`)."""
    if not torch.is_tensor(lengths) or lengths.device != scores.device:
        lengths = torch.as_tensor(lengths, device=scores.device)
    if validate:
        _check_shapes(scores, lengths, "scores")
    if scores.dtype not in (torch.float32, torch.float64):
        scores = scores.float()
    mask, padding = masks(lengths, scores.shape[1] - 1)
    nonarc = ~mask
    if scores.dim() == 4:
        # padding may hold NaN: keep it out of autograd (and out of the label softmax)
        filled, arcs = sum_labels(scores.masked_fill(nonarc.unsqueeze(-1), 0.0))
    else:
        filled = arcs = scores
    # detached: no graph is recorded, so no no_grad() context is needed
    masked = arcs.detach().to(_compute_dtype(arcs.device)).masked_fill(nonarc, float("-inf"))
    return Prepared(filled, arcs, _factorise(masked, mask, padding, lengths, multiroot, validate))


def _factorise(
    masked: Tensor, mask: Tensor, padding: Tensor, lengths: Tensor, multiroot: bool, validate: bool
) -> Factorisation:
    """:func:`factorise` of compute-dtype scores already ``-inf`` on every non-arc (no grad;
    ``masked`` is overwritten: it becomes the factorisation's ``log_weights``); ``padding``
    ``(B, N)`` bool marks the padded words."""
    n = masked.shape[-1] - 1
    shift = masked.amax(dim=-2, keepdim=True)  # (B, 1, N+1): per word
    top = shift.amax() if validate else None
    shift = shift.nan_to_num_(0.0, 0.0, 0.0)
    log_weights = masked.sub_(shift)  # (the caller's masked copy)
    weights = log_weights.exp()
    into = weights[:, 1:, 1:].sum(-2)  # (B, N): weight into each word from words
    lap = _laplacian(weights, padding, multiroot, into)
    lu, pivots, _ = torch.linalg.lu_factor_ex(lap)
    log_det = lu.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)  # -inf for an exactly singular Laplacian
    # |det| <= prod_m S_m, S_m >= 1 the weight into word m (padding: 1), so the LU loses about
    # log(prod S / |det|) nats of digits: redo where that is over half of them. This also
    # covers a singular Laplacian (infinite loss) and det < 0 (rounding on a near-singular
    # matrix: an error larger than |det| itself, a loss of all the digits).
    lost = into.add(weights[:, 0, 1:]).clamp_min_(1.0).log_().sum(-1) - log_det
    redo = lost > -0.5 * math.log(torch.finfo(masked.dtype).eps)
    inverse = torch.linalg.lu_solve(lu, pivots, _eye(n, masked.dtype, masked.device).expand_as(lap))
    # a real word's shift is finite unless the sentence has no tree (then it is redone)
    shift = shift.sum((-2, -1))
    factor = Factorisation(weights, inverse, log_det, multiroot, mask, log_weights, shift)
    if validate:
        _check_ranges(lengths, top, n, "scores")
    if redo.any():  # (after the checks: their errors name the cause)
        _redo(factor, redo, padding)
    return factor


def _redo(factor: Factorisation, redo: Tensor, padding: Tensor) -> None:
    """Redo the ``redo`` ``(B,)`` sentences of ``factor`` (padding ``(B, N)``) with
    :func:`_eliminate`; warn about those without a tree. Updates ``factor`` in place."""
    index = redo.nonzero().flatten()
    log_z = _eliminate(factor.log_weights[index], padding[index], factor.multiroot)
    factor.log_det[index] = log_z
    tree = log_z > float("-inf")
    if not bool(tree.all()):
        dead = index[~tree]
        warnings.warn(
            f"no spanning tree in sentences {dead.tolist()} of the batch: log Z = -inf, zero marginals",
            NoSpanningTreeWarning,
            stacklevel=_caller_level(),
        )
        factor.dead = torch.zeros_like(redo).index_fill_(0, dead, True)
    if bool(tree.any()):
        factor.exact, factor.padding = index[tree], padding[index[tree]]
        factor.exact_scores = factor.log_weights[factor.exact]
    factor.weights.masked_fill_(redo[:, None, None], 0.0)
    factor.inverse.masked_fill_(redo[:, None, None], 0.0)


def _caller_level() -> int:
    """The stack level of the first frame outside this package (for warnings)."""
    import sys

    frame, level = sys._getframe(1), 1
    package = __name__.rsplit(".", 1)[0] + "."
    while frame is not None and (frame.f_globals.get("__name__", "") + ".").startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _eliminate(scores: Tensor, padding: Tensor, multiroot: bool) -> Tensor:
    """``log Z`` without subtractions (Grassmann, Taksar & Heyman's elimination): ``(F,)``.

    Args: ``scores`` ``(F, N+1, N+1)`` in the compute dtype, ``-inf`` off the arcs (may
    require grad: the result is differentiable); ``padding`` ``(F, N)`` bool.

    Multi-root: eliminating word k from the Laplacian with word arcs ``A`` (h -> m) and root
    weights ``r`` (a Kron reduction) leaves the Laplacian of the other words with
    ``A_ij += A_ik A_kj / d_k`` and ``r_j += r_k A_kj / d_k``, where the pivot
    ``d_k = r_k + sum_i A_ik`` runs over the words not yet eliminated, and
    ``det = prod_k d_k``. Every step adds and multiplies non-negative numbers, so no digit
    is lost however close to singular the Laplacian is, and ``d_k = 0`` exactly when no
    tree exists.

    Single-root (Koo et al.): ``Z = [eps^1] Z_multi(eps r)``. To first order in eps the
    pivot is ``w_k = sum_i A_ik`` (no root weight), ``A'`` is as above, and the root weights
    ``r + r_k A_k. / w_k`` stay first order, so ``Z = w_k Z'(r + r_k A_k. / w_k)`` (the first
    order part of ``A'`` drops out: the columns of a Laplacian without root sum to 0). ``Z'``
    is linear in the root weights, so ``Z = (w_k + r_k) Z'((w_k r + r_k A_k.) / (w_k + r_k))``,
    a convex combination that keeps them bounded. ``w_k = 0`` (no word left reaches k: k is
    the root's only child; at the latest, the last word) makes the pivot ``eps r_k`` and the
    rest multi-root at order 0 with root weights ``A_k.``: ``Z = r_k Z'_multi(A_k.)``, the
    same formula, and the elimination is multi-root from then on.
    """
    shift = scores.detach().amax(-2, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)
    weights = torch.exp(scores - shift)
    root, arcs = weights[:, 0, 1:], weights[:, 1:, 1:]
    log_z = shift.sum((-2, -1))
    multi = torch.full_like(log_z, multiroot, dtype=torch.bool)  # single-root: until a root child is found
    pad = padding.to(weights.dtype)  # padded words: pivot 1, no arcs
    for k in range(arcs.shape[-1]):  # word k + 1 is row 0 of what is left
        into, out, first = arcs[:, 1:, 0], arcs[:, 0, 1:], root[:, 0]
        words = into.sum(-1) + pad[:, k]
        pivot = words + first  # the factor of Z (0: no tree)
        lap = torch.where(multi, pivot, words)  # the Laplacian's pivot
        arcs = arcs[:, 1:, 1:] + (into / torch.where(lap > 0, lap, 1.0)[:, None]).unsqueeze(-1) * out.unsqueeze(-2)
        pivot_or_1 = torch.where(pivot > 0, pivot, 1.0)
        keep = torch.where(multi, 1.0, words / pivot_or_1)
        root = root[:, 1:] * keep[:, None] + (first / pivot_or_1)[:, None] * out
        multi = multi.logical_or(words == 0)
        log_z = log_z + pivot.log()
    return log_z


def exact_derivatives(scores: Tensor, padding: Tensor, multiroot: bool, directions: Tensor | None = None) -> Tensor:
    """Marginals ``(F, N+1, N+1)`` of the sentences of :func:`_eliminate` (same arguments),
    by autograd through it; with ``directions`` ``(F, R, N+1, N+1)``, their VJPs
    ``sum_e d_e d mu_e / d scores`` ``(F, R, N+1, N+1)`` by double backward. The result is
    differentiable when grad mode is on and ``scores`` or ``directions`` require grad. Works
    under ``torch.inference_mode`` too (the clone makes a normal tensor of an inference one)."""
    create = torch.is_grad_enabled() and (scores.requires_grad or (directions is not None and directions.requires_grad))
    with torch.inference_mode(False), torch.enable_grad():
        x = scores if scores.requires_grad else scores.clone().requires_grad_()
        log_z = _eliminate(x, padding, multiroot)
        (mu,) = torch.autograd.grad(log_z.sum(), x, create_graph=create or directions is not None)
        if directions is None:
            return mu
        (vjps,) = torch.autograd.grad(mu, x, directions.movedim(1, 0), create_graph=create, is_grads_batched=True)
    return vjps.movedim(0, 1)



class _ClosedForm(torch.autograd.Function):
    """``value`` (read off a factorisation, no graph) whose backward is the closed-form
    marginal VJP in the direction ``direction(grad)``: see :func:`closed_form_gradient`."""

    @staticmethod
    def forward(ctx, arcs: Tensor, value: Tensor, factor: Factorisation, direction: Callable[[Tensor], Tensor]) -> Tensor:
        ctx.factor, ctx.direction, ctx.dtype = factor, direction, arcs.dtype
        return value.clone()  # a fresh tensor: the value may be one the factorisation caches

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        factor = ctx.factor
        with no_autocast(grad.device):
            vjp = factor.marginal_vjp(ctx.direction(grad.to(factor.weights.dtype)))
        return vjp.to(ctx.dtype), None, None, None


def closed_form_gradient(arcs: Tensor, value: Tensor, factor: Factorisation, direction: Callable[[Tensor], Tensor]) -> Tensor:
    """``value``, made differentiable w.r.t. the arc scores ``arcs`` ``(B, N+1, N+1)`` that
    ``factor`` factorised: for an upstream gradient ``g`` (``value``'s shape, compute dtype)
    the gradient is ``factor.marginal_vjp(direction(g))``, i.e. ``Cov(sum_e d_e 1_e, 1_e')``
    for the direction ``d = direction(g)`` ``(B, N+1, N+1)`` (T2 with R = 1), with no graph.

    The engine's one custom backward: any quantity whose gradient is a covariance with the
    arcs (the marginals, a T1 expectation of constant features, the entropy) is a value
    plus its direction. ``value`` must not need a graph itself (compute it from ``factor``).
    """
    return _ClosedForm.apply(arcs, value, factor, direction)


def _differentiable_marginals(arcs: Tensor, factor: Factorisation) -> Tensor:
    """``factor``'s marginals in ``arcs``' dtype, differentiable w.r.t. ``arcs`` (the
    marginals' VJP is the marginal VJP in the direction of the upstream gradient)."""
    return closed_form_gradient(arcs, factor.marginals().to(arcs.dtype), factor, lambda grad: grad)


class _LogPartition(torch.autograd.Function):
    """scores -> log Z; its gradient is the marginals (themselves differentiable, so that
    double backward works: the one engine gradient that is not a marginal VJP)."""

    @staticmethod
    def forward(ctx, scores: Tensor, factor: Factorisation) -> Tensor:
        ctx.factor = factor
        ctx.save_for_backward(scores)
        return factor.log_partition.to(scores.dtype)  # a new tensor, not one the factor holds: no ref cycle

    @staticmethod
    def backward(ctx, grad: Tensor):
        (scores,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the marginals must be differentiable
            mu = _differentiable_marginals(scores, ctx.factor)
        else:
            mu = ctx.factor.marginals().to(grad.dtype)
        return grad[:, None, None] * mu, None


def no_autocast(device: torch.device):
    """A context with autocast off on ``device`` (a no-op context when it is already off)."""
    kind = device.type
    if kind in ("cpu", "cuda") and not torch.is_autocast_enabled(kind):
        return contextlib.nullcontext()
    return torch.autocast(kind, enabled=False)


def sum_labels(filled: Tensor) -> tuple[Tensor, Tensor]:
    """Labeled scores ``(B, N+1, N+1, L)`` (finite on non-arcs) -> (``filled`` with 0 on arcs
    that allow no label, so that their label softmax is finite; the arc scores
    ``logsumexp_l`` ``(B, N+1, N+1)``, ``-inf`` on those arcs, with finite gradients)."""
    impossible = (filled == float("-inf")).all(-1)
    filled = filled.masked_fill(impossible.unsqueeze(-1), 0.0)
    return filled, filled.logsumexp(-1).masked_fill(impossible, float("-inf"))


def log_partition_and_marginals_from(prepared: Prepared, with_log_z: bool = True) -> tuple[Tensor | None, Tensor]:
    """``log Z`` ``(B,)`` (None unless ``with_log_z``) and marginals (the shape of the scores)
    of a :class:`Prepared` batch, differentiable w.r.t. ``prepared.filled``/``arcs``."""
    filled, arcs, factor = prepared
    if torch.is_grad_enabled() and arcs.requires_grad:
        log_z = _LogPartition.apply(arcs, factor) if with_log_z else None
        mu = _differentiable_marginals(arcs, factor)
    else:
        log_z = factor.log_partition.to(arcs.dtype) if with_log_z else None
        mu = factor.marginals().to(arcs.dtype)
    if filled.dim() == 4:
        mu = mu.unsqueeze(-1) * filled.softmax(-1)
    return log_z, mu


def log_partition_and_marginals(
    scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True
) -> tuple[Tensor, Tensor]:
    """``log Z`` ``(B,)`` and marginals (shape of ``scores``) from one factorisation.

    Both are differentiable w.r.t. ``scores`` (the marginals through the T2 closed form).
    Labeled marginals are ``mu[h, m] * softmax_l(scores[h, m, :])``. Half-precision
    inputs give float32 results: a bf16 ``log Z`` would be too coarse to train on.
    ``validate=False`` skips the argument checks (and their host syncs).
    """
    with no_autocast(scores.device):
        return log_partition_and_marginals_from(prepare(scores, lengths, multiroot, validate))


def log_partition(scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True) -> Tensor:
    """``log Z``: ``(B,)``, the log of the total weight of all trees (``-inf`` if none)."""
    return log_partition_and_marginals(scores, lengths, multiroot, validate)[0]


def marginals(scores: Tensor, lengths: Tensor, multiroot: bool = False, validate: bool = True) -> Tensor:
    """Arc marginals ``p(h -> m in d)``, same shape as ``scores``; exactly 0 on non-arcs."""
    with no_autocast(scores.device):
        return log_partition_and_marginals_from(prepare(scores, lengths, multiroot, validate), with_log_z=False)[1]
