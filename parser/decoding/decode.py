"""Decoding arc scores into trees.

`mst` gives each sentence its maximum spanning arborescence with the batched exact
decoder of `objectives.arborescence` (Chu-Liu-Edmonds in lockstep over the batch, on the
scores' device; the single-root constraint and `-inf` arcs handled exactly), or with
``projective`` its best projective tree by Eisner's algorithm (`eisner`, numpy, per
sentence). `mst_with_margin` chooses between the two by a crossing margin, `tree_labels`
takes each chosen arc's best label, `root` on the arcs from the root and there only. A NumPy Chu-Liu-Edmonds per sentence on the host (the
earlier decoder) is the oracle of the tests (tests/parser/numpy_mst.py) and the baseline of
`python -m benchmarks.decode`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from objectives.arborescence import best_labels as mst_labels
from objectives.arborescence import maximum_arborescence, tree_scores
from objectives.conventions import IGNORE_INDEX, ConfigurationError, arc_mask

from parser.evaluate import ROOT, nonprojective_arcs


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
    if not projective:
        return maximum_arborescence(scores, lengths, multiroot)
    size = scores.shape[-1]
    lengths = lengths.to(scores.device)
    masked = scores.detach().masked_fill(~arc_mask(lengths, size - 1), float("-inf"))
    heads = torch.zeros(masked.shape[:2], dtype=torch.long, device=scores.device)
    cpu = masked.to("cpu", torch.float64).numpy()
    for b, n in enumerate(lengths.tolist()):
        heads[b, : n + 1] = torch.from_numpy(eisner(cpu[b, : n + 1, : n + 1], single_root=not multiroot))
    return heads


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


@dataclass(frozen=True)
class Decoding:
    """How a parser turns scores into trees: one value, used by validation, ``Parser.parse``
    and ``parser.predict`` alike (change it with ``dataclasses.replace``).

    ``multiroot``: the tree set (the parser's own); the best spanning tree by default,
    ``projective``: the best projective tree (Eisner), or ``crossing_margin``: the best
    spanning tree only where it outscores the best projective one by that margin.
    """

    multiroot: bool = False
    projective: bool = False
    crossing_margin: float | None = None

    def __post_init__(self) -> None:
        if self.projective and self.crossing_margin is not None:
            raise ConfigurationError("give projective (always Eisner) or a crossing margin (Eisner unless a crossing "
                                     "tree wins by the margin), not both")

    def heads(self, arcs: Tensor, lengths: Tensor) -> Tensor:
        """``(B, N+1)`` heads of the arc scores ``(B, N+1, N+1)``."""
        if self.crossing_margin is not None:
            return mst_with_margin(arcs, lengths, self.crossing_margin, self.multiroot)
        return mst(arcs, lengths, self.multiroot, self.projective)

    def __call__(self, arcs: Tensor, labels: Tensor, lengths: Tensor, root: int | None = None) -> tuple[Tensor, Tensor]:
        """The heads and the best label of each of their arcs (label scores ``(B, N+1, N+1, L)``;
        ``root``: the index of the label ``root``, see :func:`tree_labels`)."""
        heads = self.heads(arcs, lengths)
        return heads, tree_labels(labels, heads, lengths, root)


def root_label(labels: list[str]) -> int | None:
    """The index of UD's label ``root`` in a label vocabulary, ``None`` where it has none."""
    return labels.index(ROOT) if ROOT in labels else None


def tree_labels(label_scores: Tensor, heads: Tensor, lengths: Tensor, root: int | None = None) -> Tensor:
    """``(B, N+1)`` the best label of each arc of ``heads`` (``-100`` at 0 and on padding),
    as :func:`mst_labels`; with ``root`` (the label's index), an arc from the root gets it
    and any other arc its best label but it, as UD requires of HEAD 0 and DEPREL ``root``."""
    labels = mst_labels(label_scores, heads, lengths)
    if root is None:
        return labels
    from_root = (heads == 0) & (labels != IGNORE_INDEX)
    labels = labels.masked_fill(from_root, root)
    wrong = ~from_root & (labels == root)
    rows = wrong.any(1)
    if rows.any():  # their next best label: the scores copied for these sentences only
        others = label_scores[rows].index_fill(-1, torch.tensor([root], device=label_scores.device), float("-inf"))
        labels[rows] = torch.where(wrong[rows], mst_labels(others, heads[rows], lengths[rows]), labels[rows])
    return labels


def mst_with_margin(scores: Tensor, lengths: Tensor, margin: float, multiroot: bool = False) -> Tensor:
    """``(B, N+1)`` heads: a sentence's best spanning tree where it outscores its best
    projective tree by more than ``margin`` (log-weight units), else that projective tree.
    A margin of 0 gives :func:`mst`; an infinite one the best projective trees. A learned
    penalty on crossing arcs for parsers that invent them (choose it on dev with
    ``python -m parser.crossing_margin``)."""
    spanning, projective, gap = crossing_gaps(scores, lengths, multiroot)
    return torch.where((gap > margin).unsqueeze(-1), spanning, projective)


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
