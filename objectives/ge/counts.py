"""Count estimation: the expected number of arcs firing each constraint under arc marginals
(or gold arcs), its adjoint (per-arc weights of a vector over the constraints), and rates
estimated from counts (:func:`estimate_targets`).

Memory. The expected count of every (parent tag, child tag) of a mask is a contraction of
the masked arc marginals with the head's and the child's tag distributions,
``sum_b sum_{h,m} mu[b,h,m] [mask] P[b,h,p] P[b,m,c]``: O(M B N^2 T) time and O(B N^2 + C T^2)
memory for M masks and C arc classes, whatever the number of constraints K; constraints on
labels add the ``(B, N+1, N+1, G)`` probabilities of their G label groups, read at once per mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..conventions import IGNORE_INDEX, ConfigurationError, word_mask
from .compiled import (
    ANY_ID,
    ROOT_ID,
    CompiledConstraints,
    arc_masks,
    class_members,
    compile_constraints,
    label_columns,
)
from .rules import SIDES, Constraint

__all__ = ["MIN_COUNT", "tag_distributions", "label_groups", "expected_counts", "arc_weights", "statistics",
           "denominators", "gold_counts", "rates", "estimate_targets"]

MIN_COUNT = 10
"""Default least number of words of a child tag in the labeled sample for a target to be
estimated for its constraints (with fewer, the rate would be noise and the constraint is left out)."""


def tag_distributions(upos: Tensor, lengths: Tensor, num_tags: int, dtype: torch.dtype,
                      trained: bool = False) -> Tensor:
    """Each word's tag distribution ``(B, N+1, T + 1)``, 0 at position 0 and on padding; the
    last column is 1 on every word (the child ``"any"`` of the compiled constraints).

    ``upos``: ``(B, N+1)`` long tag ids, or ``(B, N+1, T)`` float tag probabilities (soft
    tags; detached unless ``trained``: then GE's gradient reaches the tagger that gave them).
    """
    if upos.is_floating_point():
        if upos.shape[-1] != num_tags or upos.dim() != 3:
            raise ValueError(f"soft UPOS tags must be (B, N+1, {num_tags}) probabilities, got {tuple(upos.shape)}")
        probs = (upos if trained else upos.detach()).to(dtype)
    else:
        probs = torch.nn.functional.one_hot(upos, num_tags).to(dtype)
    words = word_mask(lengths, upos.shape[1] - 1).unsqueeze(-1).to(dtype)
    return torch.cat([probs * words, words], -1)


def expected_counts(ids: CompiledConstraints, mu: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
    """``E[sum_e f_k(e)]`` summed over the batch: ``(K,)``, from arc marginals (or gold arc
    indicators) ``mu`` ``(B, N+1, N+1)``, tag distributions ``tags`` ``(B, N+1, T)`` and, for
    constraints on labels, the arcs' label-group probabilities ``labels`` ``(B, N+1, N+1, G)``.

    For each arc class, ``sum_{b,h,m} mu[b,h,m] [side, distance] q[b,h,m,g] P[b,h,p] P[b,m,c]``
    for every tag pair (only for classes a tag-parent constraint uses) and summed over the heads
    (any-word constraints; all label groups of a mask at once), then gathered per constraint;
    root constraints read ``sum_{b,m} mu[b,0,m] P[b,m,c]`` (a root arc is always on the right).
    Differentiable w.r.t. ``mu`` and ``labels``.
    """
    flat = tags.flatten(0, 1).mT  # (T, B (N+1))
    num_tags = tags.shape[-1]
    pairs, any_head = [flat.new_zeros(num_tags, num_tags)] * len(ids.class_labels), [None] * len(ids.class_labels)
    for row, mask in enumerate(arc_masks(ids, mu.shape[-1], mu.dtype)):
        weighted = mu * mask
        unlabeled, labeled = class_members(ids, row)
        if labeled:
            q = label_columns(ids, labels, labeled)  # (B, N+1, N+1, n)
            per_word = (weighted.unsqueeze(-1) * q).sum(1)  # (B, N+1, n): [b, m, class], summed over heads
            per_child = per_word.flatten(0, 1).mT @ tags.flatten(0, 1)  # (n, T): [class, c]
            for i, c in enumerate(labeled):
                any_head[c] = per_child[i]
                if ids.class_pairs[c]:
                    pairs[c] = flat @ torch.bmm(weighted * q[..., i], tags).flatten(0, 1)
        for c in unlabeled:
            any_head[c] = flat @ weighted.sum(1).flatten()  # (T,): [c]
            if ids.class_pairs[c]:
                pairs[c] = flat @ torch.bmm(weighted, tags).flatten(0, 1)  # (T, T): [p, c]
    pairs, any_head = torch.stack(pairs), torch.stack(any_head)  # (C, T, T), (C, T)
    parent, child, arc_class = ids.parent, ids.child, ids.arc_class
    root = (mu[:, 0].unsqueeze(-1) * tags).sum((0, 1))[child] * (ids.side != SIDES["left"])  # on the right
    return torch.where(parent == ROOT_ID, root, torch.where(
        parent == ANY_ID, any_head[arc_class, child], pairs[arc_class, parent.clamp_min(0), child]))


def arc_weights(ids: CompiledConstraints, g: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
    """``r[b, h, m] = sum_k g_k f_k(h -> m)``: ``(K,)`` weights, ``(B, N+1, T)`` tags (and the
    label-group probabilities of :func:`expected_counts`) -> ``(B, N+1, N+1)``, through a
    ``(T, T)`` table per arc class (never a per-constraint arc tensor)."""
    num_classes, num_tags = len(ids.class_labels), tags.shape[-1]
    parent, child, arc_class = ids.parent, ids.child, ids.arc_class
    table = g.new_zeros(num_classes, num_tags, num_tags).index_put_(
        (arc_class, parent.clamp_min(0), child), torch.where(parent >= 0, g, 0.0), accumulate=True)
    any_head = g.new_zeros(num_classes, num_tags).index_put_(
        (arc_class, child), torch.where(parent == ANY_ID, g, 0.0), accumulate=True)
    root = torch.where((parent == ROOT_ID) & (ids.side != SIDES["left"]), g, 0.0)  # root arcs are on the right
    r = tags.new_zeros(tags.shape[0], tags.shape[1], tags.shape[1])
    for row, mask in enumerate(arc_masks(ids, tags.shape[1], tags.dtype)):
        # [b, h, m] = sum_{p,c} P[b,h,p] W[p,c] P[b,m,c] + sum_c P[b,m,c] w[c] (times q[b,h,m,g]), on the mask's arcs
        unlabeled, labeled = class_members(ids, row)
        inside = tags @ any_head[unlabeled].sum(0) if unlabeled else tags.new_zeros(tags.shape[:2])
        inside = inside.unsqueeze(1) + sum(tags @ table[c] @ tags.mT for c in unlabeled if ids.class_pairs[c])
        if labeled:
            q = label_columns(ids, labels, labeled)  # (B, N+1, N+1, n)
            inside = inside + (q * (tags @ any_head[labeled].mT).unsqueeze(1)).sum(-1)
            inside = inside + sum(q[..., i] * (tags @ table[c] @ tags.mT) for i, c in enumerate(labeled) if ids.class_pairs[c])
        r = r + mask * inside
    r[:, 0] += tags @ g.new_zeros(num_tags).index_put_((child,), root, accumulate=True)
    return r


def label_groups(ids: CompiledConstraints, probabilities: Tensor) -> Tensor | None:
    """Label probabilities ``(..., L)`` summed into the constraints' label groups ``(..., G)``;
    None when no constraint has a label."""
    if not len(ids.groups):
        return None
    return probabilities @ ids.groups.mT.to(probabilities.dtype)


def word_counts(ids: CompiledConstraints, tags: Tensor) -> Tensor:
    """The words each constraint's rate is counted over when it is per child or per head (the
    words of its child, or its parent, tag; any word for ``"any"``) ``(K,)``; 0 per arc."""
    totals = tags.sum((0, 1))  # (T + 1,): the last, every word
    parent = torch.where(ids.parent >= 0, ids.parent, totals.shape[0] - 1)
    per = torch.stack([totals[ids.child], totals[parent], torch.zeros_like(totals[parent])])
    return per.gather(0, ids.per.unsqueeze(0)).squeeze(0)


def statistics(ids: CompiledConstraints, mu: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
    """The batch statistics a GE penalty reads, ``(2K + 1,)``: expected arcs firing each
    constraint (:func:`expected_counts`), the words each is counted over (:func:`word_counts`),
    and words in all."""
    words = tags[..., -1].sum().reshape(1)
    return torch.cat([expected_counts(ids, mu, tags, labels), word_counts(ids, tags), words])


def denominators(ids: CompiledConstraints, fires: Tensor, words: Tensor) -> Tensor:
    """What each rate is counted over ``(K,)``: its ``words`` ``(K,)``, or for a rate per arc the
    (expected) arcs ``fires`` ``(K,)`` of its denominator constraint (differentiably)."""
    return torch.where(ids.given >= 0, fires[ids.given.clamp_min(0)], words)


def _gold_arcs(heads: Tensor, lengths: Tensor, dtype: torch.dtype) -> Tensor:
    """Gold trees as arc indicators ``(B, N+1, N+1)`` (``[b, heads[b, m], m] = 1`` for words)."""
    words = word_mask(lengths, heads.shape[1] - 1)
    arcs = torch.zeros(heads.shape + heads.shape[1:], dtype=dtype, device=heads.device)
    return arcs.scatter_(1, heads.unsqueeze(1), words.unsqueeze(1).to(dtype))


def gold_counts(ids: CompiledConstraints, heads: Tensor, upos: Tensor, lengths: Tensor, num_tags: int,
                labels: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per constraint, the number of gold arcs firing it and what its rate is counted over
    (:func:`denominators`): two ``(K,)`` float64; ``labels`` ``(B, N+1)``: gold label ids
    (needed by constraints on labels)."""
    tags = tag_distributions(upos, lengths, num_tags, torch.float64)
    groups = None
    if len(ids.groups):
        if labels is None:
            raise ConfigurationError("constraints on labels estimate their targets from labeled arcs: the sample has no labels")
        gold = torch.nn.functional.one_hot(labels.clamp_min(0), ids.groups.shape[1]) * (labels != IGNORE_INDEX).unsqueeze(-1)
        groups = label_groups(ids, gold.to(torch.float64)).unsqueeze(1).expand(-1, heads.shape[1], -1, -1)  # the child's arc
    fires = expected_counts(ids, _gold_arcs(heads, lengths, torch.float64), tags, groups)
    return fires, denominators(ids, fires, word_counts(ids, tags))


def rates(fires: Tensor, counts: Tensor, min_count: int) -> Tensor:
    """``fires / counts`` ``(K,)``, NaN where ``counts`` is below ``min_count`` (at least 1)."""
    return torch.where(counts >= max(min_count, 1), fires / counts.clamp_min(1), torch.nan)


def estimate_targets(
    constraints: Sequence[Constraint],
    heads: Tensor,
    upos: Tensor,
    lengths: Tensor,
    upos_vocab: Sequence[str],
    min_count: int = MIN_COUNT,
    labels: Tensor | None = None,
    label_vocab: Sequence[str] = (),
) -> Tensor:
    """Each constraint's rate in gold trees: ``(K,)`` float64, NaN where it is counted over
    fewer than ``min_count`` words or arcs (too few to estimate a rate).

    Args: ``heads`` ``(B, N+1)`` long, ``upos`` ``(B, N+1)`` ids into ``upos_vocab`` (or
    ``(B, N+1, T)`` tag probabilities), ``lengths`` ``(B,)``; for constraints on labels,
    ``labels`` ``(B, N+1)`` ids into ``label_vocab``.
    """
    ids = compile_constraints(constraints, upos_vocab, upos.device, label_vocab)
    return rates(*gold_counts(ids, heads, upos, lengths, len(upos_vocab), labels), min_count)[: len(constraints)]

