"""Generalized expectation (GE) criteria on dependency arcs (Druck et al. 2009; Naseem et al. 2010).

A :class:`Constraint` says how often a word of tag ``child`` should attach to a word of tag
``parent`` (any word for ``"any"``, the root for ``"root"``). Its feature fires on an arc
h -> m when ``upos[h] == parent`` (``h >= 1`` for ``"any"``, ``h == 0`` for ``"root"``),
``upos[m] == child``, if a direction is given the child is on that side of its head, if a
distance is given ``|h - m|`` lies in it, and if a label is given the arc has it (then the
arc's expected count is weighted by the label's probability under the label scorer,
``p(l | h -> m)``, so GE trains the labels too). The model's rate is the expected number
of such arcs in the batch over the number of ``child`` words in it,
``p_k = E[sum_e f_k(e)] / #child_k``, an estimate of ``p(parent | child)``; the loss
penalises its distance to the target. Tags may be soft: ``batch.upos`` holds tag ids or
tag probabilities (a tagger's output), and the counts are then expected counts. Rules files are YAML (see
``configs/rules/naseem_ud.yaml`` for the format). Targets come from the rules file or are
estimated from gold trees (a small labeled sample) with :meth:`GeneralizedExpectation.fit_targets`;
``"tag_pairs"`` names the constraint set of every (parent, child, direction) tag triple, whose
targets, estimated from a sample, give the whole head-tag distribution of each child tag;
``"distances"`` the set of every (child, direction, distance bucket), the distribution of how
far and on which side each child tag's head lies (:func:`distance_constraints`); ``"labels"``
the set of every (child, universal relation), each child tag's label distribution
(:func:`label_constraints`). A list may mix such names and constraints.

Memory. The constraints' (direction, distance) pairs are a few masks of positions
``(N+1, N+1)``. The expected count of every (parent tag, child tag) of a mask is a
contraction of the masked arc marginals with the head's and the child's tag distributions,
``sum_b sum_{h,m} mu[b,h,m] [mask] P[b,h,p] P[b,m,c]``: O(M B N^2 T) time and O(B N^2 + C T^2)
memory for M masks and C arc classes, whatever the number of constraints K (no
``(B, N+1, N+1, K)`` feature tensor); constraints on labels add the ``(B, N+1, N+1, G)``
probabilities of their G label groups, read at once per mask.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import torch.distributed as dist
import yaml
from torch import Tensor

from ._common import full_precision
from .conventions import IGNORE_INDEX, UD_RELATIONS, UPOS_TAGS, ConfigurationError, word_mask
from .distribution import TreeCRF
from .mtt import no_autocast
from .objective import Objective, ObjectiveContext, Scores, TreeBatch

__all__ = [
    "ROOT", "ANY", "TAG_PAIRS", "DISTANCES", "DISTANCE_BUCKETS", "LABELS", "MIN_COUNT", "Constraint",
    "load_constraints", "tag_pair_constraints", "distance_constraints", "label_constraints", "estimate_targets", "GeneralizedExpectation", "RuleCoverage",
]  # fmt: skip

ROOT = "root"
ANY = "any"  # a constraint's parent that is any word (not the root)
TAG_PAIRS = "tag_pairs"  # the name of the constraint set built by tag_pair_constraints()
DISTANCES = "distances"  # the name of the constraint set built by distance_constraints()
LABELS = "labels"  # the name of the constraint set built by label_constraints()
DISTANCE_BUCKETS = ((1, 1), (2, 2), (3, 6), (7, None))
"""The ``|h - m|`` ranges of :func:`distance_constraints` (inclusive; None: no upper bound)."""
MIN_COUNT = 10
"""Default least number of words of a child tag in the labeled sample for a target to be
estimated for its constraints (with fewer, the rate would be noise and the constraint is left out)."""
_ROOT_ID = -1  # parent id of a root constraint: never a vocabulary index
_ANY_ID = -2  # parent id of an any-word constraint
_SIDES = {None: 0, "left": 1, "right": 2}  # index into the (either, left, right) side masks
_FAR = 2**31 - 1  # the upper end of a distance range without one
_EPS = 1e-6  # rates and targets are clamped to [eps, 1 - eps] inside the Bernoulli KL
log = logging.getLogger(__name__)
NO_UPOS = (
    "GeneralizedExpectation needs UPOS tags, but the batch has none (all padding or unknown): "
    "train it on tagged unlabeled text (CoNLL-U with a UPOS column)"
)


@dataclass(frozen=True)
class Constraint:
    """A target for ``p(parent | child)``: the share of ``child`` words headed by ``parent``.

    Attributes:
        parent: a tag of the UPOS vocabulary, or ``"root"`` for the artificial root.
        child: a tag of the UPOS vocabulary.
        target: the target rate in [0, 1], or ``None`` when it is to be estimated from a
            labeled sample.
        direction: ``"left"`` (the child precedes its head), ``"right"`` (it follows its
            head) or ``None`` (either side).
        distance: ``|h - m|`` as a number, an inclusive range ``(lo, hi)`` (``hi`` None: no
            upper bound), or ``None`` (any); not for root arcs. Stored as ``(lo, hi)``.
        label: a UD relation: universal (``"obl"``: every label of that universal part,
            ``obl:tmod`` included) or with its subtype (``"obl:tmod"``: that label only), or
            ``None`` (any); not for root arcs (labeled ``root``).

    Tags are checked against the vocabulary the objective is set up with.
    """

    parent: str
    child: str
    target: float | None = None
    direction: str | None = None
    distance: int | tuple[int, int | None] | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.parent, str) or not self.parent:
            raise ConfigurationError(f"parent must be a UPOS tag, {ANY!r} or {ROOT!r}, got {self.parent!r}")
        if self.distance is not None:
            bounds = (self.distance, self.distance) if isinstance(self.distance, int) else tuple(self.distance)
            if (len(bounds) != 2 or not isinstance(bounds[0], int) or bounds[0] < 1
                    or not (bounds[1] is None or isinstance(bounds[1], int) and bounds[1] >= bounds[0])):
                raise ConfigurationError(f"distance must be a number >= 1 or a range [lo, hi] with 1 <= lo <= hi "
                                         f"(hi may be null), got {self.distance!r}")
            if self.parent == ROOT:
                raise ConfigurationError("a root arc has no distance: leave it out of root constraints")
            object.__setattr__(self, "distance", bounds)
        if self.label is not None:
            if not isinstance(self.label, str) or self.label.split(":")[0] not in UD_RELATIONS:
                raise ConfigurationError(f"label must be a UD relation ({', '.join(UD_RELATIONS)}), with or without "
                                         f"a :subtype, got {self.label!r}")
            if self.parent == ROOT:
                raise ConfigurationError("root arcs are labeled root: leave the label out of root constraints")
        if not isinstance(self.child, str) or not self.child or self.child in (ROOT, ANY):
            raise ConfigurationError(f"child must be a UPOS tag, got {self.child!r}")
        if self.direction not in _SIDES:
            raise ConfigurationError(f"direction must be 'left', 'right' or None, got {self.direction!r}")
        if self.target is not None and not 0 <= self.target <= 1:
            raise ConfigurationError(f"target must lie in [0, 1], got {self.target}")


def _constraints(given: str | Path | Sequence[Constraint | dict | str]) -> list[Constraint]:
    """Constraints from a family name (:data:`FAMILIES`), a rules file, or a list of
    constraints, their fields as dicts, and family names."""
    if isinstance(given, (str, Path)):
        return FAMILIES[given]() if given in FAMILIES else load_constraints(given)
    return [c for item in given for c in (_constraints(item) if isinstance(item, str) else
                                          [item if isinstance(item, Constraint) else Constraint(**item)])]


def load_constraints(path: str | Path) -> list[Constraint]:
    """Read a YAML rules file: a mapping with a ``constraints`` list of Constraint fields."""
    rules = yaml.safe_load(Path(path).read_text())
    if not isinstance(rules, dict) or not isinstance(rules.get("constraints"), list):
        raise ConfigurationError(f"{path}: expected a mapping with a 'constraints' list")
    return [Constraint(**rule) for rule in rules["constraints"]]


def tag_pair_constraints(tags: Sequence[str] = UPOS_TAGS) -> list[Constraint]:
    """Every (parent, child, direction) triple of ``tags`` (default: the UD tags), root
    included, without targets.

    With targets estimated from gold trees they state, for each child tag, the whole
    distribution of its head's tag and side (root heads are always on the left).
    """
    constraints = [Constraint(ROOT, child) for child in tags]
    for child in tags:
        for parent in tags:
            constraints += [Constraint(parent, child, direction=side) for side in ("left", "right")]
    return constraints


def distance_constraints(tags: Sequence[str] = UPOS_TAGS,
                         buckets: Sequence[tuple[int, int | None]] = DISTANCE_BUCKETS) -> list[Constraint]:
    """Every (child, direction, distance bucket) of ``tags`` with any word as the head, without
    targets: with targets estimated from gold trees, how far and on which side each child
    tag's head lies (its root share is in :func:`tag_pair_constraints`)."""
    return [Constraint(ANY, child, direction=side, distance=bucket)
            for child in tags for side in ("left", "right") for bucket in buckets]


def label_constraints(tags: Sequence[str] = UPOS_TAGS,
                      relations: Sequence[str] = tuple(r for r in UD_RELATIONS if r != ROOT)) -> list[Constraint]:
    """Every (child, universal relation) of ``tags`` with any word as the head, without
    targets: with targets estimated from gold trees, each child tag's label distribution
    (its root share is in :func:`tag_pair_constraints`)."""
    return [Constraint(ANY, child, label=relation) for child in tags for relation in relations]


FAMILIES = {TAG_PAIRS: tag_pair_constraints, DISTANCES: distance_constraints, LABELS: label_constraints}


def _covers(label: str, known: str) -> bool:
    """Whether a constraint's ``label`` fires on arcs labeled ``known``: the same label, or
    ``known``'s universal part when ``label`` has no subtype (``obl`` covers ``obl:tmod``)."""
    return known == label if ":" in label else known.split(":")[0] == label


def _overlap(a: Constraint, b: Constraint) -> bool:
    """Whether some arc fires both constraints (a constraint without a direction fires on both
    sides; any word heads all but the root)."""
    parents = a.parent == b.parent or ROOT not in (a.parent, b.parent) and ANY in (a.parent, b.parent)
    sides = None in (a.direction, b.direction) or a.direction == b.direction
    (lo_a, hi_a), (lo_b, hi_b) = a.distance or (1, None), b.distance or (1, None)
    distances = lo_a <= (hi_b or _FAR) and lo_b <= (hi_a or _FAR)
    labels = None in (a.label, b.label) or _covers(a.label, b.label) or _covers(b.label, a.label)
    return a.child == b.child and parents and sides and distances and labels


class _Ids(NamedTuple):
    """Constraints as ``(K,)`` long tensors: parent tag ids (``_ROOT_ID`` for root, ``_ANY_ID``
    for any word), child tag ids, the side they ask for (``_SIDES``) and their arc class (a
    side, distance range and label group); ``masks`` ``(M, 3)``: the classes' distinct (side,
    least distance, greatest distance); ``groups`` ``(G, L)``: the vocabulary labels of each
    constraint label. Per class, on the host: its row of ``masks``, its label group (-1: any
    label) and whether a constraint with a tag as parent uses it (else no tag-pair table)."""

    parent: Tensor
    child: Tensor
    side: Tensor
    arc_class: Tensor
    masks: Tensor
    groups: Tensor
    class_masks: tuple[int, ...]
    class_labels: tuple[int, ...]
    class_pairs: tuple[bool, ...]

    def to(self, device: torch.device) -> _Ids:
        return _Ids(*(field.to(device) if isinstance(field, Tensor) else field for field in self))


_TENSORS = _Ids._fields[:6]  # the fields that are tensors (buffers of the objective)


def _compile(constraints: Sequence[Constraint], upos_vocab: Sequence[str], device: torch.device | None,
             label_vocab: Sequence[str] = ()) -> _Ids:
    index = {tag: i for i, tag in enumerate(upos_vocab)}
    special = {ROOT: _ROOT_ID, ANY: _ANY_ID}
    missing = {c.child for c in constraints} | {c.parent for c in constraints if c.parent not in special}
    missing -= index.keys()
    if missing:
        raise ConfigurationError(f"UPOS tags {sorted(missing)} of the constraints are not in the UPOS vocabulary {list(upos_vocab)}")
    labels = list(dict.fromkeys(c.label for c in constraints if c.label is not None))
    if labels and not label_vocab:
        raise ConfigurationError("constraints on labels need a parser that labels its arcs (a label vocabulary)")
    groups = [[_covers(label, known) for known in label_vocab] for label in labels]
    parent = [special[c.parent] if c.parent in special else index[c.parent] for c in constraints]
    child = [index[c.child] for c in constraints]
    side = [_SIDES[c.direction] for c in constraints]
    keys = [(_SIDES[c.direction], *(c.distance or (1, None)), labels.index(c.label) if c.label else -1)
            for c in constraints]
    classes = list(dict.fromkeys(key for key, c in zip(keys, constraints) if c.parent != ROOT)) or [(0, 1, None, -1)]
    arc_class = [classes.index(key) if c.parent != ROOT else 0 for key, c in zip(keys, constraints)]
    pairs = tuple(any(c.parent not in special and key == k for key, c in zip(keys, constraints)) for k in classes)
    masks = list(dict.fromkeys(key[:3] for key in classes))
    rows = [(side_, lo, _FAR if hi is None else hi) for side_, lo, hi in masks]
    tensors = [torch.tensor(ids, dtype=torch.long, device=device) for ids in (parent, child, side, arc_class, rows)]
    groups = torch.tensor(groups, dtype=torch.bool, device=device).reshape(len(labels), len(label_vocab))
    return _Ids(*tensors, groups, tuple(masks.index(key[:3]) for key in classes), tuple(key[3] for key in classes), pairs)


def tag_distributions(upos: Tensor, lengths: Tensor, num_tags: int, dtype: torch.dtype) -> Tensor:
    """Each word's tag distribution ``(B, N+1, T)``, 0 at position 0 and on padding.

    ``upos``: ``(B, N+1)`` long tag ids, or ``(B, N+1, T)`` float tag probabilities (soft
    tags; detached: GE does not train the tagger).
    """
    if upos.is_floating_point():
        if upos.shape[-1] != num_tags or upos.dim() != 3:
            raise ValueError(f"soft UPOS tags must be (B, N+1, {num_tags}) probabilities, got {tuple(upos.shape)}")
        probs = upos.detach().to(dtype)
    else:
        probs = torch.nn.functional.one_hot(upos, num_tags).to(dtype)
    return probs * word_mask(lengths, upos.shape[1] - 1).unsqueeze(-1)


def _masks(ids: _Ids, size: int, dtype: torch.dtype) -> Tensor:
    """``(M, N+1, N+1)``: 1 where an arc h -> m of a word head (h >= 1) has the side and
    distance of each row of ``ids.masks``, for ``size = N+1`` positions."""
    rows = ids.masks
    position = torch.arange(size, device=rows.device)
    offset = position[:, None] - position[None, :]  # h - m: > 0 when the child is left of its head
    sides = torch.stack([offset != 0, offset > 0, offset < 0])  # either, left, right
    distance = offset.abs()
    masks = sides[rows[:, 0]] & (distance >= rows[:, 1, None, None]) & (distance <= rows[:, 2, None, None])
    masks[:, 0] = False  # root arcs: the root constraints'
    return masks.to(dtype)


def _members(ids: _Ids, row: int) -> tuple[list[int], list[int]]:
    """The arc classes of mask ``row``: those with any label, and those with a label group."""
    classes = [c for c, mask in enumerate(ids.class_masks) if mask == row]
    return [c for c in classes if ids.class_labels[c] < 0], [c for c in classes if ids.class_labels[c] >= 0]


def _label_columns(ids: _Ids, labels: Tensor, classes: list[int]) -> Tensor:
    """The label-group probabilities ``(..., n)`` of these arc classes, from ``labels`` ``(..., G)``:
    one gather (one backward), or ``labels`` itself when the classes read every group in order."""
    columns = [ids.class_labels[c] for c in classes]
    return labels if columns == list(range(labels.shape[-1])) else labels[..., columns]


def _expected_counts(ids: _Ids, mu: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
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
    for row, mask in enumerate(_masks(ids, mu.shape[-1], mu.dtype)):
        weighted = mu * mask
        unlabeled, labeled = _members(ids, row)
        if labeled:
            q = _label_columns(ids, labels, labeled)  # (B, N+1, N+1, n)
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
    root = (mu[:, 0].unsqueeze(-1) * tags).sum((0, 1))[child] * (ids.side != _SIDES["left"])  # on the right
    return torch.where(parent == _ROOT_ID, root, torch.where(
        parent == _ANY_ID, any_head[arc_class, child], pairs[arc_class, parent.clamp_min(0), child]))


def _arc_weights(ids: _Ids, g: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
    """``r[b, h, m] = sum_k g_k f_k(h -> m)``: ``(K,)`` weights, ``(B, N+1, T)`` tags (and the
    label-group probabilities of :func:`_expected_counts`) -> ``(B, N+1, N+1)``, through a
    ``(T, T)`` table per arc class (never a per-constraint arc tensor)."""
    num_classes, num_tags = len(ids.class_labels), tags.shape[-1]
    parent, child, arc_class = ids.parent, ids.child, ids.arc_class
    table = g.new_zeros(num_classes, num_tags, num_tags).index_put_(
        (arc_class, parent.clamp_min(0), child), torch.where(parent >= 0, g, 0.0), accumulate=True)
    any_head = g.new_zeros(num_classes, num_tags).index_put_(
        (arc_class, child), torch.where(parent == _ANY_ID, g, 0.0), accumulate=True)
    root = torch.where((parent == _ROOT_ID) & (ids.side != _SIDES["left"]), g, 0.0)  # root arcs are on the right
    r = tags.new_zeros(tags.shape[0], tags.shape[1], tags.shape[1])
    for row, mask in enumerate(_masks(ids, tags.shape[1], tags.dtype)):
        # [b, h, m] = sum_{p,c} P[b,h,p] W[p,c] P[b,m,c] + sum_c P[b,m,c] w[c] (times q[b,h,m,g]), on the mask's arcs
        unlabeled, labeled = _members(ids, row)
        inside = tags @ any_head[unlabeled].sum(0) if unlabeled else tags.new_zeros(tags.shape[:2])
        inside = inside.unsqueeze(1) + sum(tags @ table[c] @ tags.mT for c in unlabeled if ids.class_pairs[c])
        if labeled:
            q = _label_columns(ids, labels, labeled)  # (B, N+1, N+1, n)
            inside = inside + (q * (tags @ any_head[labeled].mT).unsqueeze(1)).sum(-1)
            inside = inside + sum(q[..., i] * (tags @ table[c] @ tags.mT) for i, c in enumerate(labeled) if ids.class_pairs[c])
        r = r + mask * inside
    r[:, 0] += tags @ g.new_zeros(num_tags).index_put_((child,), root, accumulate=True)
    return r


def _label_groups(ids: _Ids, probabilities: Tensor) -> Tensor | None:
    """Label probabilities ``(..., L)`` summed into the constraints' label groups ``(..., G)``;
    None when no constraint has a label."""
    if not len(ids.groups):
        return None
    return probabilities @ ids.groups.mT.to(probabilities.dtype)


def _gold_arcs(heads: Tensor, lengths: Tensor, dtype: torch.dtype) -> Tensor:
    """Gold trees as arc indicators ``(B, N+1, N+1)`` (``[b, heads[b, m], m] = 1`` for words)."""
    words = word_mask(lengths, heads.shape[1] - 1)
    arcs = torch.zeros(heads.shape + heads.shape[1:], dtype=dtype, device=heads.device)
    return arcs.scatter_(1, heads.unsqueeze(1), words.unsqueeze(1).to(dtype))


def _gold_counts(ids: _Ids, heads: Tensor, upos: Tensor, lengths: Tensor, num_tags: int,
                 labels: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per constraint, the number of gold arcs firing it and of child words: two ``(K,)``
    float64; ``labels`` ``(B, N+1)``: gold label ids (needed by constraints on labels)."""
    tags = tag_distributions(upos, lengths, num_tags, torch.float64)
    groups = None
    if len(ids.groups):
        if labels is None:
            raise ConfigurationError("constraints on labels estimate their targets from labeled arcs: the sample has no labels")
        gold = torch.nn.functional.one_hot(labels.clamp_min(0), ids.groups.shape[1]) * (labels != IGNORE_INDEX).unsqueeze(-1)
        groups = _label_groups(ids, gold.to(torch.float64)).unsqueeze(1).expand(-1, heads.shape[1], -1, -1)  # the child's arc
    return _expected_counts(ids, _gold_arcs(heads, lengths, torch.float64), tags, groups), tags.sum((0, 1))[ids.child]


def _rates(fires: Tensor, counts: Tensor, min_count: int) -> Tensor:
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
    """Each constraint's rate in gold trees: ``(K,)`` float64, NaN where the child tag has
    fewer than ``min_count`` words (too few to estimate a rate).

    Args: ``heads`` ``(B, N+1)`` long, ``upos`` ``(B, N+1)`` ids into ``upos_vocab`` (or
    ``(B, N+1, T)`` tag probabilities), ``lengths`` ``(B,)``; for constraints on labels,
    ``labels`` ``(B, N+1)`` ids into ``label_vocab``.
    """
    ids = _compile(constraints, upos_vocab, upos.device, label_vocab)
    return _rates(*_gold_counts(ids, heads, upos, lengths, len(upos_vocab), labels), min_count)


class GeneralizedExpectation(Objective):
    """GE penalty pulling the model's attachment rates ``p_k`` towards the constraints' targets.

    ``squared``: ``sum_k (p_k - t_k)^2``; ``kl``: ``sum_k KL(Bernoulli(t_k) || Bernoulli(p_k))``
    with ``p_k`` and ``t_k`` clamped to ``[1e-6, 1 - 1e-6]``; ``one_sided``:
    ``sum_k max(0, t_k - p_k)^2``, a target read as a lower bound (the rules of Naseem et al.
    2010 say how often an attachment should at least occur, in the spirit of posterior
    regularisation): 0 while every rate reaches its target. With ``tolerance`` z > 0 a rate
    within z standard errors of its target costs nothing (squared, one-sided): the gap
    ``p_k - t_k`` is shrunk by ``z sqrt(t_k (1 - t_k) / n_k)``, the binomial standard error of a
    rate measured on the batch's ``n_k`` child words, so that a batch is not pushed to match the
    corpus-wide rate where it differs from it by sampling noise alone (the slack of posterior
    regularisation's box constraints, Ganchev et al. 2010). Constraints whose child tag does not
    occur in the batch, or that have no target, are masked out (no host sync). With
    ``weighting="count"`` each term is multiplied by ``n_k / mean(n)``, the batch count of its
    child tag over the mean count of the constraints kept: a rate measured on few words of a
    small batch has variance O(1/n_k), so weighting by n_k is inverse-variance weighting, and
    the mean keeps the penalty's scale that of ``"uniform"``.

    Gradient routes (equal up to rounding): ``"reverse"`` differentiates through the T1
    expectation (autograd, O(N^3)). ``"t2"`` computes the rates without a graph and gives
    the arc scores the gradient ``Cov(r, 1_e)`` with ``r = sum_k dPenalty/dp_k f_k / #child_k``
    (R = 1, the covariance view of Druck & Smith 2009: one closed-form marginal VJP in the
    direction ``r``), from the same factorisation. Both compute in the scores' dtype (float32
    or float64) around the engine's float64 factorisation.

    Targets from a teacher (``targets_from="teacher"``): each batch's targets are the
    teacher's own expected rates on that batch, ``E_teacher[sum_e f_k(e)] / #child_k``
    (its arc marginals with the same tags), so the student matches the teacher's attachment
    statistics on the unlabeled text rather than rates measured on a labeled sample of
    other text; a constraint set's rule targets are then not used.

    :meth:`setup` gives the tree set, the UPOS vocabulary of ``batch.upos`` (constraint tags
    are checked against it) and the labeled sample (``targets_from="labeled"``).
    Distributed training: the batch counts (expected arcs per constraint,
    child words per tag) are summed over the processes of :attr:`process_group` (``None``:
    the default group when ``torch.distributed`` runs with more than one process) before
    the penalty, so every process gets the penalty of the whole global batch. The all-reduce
    is differentiable; its backward sums the (equal) gradients of all processes, so each
    process's score gradient is ``world_size`` times the single-process gradient of the
    global-batch penalty w.r.t. its own scores, and DDP's averaging over processes gives
    parameter gradients equal to those of one process on the global batch.

    Args:
        constraints: :class:`Constraint` objects (or their fields as dicts), the path of
            a YAML rules file, ``"tag_pairs"`` (:func:`tag_pair_constraints`), ``"distances"``
            (:func:`distance_constraints`), ``"labels"`` (:func:`label_constraints`), or a list
            mixing them.
        penalty: ``"squared"``, ``"kl"`` or ``"one_sided"``.
        gradient: ``"reverse"`` or ``"t2"``.
        targets_from: ``"rules"`` (the constraints' own targets), ``"labeled"``: estimated
            by :meth:`fit_targets` from the gold trees of the labeled training sentences
            (in :meth:`setup`, when training starts), or ``"teacher"``: the teacher's
            expected rates on each batch (the term then needs a teacher); rule targets are
            then ignored.
        min_count: with ``"labeled"``, a constraint whose child tag has fewer words than
            this in the labeled sample is left out (default :data:`MIN_COUNT`).
        weighting: ``"uniform"`` (every constraint alike) or ``"count"`` (by child tag count).
        tolerance: the half-width of the penalty-free band around each target, in standard
            errors of the batch rate (0: none); with ``"squared"`` or ``"one_sided"``.
    """

    needs_upos = True

    def __init__(
        self,
        constraints: Sequence[Constraint | dict | str] | str | Path,
        penalty: Literal["squared", "kl", "one_sided"] = "squared",
        gradient: Literal["reverse", "t2"] = "reverse",
        targets_from: Literal["rules", "labeled", "teacher"] = "rules",
        min_count: int = MIN_COUNT,
        weighting: Literal["uniform", "count"] = "uniform",
        tolerance: float = 0.0,
    ) -> None:
        super().__init__()
        self.constraints = _constraints(constraints)
        if not self.constraints:
            raise ConfigurationError("GeneralizedExpectation needs at least one constraint")
        if targets_from not in ("rules", "labeled", "teacher"):
            raise ConfigurationError(f"targets_from must be 'rules', 'labeled' or 'teacher', got {targets_from!r}")
        if penalty not in ("squared", "kl", "one_sided"):
            raise ConfigurationError(f"penalty must be 'squared', 'kl' or 'one_sided', got {penalty!r}")
        if gradient not in ("reverse", "t2"):
            raise ConfigurationError(f"gradient must be 'reverse' or 't2', got {gradient!r}")
        if weighting not in ("uniform", "count"):
            raise ConfigurationError(f"weighting must be 'uniform' or 'count', got {weighting!r}")
        if not tolerance >= 0:
            raise ConfigurationError(f"tolerance must be >= 0 standard errors, got {tolerance}")
        if tolerance and penalty == "kl":
            raise ConfigurationError("tolerance applies to the 'squared' and 'one_sided' penalties, not 'kl'")
        self.penalty = penalty
        self.weighting = weighting
        self.gradient = gradient
        self.targets_from = targets_from
        self.needs_teacher = targets_from == "teacher"
        self.min_count = min_count
        self.tolerance = tolerance
        self.num_tags = 0
        self.process_group = None
        # NaN: no target yet (estimated by fit_targets) or too few words to estimate one
        rule_targets = [c.target if targets_from == "rules" and c.target is not None else torch.nan for c in self.constraints]
        self.register_buffer("targets", torch.tensor(rule_targets), persistent=False)
        for name in (*(f"ids_{field}" for field in _TENSORS), "tagged_ids"):
            self.register_buffer(name, None, persistent=False)
        self._class_layout: tuple = ()  # _Ids's host fields
        self._upos_checked = False
        self._check_targets()

    def _has_targets(self) -> bool:
        """Whether the penalty has targets to read (a host sync: checked once)."""
        return self.targets_from == "teacher" or not bool(self.targets.isnan().all())

    def _check_targets(self) -> None:
        """Rule targets must be given (the other sources estimate them)."""
        if self.targets_from == "rules" and any(c.target is None for c in self.constraints):
            raise ConfigurationError("constraints without a target need targets_from='labeled' or 'teacher'")

    def setup(self, context: ObjectiveContext) -> None:
        """Take the tree set and the UPOS vocabulary (index -> tag) of ``batch.upos``; with ``targets_from="labeled"`` and a labeled sample (``fit``),
        estimate the targets from its gold trees."""
        super().setup(context)
        device = self.targets.device
        ids = _compile(self.constraints, context.tags, device, context.labels)
        for field in _TENSORS:
            setattr(self, f"ids_{field}", getattr(ids, field))
        self._class_layout = ids[len(_TENSORS):]
        tagged = [i for i, tag in enumerate(context.tags) if tag in UPOS_TAGS]
        self.tagged_ids = torch.tensor(tagged, dtype=torch.long, device=device)
        self.num_tags = len(context.tags)
        if self.targets_from == "labeled" and context.stage == "fit":
            if context.labeled_batches is None:
                raise ConfigurationError("GE with targets_from='labeled' estimates its targets from labeled sentences, but none were given")
            targets = self.fit_targets(context.labeled_batches())
            log.info("GE targets from the labeled sample: %d of %d constraints kept", int(targets.isfinite().sum()), len(targets))

    def _ids(self) -> _Ids:
        if self.ids_parent is None:
            raise RuntimeError("GeneralizedExpectation has no UPOS vocabulary: call setup() with the model's context")
        return _Ids(*(getattr(self, f"ids_{field}") for field in _TENSORS), *self._class_layout)

    def fit_targets(self, batches: Iterable[TreeBatch]) -> Tensor:
        """Set the targets to the constraints' rates in the gold trees of ``batches`` (a
        labeled sample, in batches to bound memory); returns them, ``(K,)`` float64, NaN for
        the constraints left out (see ``min_count``)."""
        ids = self._ids()
        fires = counts = 0
        for batch in batches:
            ids = ids.to(batch.heads.device)  # the sample may be on another device
            batch_fires, batch_counts = _gold_counts(ids, batch.heads, batch.upos, batch.lengths, self.num_tags,
                                                     getattr(batch, "labels", None))
            fires, counts = fires + batch_fires, counts + batch_counts
        targets = _rates(torch.as_tensor(fires), torch.as_tensor(counts), self.min_count)
        if targets.isnan().all():
            raise ConfigurationError(f"no constraint's child tag has {self.min_count} or more words in the labeled sample")
        self.targets = targets.to(self.targets)
        return targets

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar penalty for ``scores.arcs`` ``(B, N+1, N+1)`` (and ``scores.labels``
        ``(B, N+1, N+1, L)`` for constraints on labels) and ``batch.upos`` (``(B, N+1)`` ids or
        ``(B, N+1, T)`` probabilities)."""
        ids = self._ids()
        if batch.upos is None:
            raise ConfigurationError(NO_UPOS)
        arcs = full_precision(scores.arcs)
        crf = TreeCRF(arcs, batch.lengths, self.multiroot, validate_args=False)
        with no_autocast(arcs.device):
            tags = tag_distributions(batch.upos, batch.lengths, self.num_tags, arcs.dtype)
            labels = self._label_groups(ids, scores, arcs.dtype)
            self._check_tags(tags)
            group = self._group()
            targets = self.targets if not self.needs_teacher else self._teacher_rates(ids, teacher, batch, tags, group)
            if self.gradient == "reverse":
                return self._loss(self._sum(group, self._statistics(ids, crf.marginals, tags, labels)), targets)
            stats = self._statistics(ids, crf.marginals.detach(), tags, None if labels is None else labels.detach())
            if group is not None:
                dist.all_reduce(stats, group=group)
            with torch.enable_grad():  # the slope dPenalty/dE: autograd over K numbers
                expected = stats[: len(ids.child)].detach().requires_grad_()
                value = self._loss(torch.cat([expected, stats[len(ids.child) :]]), targets)
                (slope,) = torch.autograd.grad(value, expected)
            r = _arc_weights(ids, slope, tags, labels)  # (B, N+1, N+1): sum_k dPenalty/dE_k f_k
            scale = 1 if group is None else dist.get_world_size(group)  # as the reverse route (see above)
            # the penalty's value, with the gradient of scale * E[r]: scale * Cov(r, 1_e) for the
            # arcs, and scale * mu * dr/dlabels for the label scores (r is linear in them)
            surrogate = scale * crf.expectation(r.detach().unsqueeze(-1)).sum()
            if labels is not None:
                surrogate = surrogate + scale * (crf.marginals.detach() * r).sum()
            return value.detach() + (surrogate - surrogate.detach())

    def _label_groups(self, ids: _Ids, scores: Scores, dtype: torch.dtype) -> Tensor | None:
        """The probability that each arc has a label of each constraint label ``(B, N+1, N+1, G)``,
        from ``scores.labels``; None when no constraint has a label."""
        if not len(ids.groups):
            return None
        if scores.labels is None:
            raise ConfigurationError("constraints on labels need the parser's label scores: the scores have none")
        return _label_groups(ids, full_precision(scores.labels).to(dtype).softmax(-1))

    def _teacher_rates(self, ids: _Ids, teacher: Scores | None, batch: TreeBatch, tags: Tensor, group) -> Tensor:
        """The teacher's expected rate of each constraint on this batch ``(K,)`` (NaN where
        the child tag does not occur), summed over ``group`` like the student's."""
        if teacher is None:
            raise ValueError("GeneralizedExpectation with targets_from='teacher' needs the teacher's scores")
        with torch.no_grad():
            mu = TreeCRF(full_precision(teacher.arcs).to(tags.dtype), batch.lengths, self.multiroot,
                         validate_args=False).marginals
            stats = self._statistics(ids, mu, tags, self._label_groups(ids, teacher, tags.dtype))
            if group is not None:
                dist.all_reduce(stats, group=group)
        k = len(ids.child)
        return _rates(stats[:k], stats[k : 2 * k], 1)

    def _group(self):
        """The process group to sum batch counts over, or None for one process."""
        if self.process_group is not None:
            return self.process_group
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist.group.WORLD
        return None

    @staticmethod
    def _statistics(ids: _Ids, mu: Tensor, tags: Tensor, labels: Tensor | None = None) -> Tensor:
        """The batch statistics the penalty reads, ``(2K + 1,)``: expected arcs firing each
        constraint, words of each constraint's child tag, and words in all."""
        return torch.cat([_expected_counts(ids, mu, tags, labels), tags.sum((0, 1))[ids.child], tags.sum().reshape(1)])

    @staticmethod
    def _sum(group, stats: Tensor) -> Tensor:
        """``stats`` summed over the processes of ``group`` (differentiably), or as given."""
        if group is None:
            return stats
        from torch.distributed.nn.functional import all_reduce

        return all_reduce(stats, group=group)

    def _loss(self, stats: Tensor, targets: Tensor) -> Tensor:
        """The penalty from the batch statistics of :meth:`_statistics` and the targets ``(K,)``."""
        k = len(self.constraints)
        expected, counts = stats[:k], stats[k : 2 * k]
        valid = (counts > 0) & targets.isfinite()
        counts_kept = torch.where(valid, counts, 1.0)
        return self._penalty(expected / counts_kept, self._weights(counts, valid), targets, counts_kept)

    def _weights(self, counts: Tensor, valid: Tensor) -> Tensor:
        """Each constraint's weight ``(K,)`` from its child tag's batch count ``(K,)``; 0 where not ``valid``."""
        if self.weighting == "uniform":
            return valid.to(counts.dtype)
        kept = torch.where(valid, counts, 0.0)
        return kept / (kept.sum() / valid.sum().clamp_min(1)).clamp_min(1)

    def _penalty(self, rates: Tensor, weights: Tensor, targets: Tensor, counts: Tensor) -> Tensor:
        """Distance of the rates ``(K,)`` to the ``targets`` ``(K,)``, weighted by ``weights`` ``(K,)``
        (0: masked out); ``counts`` ``(K,)``: the words each rate was measured on (> 0)."""
        targets = targets.to(rates.dtype).nan_to_num(0.5)  # masked out below; no NaN gradient
        gap = rates - targets
        if self.tolerance:  # no cost within `tolerance` standard errors of the batch rate
            band = self.tolerance * (targets * (1 - targets) / counts).sqrt()
            gap = gap.sign() * (gap.abs() - band).clamp_min(0.0)
        if self.penalty == "squared":
            terms = gap**2
        elif self.penalty == "one_sided":
            terms = (-gap).clamp_min(0.0) ** 2
        else:  # both clamped, so that a rate equal to a target of 0 or 1 costs exactly 0
            rates, targets = rates.clamp(_EPS, 1 - _EPS), targets.clamp(_EPS, 1 - _EPS)
            terms = targets * (targets / rates).log() + (1 - targets) * ((1 - targets) / (1 - rates)).log()
        return torch.where(weights > 0, weights * terms, 0.0).sum()

    def _check_tags(self, tags: Tensor) -> None:
        """Raise when the batch is untagged or there are no targets (checked on the first
        batch only: a host sync)."""
        if not self._upos_checked:
            if not bool(tags[..., self.tagged_ids].sum() > 0):
                raise ConfigurationError(NO_UPOS)
            if not self._has_targets():
                raise RuntimeError("GeneralizedExpectation has no targets: call fit_targets() on a labeled sample")
            self._upos_checked = True


class RuleCoverage(GeneralizedExpectation):
    """The constraints as one rule set (Naseem et al. 2010): the expected share of the
    batch's words whose arc fires some rule, ``E[sum_k sum_e f_k(e)] / #words``, is pulled
    to ``coverage`` (``one_sided``: up to it, only while below). The rules' own targets are
    not used; the rules must not overlap (each covered arc counts once). Statistics,
    gradient routes and distributed sums are :class:`GeneralizedExpectation`'s.

    Args:
        constraints: as for :class:`GeneralizedExpectation` (targets not needed).
        coverage: the share in (0, 1] (0.61 for the shipped rules: the mean of their gold
            coverage on five UD dev sets, ``python -m benchmarks.ge_targets``).
        penalty, gradient: as for :class:`GeneralizedExpectation`.
    """

    def __init__(self, constraints: Sequence[Constraint | dict | str] | str | Path, coverage: float,
                 penalty: Literal["squared", "kl", "one_sided"] = "one_sided",
                 gradient: Literal["reverse", "t2"] = "reverse") -> None:
        if not 0 < coverage <= 1:
            raise ConfigurationError(f"coverage must lie in (0, 1], got {coverage}")
        self.coverage = coverage
        super().__init__(constraints, penalty, gradient, targets_from="rules")

    def _check_targets(self) -> None:
        if any(_overlap(a, b) for i, a in enumerate(self.constraints) for b in self.constraints[i + 1 :]):
            raise ConfigurationError("coverage counts each covered arc once: the constraints must not overlap")

    def _has_targets(self) -> bool:
        return True  # the coverage is the target

    def _loss(self, stats: Tensor, targets: Tensor) -> Tensor:
        """The penalty of the share of the batch's words whose arc some rule covers."""
        k = len(self.constraints)
        words = stats[2 * k].clamp_min(1).reshape(1)
        share = stats[:k].sum() / words
        return self._penalty(share, share.new_ones(1), share.new_full((1,), self.coverage), words)
