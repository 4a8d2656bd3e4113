"""The NumPy decoder `parser.decoding.decode.mst` ran until 2026-11-25, kept as the oracle of the
batched torch decoder (`objectives.arborescence`) in tests and as the baseline of
`benchmarks.decode`: a batched greedy fast path, then one Chu-Liu-Edmonds per remaining
sentence on the host (numpy, float64), with the exact single-root swap of Gabow & Tarjan
(1984) in the form of Zmigrod, Vieira & Cotterell (2020). `-inf` arcs get a finite
penalty: the result uses as few `-inf` arcs as any (single-root) tree can.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from objectives.arborescence import is_tree
from objectives.conventions import arc_mask, word_mask


def numpy_mst(scores: Tensor, lengths: Tensor, multiroot: bool = False) -> Tensor:
    """The former NumPy decoder (greedy fast path + Chu-Liu-Edmonds with the single-root swap):
    the contract of :func:`parser.decoding.decode.mst` without ``projective``; the oracle of its tests."""
    size = scores.shape[-1]
    lengths = lengths.to(scores.device)
    arcs = arc_mask(lengths, size - 1)
    masked = scores.detach().masked_fill(~arcs, float("-inf"))
    words = word_mask(lengths, size - 1)  # (B, N+1): positions 1..lengths[b]

    heads = masked.argmax(1).masked_fill(~words, 0)
    slow = ~is_tree(heads)
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


