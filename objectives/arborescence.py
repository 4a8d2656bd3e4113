"""Exact maximum spanning arborescences of a batch, in torch on the scores' device.

:func:`maximum_arborescence` is Chu-Liu-Edmonds vectorised over the batch: every
sentence contracts all cycles of its greedy graph at once, in lockstep with the others,
so one round is a few `(B, N+1, N+1)` tensor operations and there is no host round trip
per sentence. The graph keeps its original `N+1` nodes; a contracted cycle is a
*component* (named by its smallest node), and an arc between two components is the best
original arc between them. Each round:

1. every component (but the root's) takes its best incoming arc from another component
   (smallest node, then smallest head on ties: deterministic);
2. the scores of all arcs into a component are lowered by that arc's score (every tree
   gives each component exactly one incoming arc, so this shifts every tree equally);
3. the components on a cycle of the chosen arcs (found by pointer doubling) merge.

A sentence whose chosen arcs make no cycle is done; at most `N` rounds, few in practice.
Expanding runs the rounds backwards: a component keeps its chosen arc unless a later
round already gave one of its nodes a head (then that arc entered it from outside).

Sentences whose greedy heads already form a (single-root) tree skip the rounds. The
others first get their best multi-root tree; where that has several root children, the
single-root constraint is made exact by the reweighting of Stanojević & Cohen (2021): root
arcs are lowered by more than any tree's score spread, so a tree with one root arc beats
any with two, and single-root trees keep their order (every sentence then contracts into
one component, hence the multi-root pass first: faster on trained parsers' scores,
docs/notebook/benchmarks.md). `-inf` arcs get a finite penalty below
that spread, so the tree returned uses as few `-inf` arcs as any tree of the set and a
valid tree comes back even when every tree scores `-inf`. Works in float64 (float32 on
MPS, which has no float64).
"""

from __future__ import annotations

import heapq
import itertools

import torch
from torch import Tensor

from .conventions import IGNORE_INDEX, arc_mask, word_mask
from .mtt import _compute_dtype

__all__ = ["maximum_arborescence", "best_labels", "kbest_arborescences", "is_tree", "tree_scores"]


def maximum_arborescence(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """Best tree of every sentence of a batch.

    Args:
        scores: `(B, N+1, N+1)`, `scores[b, h, m]` the log-weight of the arc h -> m;
            column 0, the diagonal and padding are ignored. Finite or `-inf`.
        lengths: `(B,)` words per sentence (at least 1).
        multiroot: allow several words to attach to the root; by default exactly one.

    Returns:
        heads: `(B, N+1)` long on the device of `scores`, 0 at position 0 and on padding.
    """
    size = scores.shape[-1]
    lengths = lengths.to(scores.device)
    arcs = arc_mask(lengths, size - 1)
    masked = scores.detach().to(_compute_dtype(scores.device)).masked_fill(~arcs, float("-inf"))
    words = word_mask(lengths, size - 1)
    heads = masked.argmax(1).masked_fill(~words, 0)
    for free in (True,) if multiroot else (True, False):  # multi-root first, then reweighted
        slow = ~is_tree(heads)
        if not multiroot:
            slow |= ((heads == 0) & words).sum(1) != 1
        if not bool(slow.any()):
            break
        index = slow.nonzero().flatten()
        weights = _finite_weights(masked[index], arcs[index], lengths[index], multiroot=free)
        heads[index] = _chu_liu_edmonds(weights, words[index])
    return heads


def kbest_arborescences(scores: Tensor, lengths: Tensor, k: int, multiroot: bool = False) -> tuple[Tensor, Tensor]:
    """The ``k`` best trees of every sentence, best first, by Lawler's (1972) partitioning
    with :func:`maximum_arborescence` as the subroutine (as Murty's ranking of assignments).

    Each sentence keeps a queue of disjoint tree sets, each given by arcs it must contain
    and arcs it must avoid, scored by its best tree. Taking the best tree d of the best set
    (its free words m_1..m_j in order) splits the rest of that set into j sets: the i-th
    keeps the arcs of m_1..m_{i-1} from d and avoids d's arc into m_i. Every round solves
    the new sets of all sentences in one batched call: O(k N) decodings of `(N+1)^2`
    graphs per sentence. Only trees with a finite score count (an arc scored `-inf`
    is no arc here), so a sentence may have fewer than ``k``.

    Args:
        scores: `(B, N+1, N+1)` arc scores, finite or `-inf` on arcs.
        lengths: `(B,)` words per sentence.
        k: how many trees per sentence (at least 1).
        multiroot: multi-root trees; by default single-root.

    Returns:
        heads `(k, B, N+1)` long (0 where a sentence has fewer trees) and their scores
        `(k, B)` in the dtype of `scores` (`-inf` where a sentence has fewer trees).
    """
    batch, size = scores.shape[0], scores.shape[-1]
    lengths = lengths.to(scores.device)
    exact = scores.detach().masked_fill(~arc_mask(lengths, size - 1), float("-inf"))
    heads = torch.zeros(k, batch, size, dtype=torch.long, device=scores.device)
    values = torch.full((k, batch), float("-inf"), dtype=scores.dtype, device=scores.device)
    order = itertools.count()  # breaks ties in the queues, first found first
    queues: list[list] = [[] for _ in range(batch)]
    # A tree set: (sentence, fixed heads (N+1,) with -1 for free words, avoided arcs (N+1, N+1)).
    sets = [(b, torch.full((size,), -1, device=scores.device), torch.zeros(size, size, dtype=torch.bool, device=scores.device))
            for b in range(batch)]
    for rank in range(k):
        _solve(exact, lengths, multiroot, sets, queues, order)
        sets = []
        for b, queue in enumerate(queues):
            if not queue:
                continue
            negative, _, tree, fixed, avoided = heapq.heappop(queue)
            heads[rank, b], values[rank, b] = tree, -negative
            free = ((fixed < 0) & word_mask(lengths[b : b + 1], size - 1)[0]).nonzero().flatten().tolist()
            for word in free:
                child_avoided = avoided.clone()
                child_avoided[tree[word], word] = True
                sets.append((b, fixed.clone(), child_avoided))
                fixed[word] = tree[word]
    return heads, values


def _solve(exact: Tensor, lengths: Tensor, multiroot: bool, sets: list, queues: list, order) -> None:
    """Decode the tree ``sets`` of :func:`kbest_arborescences` in one batch and queue the
    best tree of each that has a finite score."""
    if not sets:
        return
    index = torch.tensor([b for b, _, _ in sets], device=exact.device)
    fixed = torch.stack([f for _, f, _ in sets])  # (S, N+1)
    avoided = torch.stack([a for _, _, a in sets])  # (S, N+1, N+1)
    positions = torch.arange(exact.shape[-1], device=exact.device)
    other_head = (fixed.unsqueeze(1) >= 0) & (positions[None, :, None] != fixed.unsqueeze(1))  # (S, h, m)
    constrained = exact[index].masked_fill(avoided | other_head, float("-inf"))
    trees = maximum_arborescence(constrained, lengths[index], multiroot)
    values = tree_scores(constrained, trees, lengths[index]).tolist()
    for (b, f, a), tree, value in zip(sets, trees, values):
        if value > float("-inf"):
            heapq.heappush(queues[b], (-value, next(order), tree, f, a))


def best_labels(label_scores: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
    """Best label of each chosen arc.

    Args:
        label_scores: `(B, N+1, N+1, L)`, scores of each label on each arc h -> m.
        heads: `(B, N+1)` long, e.g. from :func:`maximum_arborescence`.
        lengths: `(B,)` words per sentence.

    Returns:
        labels: `(B, N+1)` long, argmax over L at `(heads[m], m)`; `-100` at position 0
        and on padding.
    """
    batch, size, _, num_labels = label_scores.shape
    index = heads[:, None, :, None].expand(batch, 1, size, num_labels)
    labels = label_scores.gather(1, index).squeeze(1).argmax(-1)
    return labels.masked_fill(~word_mask(lengths.to(heads.device), size - 1), IGNORE_INDEX)


def is_tree(heads: Tensor) -> Tensor:
    """Whether each row of `heads` `(B, N+1)` (0 at position 0 and on padding) leads every
    node to 0 (pointer doubling: after k squarings a node points to its 2^k-th ancestor).
    Returns a bool `(B,)`."""
    ancestor = heads
    for _ in range(max(1, (heads.shape[1] - 1).bit_length())):
        ancestor = ancestor.gather(1, ancestor)
    return (ancestor == 0).all(1)


def tree_scores(scores: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
    """``(B,)`` the sum of the arc scores ``(B, N+1, N+1)`` of each tree ``heads`` ``(B, N+1)``."""
    arcs = scores.gather(1, heads.unsqueeze(1)).squeeze(1)  # (B, N+1): scores[b, heads[b, m], m]
    return arcs.masked_fill(~word_mask(lengths.to(heads.device), scores.shape[-1] - 1), 0.0).sum(-1)


def _finite_weights(masked: Tensor, arcs: Tensor, lengths: Tensor, multiroot: bool) -> Tensor:
    """Weights `(B, N+1, N+1)` (the dtype of ``masked``), finite on arcs and `-inf` elsewhere, whose best tree
    is the one wanted: `-inf` arcs sit one tree's spread below the lowest finite arc, and
    (single-root) root arcs sit one more spread lower."""
    finite = arcs & torch.isfinite(masked)
    low = masked.masked_fill(~finite, float("inf")).amin((1, 2)).nan_to_num(0.0, 0.0, 0.0)
    high = masked.masked_fill(~finite, float("-inf")).amax((1, 2)).nan_to_num(0.0, 0.0, 0.0)
    size = (lengths + 1).to(masked.dtype)
    penalty = low - size * (high - low) - 1.0  # one -inf arc more always loses
    weights = torch.where(finite, masked, penalty[:, None, None])
    if not multiroot:  # one root arc more always loses
        spread = size * (high - penalty) + 1.0
        weights[:, 0] -= spread[:, None]
    return weights.masked_fill(~arcs, float("-inf"))


def _chu_liu_edmonds(weights: Tensor, words: Tensor) -> Tensor:
    """Heads `(B, N+1)` of the best arborescence of each finite-on-arcs graph `(B, N+1, N+1)`;
    ``words`` `(B, N+1)` marks the real words. Finished sentences leave the batch once they
    are a quarter of it."""
    batch, size, _ = weights.shape
    steps = max(1, (size - 1).bit_length())
    rows = torch.arange(batch, device=weights.device)  # which sentences the batch holds
    positions = torch.arange(size, device=weights.device).expand(batch, size)
    component = positions.masked_fill(~words, 0)  # padding joins the root's component
    running = torch.ones(batch, dtype=torch.bool, device=weights.device)
    rounds = []
    weights = weights.clone()
    for _ in range(size):
        # 1. Each component's best incoming arc (from another component).
        outside = component.unsqueeze(2) != component.unsqueeze(1)  # (B, h, m)
        best, head = weights.masked_fill(~outside, float("-inf")).max(1)  # (B, N+1) per node m
        best = best.masked_fill(component == 0, float("-inf"))
        component_best = torch.full_like(best, float("-inf")).scatter_reduce(1, component, best, "amax")
        is_best = (best == component_best.gather(1, component)) & (component != 0)
        node = torch.full_like(component, size).scatter_reduce(
            1, component, positions.masked_fill(~is_best, size), "amin")  # (B, C): its entry node
        active = (component == positions) & (positions != 0)  # (B, C): components
        node = torch.where(active, node, 0)
        source = torch.where(active, head.gather(1, node), 0)  # (B, C)
        rounds.append((rows, component, node, source, running.clone()))
        # 2. Lower every component's incoming arcs by its chosen arc's score.
        lowered = torch.where(active, component_best, 0.0).gather(1, component)  # (B, N+1) per node
        weights -= lowered.unsqueeze(1)
        # 3. Merge the components on a cycle of the chosen arcs.
        parent = torch.where(active, component.gather(1, source), 0)  # (B, C)
        ancestor, smallest = parent, torch.minimum(positions, parent)
        for _ in range(steps):
            smallest = torch.minimum(smallest, smallest.gather(1, ancestor))
            ancestor = ancestor.gather(1, ancestor)
        on_cycle = torch.zeros_like(active).scatter_(1, ancestor, True) & active
        running &= on_cycle.any(1)
        still = int(running.sum())
        if still == 0:
            break
        merged = torch.where(on_cycle, smallest, positions)
        component = torch.where(running.unsqueeze(1), merged.gather(1, component), component)
        if 4 * still <= len(rows):
            keep = running.nonzero().flatten()
            rows, weights, component, running = rows[keep], weights[keep], component[keep], running[keep]
            positions = positions[: len(keep)]
    heads = torch.zeros(batch, size + 1, dtype=torch.long, device=weights.device)
    entered = torch.zeros(batch, size + 1, dtype=torch.long, device=weights.device)
    positions = torch.arange(size, device=weights.device)
    for rows, component, node, source, valid in reversed(rounds):
        taken = torch.zeros_like(component).scatter_reduce(1, component, entered[rows, :size], "amax")
        keep = (component == positions) & (positions != 0) & (taken == 0) & valid.unsqueeze(1)
        target = torch.where(keep, node, size)
        entered[rows] = entered[rows].scatter(1, target, 1)
        heads[rows] = heads[rows].scatter(1, target, source)
    return heads[:, :size].masked_fill(~words, 0)


