"""Rule compilation: constraints -> :class:`CompiledConstraints`, the tensors that the
contractions of :mod:`objectives.ge.counts` read, checked against the vocabularies.

Constraints are grouped into arc classes (a side, a distance range, a label group); the
classes' distinct (side, distance range) pairs are a few position masks ``(N+1, N+1)``,
so the counts never build a ``(B, N+1, N+1, K)`` feature tensor. A rate per arc needs the
expected arcs of its :func:`~objectives.ge.rules.denominator`: those constraints are compiled
after the given ones (once each), and a child ``"any"`` is the tag column after the
vocabulary's (:func:`~objectives.ge.counts.tag_distributions` adds it: every word).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from ..conventions import ConfigurationError
from .rules import ANY, FAR, PER, ROOT, SIDES, Constraint, covers, denominator

__all__ = ["ROOT_ID", "ANY_ID", "TENSOR_FIELDS", "CompiledConstraints", "compile_constraints", "with_denominators",
           "arc_masks", "class_members", "label_columns"]

ROOT_ID = -1  # parent id of a root constraint: never a vocabulary index
ANY_ID = -2  # parent id of an any-word constraint


class CompiledConstraints(NamedTuple):
    """Constraints (the given ones, then their denominators: K in all) as ``(K,)`` long
    tensors: parent tag ids (``ROOT_ID`` for root, ``ANY_ID`` for any word), child tag ids
    (the vocabulary's size for any word), the side they ask for (``SIDES``), their arc class
    (a side, distance range and label group), what the rate is per (index into ``PER``) and,
    for a rate per arc, the index of its denominator (-1: none); ``masks`` ``(M, 3)``: the
    classes' distinct (side, least distance, greatest distance); ``groups`` ``(G, L)``: the
    vocabulary labels of each constraint label. Per class, on the host: its row of ``masks``,
    its label group (-1: any label) and whether a constraint with a tag as parent uses it
    (else no tag-pair table)."""

    parent: Tensor
    child: Tensor
    side: Tensor
    arc_class: Tensor
    per: Tensor
    given: Tensor
    masks: Tensor
    groups: Tensor
    class_masks: tuple[int, ...]
    class_labels: tuple[int, ...]
    class_pairs: tuple[bool, ...]

    def to(self, device: torch.device) -> CompiledConstraints:
        return CompiledConstraints(*(field.to(device) if isinstance(field, Tensor) else field for field in self))


TENSOR_FIELDS = CompiledConstraints._fields[:8]  # the fields that are tensors (buffers of the objective)


def with_denominators(constraints: Sequence[Constraint]) -> tuple[list[Constraint], list[int]]:
    """``constraints`` followed by the denominators of their rates per arc not among them (once
    each), and for each of all these the index of its denominator (-1: none)."""
    every = list(constraints)
    for c in constraints:
        if (d := denominator(c)) is not None and d not in every:
            every.append(d)
    return every, [every.index(d) if (d := denominator(c)) is not None else -1 for c in every]


def compile_constraints(constraints: Sequence[Constraint], upos_vocab: Sequence[str], device: torch.device | None,
                        label_vocab: Sequence[str] = ()) -> CompiledConstraints:
    """The ids in ``upos_vocab`` and ``label_vocab`` (index -> tag, label) and the arc classes
    of the constraints and their denominators (:func:`with_denominators`), on ``device``;
    unknown tags, or labels without a label vocabulary, raise."""
    constraints, given = with_denominators(constraints)
    index = {tag: i for i, tag in enumerate(upos_vocab)} | {ANY: len(upos_vocab)}
    special = {ROOT: ROOT_ID, ANY: ANY_ID}
    missing = {c.child for c in constraints} | {c.parent for c in constraints if c.parent not in special}
    missing -= index.keys()
    if missing:
        raise ConfigurationError(f"UPOS tags {sorted(missing)} of the constraints are not in the UPOS vocabulary {list(upos_vocab)}")
    labels = list(dict.fromkeys(c.label for c in constraints if c.label is not None))
    if labels and not label_vocab:
        raise ConfigurationError("constraints on labels need a parser that labels its arcs (a label vocabulary)")
    groups = [[covers(label, known) for known in label_vocab] for label in labels]
    parent = [special[c.parent] if c.parent in special else index[c.parent] for c in constraints]
    child = [index[c.child] for c in constraints]
    side = [SIDES[c.direction] for c in constraints]
    per = [PER.index(c.per) for c in constraints]
    keys = [(SIDES[c.direction], *(c.distance or (1, None)), labels.index(c.label) if c.label else -1)
            for c in constraints]
    classes = list(dict.fromkeys(key for key, c in zip(keys, constraints) if c.parent != ROOT)) or [(0, 1, None, -1)]
    arc_class = [classes.index(key) if c.parent != ROOT else 0 for key, c in zip(keys, constraints)]
    pairs = tuple(any(c.parent not in special and key == k for key, c in zip(keys, constraints)) for k in classes)
    masks = list(dict.fromkeys(key[:3] for key in classes))
    rows = [(side_, lo, FAR if hi is None else hi) for side_, lo, hi in masks]
    tensors = [torch.tensor(ids, dtype=torch.long, device=device) for ids in (parent, child, side, arc_class, per, given, rows)]
    groups = torch.tensor(groups, dtype=torch.bool, device=device).reshape(len(labels), len(label_vocab))
    return CompiledConstraints(*tensors, groups, tuple(masks.index(key[:3]) for key in classes),
                               tuple(key[3] for key in classes), pairs)


def arc_masks(ids: CompiledConstraints, size: int, dtype: torch.dtype) -> Tensor:
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


def class_members(ids: CompiledConstraints, row: int) -> tuple[list[int], list[int]]:
    """The arc classes of mask ``row``: those with any label, and those with a label group."""
    classes = [c for c, mask in enumerate(ids.class_masks) if mask == row]
    return [c for c in classes if ids.class_labels[c] < 0], [c for c in classes if ids.class_labels[c] >= 0]


def label_columns(ids: CompiledConstraints, labels: Tensor, classes: list[int]) -> Tensor:
    """The label-group probabilities ``(..., n)`` of these arc classes, from ``labels`` ``(..., G)``:
    one gather (one backward), or ``labels`` itself when the classes read every group in order."""
    columns = [ids.class_labels[c] for c in classes]
    return labels if columns == list(range(labels.shape[-1])) else labels[..., columns]
