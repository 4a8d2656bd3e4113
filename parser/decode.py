"""Exact maximum spanning arborescence decoding of arc scores.

`mst` decodes a batch in two stages:

1. Fast path (batched torch, on the scores' device): every word takes its best head.
   Each word's incoming arc is then individually maximal, so when these heads already
   form a tree (with a single root child if required), no tree can score higher. For a
   trained parser this covers most sentences.
2. The remaining sentences go one by one through Chu-Liu-Edmonds (`chu_liu_edmonds`,
   numpy, float64): O(n^2) vectorised work per cycle contraction, at most n
   contractions, so O(n^3) worst case; at treebank lengths the cost is mostly Python
   overhead per contraction.

The single-root constraint is exact and enforced inside Chu-Liu-Edmonds: while the
cycle-free greedy graph gives the root several children, the root arc that costs least to
give up is swapped for its child's best other arc (Gabow & Tarjan 1984, in the form of
Zmigrod, Vieira & Cotterell 2020): a few extra steps instead of the up to n contractions
that lowering every root arc costs (the reweighting of Stanojević & Cohen 2021, used here
until 2026-11-24 and 5x slower on a trained parser's scores: `python -m benchmarks.decode`).
`-inf` arcs get a finite penalty: the result uses as few `-inf` arcs as any (single-root)
tree can, and among those trees maximises the score; so a valid tree is returned even when
every tree scores `-inf`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from objectives.conventions import IGNORE_INDEX, ConfigurationError, arc_mask, word_mask

from .evaluate import nonprojective_arcs


def mst(scores: Tensor, lengths: Tensor, multiroot: bool = False, projective: bool = False) -> Tensor:
    """Maximum spanning arborescence of every sentence in a batch (with ``projective``, the
    best projective tree instead, by :func:`eisner`).

    Args:
        scores: `(B, N+1, N+1)`, `scores[b, h, m]` the log-weight of the arc h -> m;
            column 0, the diagonal and padding are ignored. Finite or `-inf`.
        lengths: `(B,)` words per sentence (at least 1).
        multiroot: allow several words to attach to the root; by default the root
            has exactly one child.

    Returns:
        heads: `(B, N+1)` long on the device of `scores`, 0 at position 0 and on
        padding. Ties are broken deterministically.
    """
    size = scores.shape[-1]
    lengths = lengths.to(scores.device)
    arcs = arc_mask(lengths, size - 1)
    masked = scores.detach().masked_fill(~arcs, float("-inf"))
    words = word_mask(lengths, size - 1)  # (B, N+1): positions 1..lengths[b]

    heads = masked.argmax(1).masked_fill(~words, 0)
    if projective:
        cpu = masked.to("cpu", torch.float64).numpy()
        for b, n in enumerate(lengths.tolist()):
            heads[b, : n + 1] = torch.from_numpy(eisner(cpu[b, : n + 1, : n + 1], single_root=not multiroot))
        return heads
    slow = ~_is_tree(heads)
    if not multiroot:
        slow |= ((heads == 0) & words).sum(1) != 1
    slow_ids = slow.nonzero().flatten().tolist()
    if not slow_ids:
        return heads

    slow_scores = masked[slow_ids].to("cpu", torch.float64).numpy()
    slow_heads = np.zeros((len(slow_ids), size), dtype=np.int64)
    for row, n in enumerate(lengths[slow_ids].tolist()):
        weights = _tree_weights(slow_scores[row, : n + 1, : n + 1])
        slow_heads[row, : n + 1] = chu_liu_edmonds(weights, single_root=not multiroot)
    heads[slow_ids] = torch.from_numpy(slow_heads).to(heads.device)
    return heads


def tree_scores(scores: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
    """``(B,)`` the sum of the arc scores ``(B, N+1, N+1)`` of each sentence's tree ``heads`` ``(B, N+1)``."""
    size = scores.shape[-1]
    arcs = scores.gather(1, heads.unsqueeze(1)).squeeze(1)  # (B, N+1): scores[b, heads[b, m], m]
    return arcs.masked_fill(~word_mask(lengths.to(heads.device), size - 1), 0.0).sum(-1)


def crossing_gaps(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's best spanning tree, its best projective tree (both ``(B, N+1)``) and
    how much more the first scores, ``(B,)`` float64 (0 when the best tree is projective:
    then it is also the best projective tree, and Eisner runs only on the others)."""
    spanning = mst(scores, lengths, multiroot)
    projective = spanning.clone()
    gap = torch.zeros(len(lengths), dtype=torch.float64)
    trees = spanning.tolist()
    crossing = [b for b, n in enumerate(lengths.tolist()) if any(nonprojective_arcs(trees[b][1 : n + 1]))]
    if crossing:
        index = torch.tensor(crossing, device=spanning.device)
        projective[index] = mst(scores[index], lengths[index], multiroot, projective=True)
        exact, sizes = scores[index].detach().to("cpu", torch.float64), lengths[index].cpu()
        gap[crossing] = tree_scores(exact, spanning[index].cpu(), sizes) - tree_scores(exact, projective[index].cpu(), sizes)
    return spanning, projective, gap.clamp_min_(0.0).to(spanning.device)


def check_decoder(projective: bool | None, crossing_margin: float | None) -> None:
    """Raise unless at most one of the two decoder choices is given."""
    if projective and crossing_margin is not None:
        raise ConfigurationError("give projective (always Eisner) or a crossing margin (Eisner unless a crossing tree "
                         "wins by the margin), not both")


def mst_with_margin(scores: Tensor, lengths: Tensor, margin: float, multiroot: bool = False) -> Tensor:
    """``(B, N+1)`` heads: a sentence's best spanning tree where it outscores its best
    projective tree by more than ``margin`` (log-weight units), else that projective tree.
    A margin of 0 gives :func:`mst`; an infinite one the best projective trees. A learned
    penalty on crossing arcs for parsers that invent them (choose it on dev with
    ``python -m parser.crossing_margin``)."""
    spanning, projective, gap = crossing_gaps(scores, lengths, multiroot)
    return torch.where((gap > margin).unsqueeze(-1), spanning, projective)


def mst_labels(label_scores: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
    """Best label of each chosen arc.

    Args:
        label_scores: `(B, N+1, N+1, L)`, scores of each label on each arc h -> m.
        heads: `(B, N+1)` long, e.g. from `mst`.
        lengths: `(B,)` words per sentence.

    Returns:
        labels: `(B, N+1)` long, argmax over L at `(heads[m], m)`; `-100` at position 0
        and on padding.
    """
    batch, size, _, num_labels = label_scores.shape
    index = heads[:, None, :, None].expand(batch, 1, size, num_labels)
    labels = label_scores.gather(1, index).squeeze(1).argmax(-1)
    return labels.masked_fill(~word_mask(lengths.to(heads.device), size - 1), IGNORE_INDEX)


def chu_liu_edmonds(weights: np.ndarray, single_root: bool = False) -> np.ndarray:
    """Exact maximum spanning arborescence of one dense graph rooted at node 0.

    Contracts one cycle of the greedy graph at a time (iteratively, so long sentences
    cannot hit the recursion limit), then expands the contractions in reverse. With
    ``single_root``, whenever the greedy graph has no cycle but several root children,
    the root arc with the smallest loss (its weight minus the best other arc into its
    child) is swapped for that other arc, and a cycle this closes is contracted in turn
    (Gabow & Tarjan 1984, as in Zmigrod, Vieira & Cotterell 2020).

    Args:
        weights: `(n+1, n+1)` float, `weights[h, m]` the weight of the arc h -> m,
            `-inf` for no arc; column 0 and the diagonal must be `-inf`. Some tree (with
            ``single_root``, some single-root tree) must use finite arcs only
            (`_tree_weights` makes all arcs finite). Not modified.
        single_root: the root has exactly one child.

    Returns:
        heads: `(n+1,)` int64, `heads[0] == 0`.
    """
    graph, contractions = weights, []
    heads = graph.argmax(0)
    heads[0] = 0
    while True:
        cycle = _find_cycle(heads)
        if cycle is not None:
            graph, contraction = _contract(graph, heads, cycle)
            contractions.append(contraction)
            heads = _contracted_heads(graph, heads, cycle, contraction[2])
            continue
        children = np.flatnonzero(heads[1:] == 0) + 1
        if not single_root or len(children) < 2:
            break
        # Swap: the root child that loses least takes its best other head (maybe a cycle).
        others = graph[1:, children].argmax(0) + 1
        loss = graph[0, children] - graph[others, children]
        cheapest = loss.argmin()
        heads[children[cheapest]] = others[cheapest]
    for contraction in reversed(contractions):
        heads = _expand(heads, *contraction)
    return heads


def _contracted_heads(graph: np.ndarray, heads: np.ndarray, cycle: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """Heads `(k+1,)` in the contracted `graph` `(k+1, k+1)`: the `k` nodes in `rest` keep
    theirs (a head in `cycle` becomes the new node `k`), the new node takes its best arc."""
    position = np.empty(len(heads), dtype=np.int64)
    position[rest] = np.arange(len(rest))
    position[cycle] = len(rest)
    contracted = np.append(position[heads[rest]], graph[:, len(rest)].argmax())
    contracted[0] = 0
    return contracted


def _contract(
    weights: np.ndarray, heads: np.ndarray, cycle: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Merge `cycle` of the greedy `heads` into one node, the last of the new graph.

    Returns the contracted `(k+1, k+1)` weights, with the `k` other nodes (root first)
    kept in order, and what `_expand` needs to undo it.
    """
    in_cycle = np.zeros(len(heads), dtype=bool)
    in_cycle[cycle] = True
    rest = np.flatnonzero(~in_cycle)
    k = len(rest)

    # Entering the cycle at v replaces the cycle arc heads[v] -> v.
    enter = weights[np.ix_(rest, cycle)] - weights[heads[cycle], cycle]
    leave = weights[np.ix_(cycle, rest)]
    enter_at = enter.argmax(1)  # (k,) cycle position entered from each outside node
    leave_from = leave.argmax(0)  # (k,) cycle position leading to each outside node

    contracted = np.full((k + 1, k + 1), -np.inf)
    contracted[:k, :k] = weights[np.ix_(rest, rest)]
    contracted[:k, k] = enter[np.arange(k), enter_at]
    contracted[k, :k] = leave[leave_from, np.arange(k)]
    return contracted, (heads, cycle, rest, enter_at, leave_from)


def _expand(
    sub: np.ndarray,
    heads: np.ndarray,
    cycle: np.ndarray,
    rest: np.ndarray,
    enter_at: np.ndarray,
    leave_from: np.ndarray,
) -> np.ndarray:
    """Heads `(n+1,)` of the graph before `_contract`, from the tree `sub` `(k+1,)` of
    the contracted graph: the cycle keeps all its arcs but the one replaced on entry."""
    k = len(rest)
    result = heads.copy()
    via_cycle = sub[:k] == k
    result[rest] = rest[np.where(via_cycle, 0, sub[:k])]
    result[rest[via_cycle]] = cycle[leave_from[via_cycle]]
    entered_from = sub[k]
    result[cycle[enter_at[entered_from]]] = rest[entered_from]
    return result


def _find_cycle(heads: np.ndarray) -> np.ndarray | None:
    """A cycle of the head graph `(n+1,)` as an array of nodes, or None."""
    parent = heads.tolist()
    state = [0] * len(parent)  # 0 unseen, 1 on the current path, 2 done
    state[0] = 2
    for start in range(1, len(parent)):
        path = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = parent[node]
        if state[node] == 1:
            return np.array(path[path.index(node) :])
        for visited in path:
            state[visited] = 2
    return None


def _is_tree(heads: Tensor) -> Tensor:
    """Whether each row of `heads` `(B, N+1)` (0 at position 0) leads every node to 0.

    Pointer doubling: after k squarings each node points to its 2^k-th ancestor.
    Returns a bool `(B,)`.
    """
    ancestor = heads
    for _ in range(max(1, (heads.shape[1] - 1).bit_length())):
        ancestor = ancestor.gather(1, ancestor)
    return (ancestor == 0).all(1)


def _tree_weights(scores: np.ndarray) -> np.ndarray:
    """Finite weights `(n+1, n+1)` whose best tree (of any set) is the tree we want.

    Trees are ranked lexicographically by (fewest `-inf` arcs; score): `-inf` arcs get a
    finite penalty so low that one more of them always loses. Non-arcs (column 0,
    diagonal) stay `-inf`. Returns a new array.
    """
    size = scores.shape[0]
    arcs = ~np.eye(size, dtype=bool)
    arcs[:, 0] = False
    finite = np.isfinite(scores) & arcs
    low, high = (
        (scores[finite].min(), scores[finite].max()) if finite.any() else (0.0, 0.0)
    )
    penalty = low - size * (high - low) - 1.0
    weights = np.where(finite, scores, penalty)
    weights[~arcs] = -np.inf
    return weights


def eisner(scores: np.ndarray, single_root: bool = True) -> np.ndarray:
    """Best projective tree by Eisner's O(n^3) algorithm (Eisner 1996).

    ``scores``: ``(n+1, n+1)`` float, ``scores[h, m]`` the arc h -> m (column 0 ignored).
    Returns heads ``(n+1,)`` with ``heads[0] = 0``. ``single_root``: the root has exactly
    one child (the word r maximising ``scores[0, r]`` plus its best projective spans).
    """
    n = scores.shape[0] - 1
    scores = scores.astype(np.float64).copy()
    scores[:, 0] = -np.inf
    complete = np.full((n + 1, n + 1, 2), -np.inf)  # [i, j, 1]: head i spans i..j; [i, j, 0]: head j
    incomplete = np.full((n + 1, n + 1, 2), -np.inf)
    complete_split = np.zeros((n + 1, n + 1, 2), dtype=np.int64)
    incomplete_split = np.zeros((n + 1, n + 1), dtype=np.int64)
    for i in range(n + 1):
        complete[i, i] = 0.0
    first = 1 if single_root else 0  # single-root: words 1..n first, the root arc last
    for width in range(1, n + 1):
        for i in range(first, n + 1 - width):
            j = i + width
            inner = complete[i, i:j, 1] + complete[i + 1 : j + 1, j, 0]  # split k = i..j-1
            k = int(np.argmax(inner))
            incomplete[i, j, 1] = inner[k] + scores[i, j]
            incomplete[i, j, 0] = inner[k] + scores[j, i]
            incomplete_split[i, j] = i + k
            left = complete[i, i:j, 0] + incomplete[i:j, j, 0]  # head j: k = i..j-1
            k = int(np.argmax(left))
            complete[i, j, 0], complete_split[i, j, 0] = left[k], i + k
            right = incomplete[i, i + 1 : j + 1, 1] + complete[i + 1 : j + 1, j, 1]  # head i: k = i+1..j
            k = int(np.argmax(right))
            complete[i, j, 1], complete_split[i, j, 1] = right[k], i + 1 + k
    heads = np.zeros(n + 1, dtype=np.int64)
    if single_root:
        totals = [scores[0, r] + complete[1, r, 0] + complete[r, n, 1] for r in range(1, n + 1)]
        root_child = 1 + int(np.argmax(totals))
        heads[root_child] = 0
        stack = [("c", 1, root_child, 0), ("c", root_child, n, 1)]
    else:
        stack = [("c", 0, n, 1)]
    while stack:
        kind, i, j, direction = stack.pop()
        if i == j:
            continue
        if kind == "c":
            k = complete_split[i, j, direction]
            stack += [("c", i, k, 0), ("i", k, j, 0)] if direction == 0 else [("i", i, k, 1), ("c", k, j, 1)]
        else:
            heads[j if direction == 1 else i] = i if direction == 1 else j
            k = incomplete_split[i, j]
            stack += [("c", i, k, 1), ("c", k + 1, j, 0)]
    return heads
