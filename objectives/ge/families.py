"""Feature families: constraint sets named in a config (``"tag_pairs"``, ``"distances"``,
``"labels"``, and Effland & Collins's (2023) ``"label_sides"``, ``"pair_sides"``, ``"valency"``), without targets (they are estimated from a labeled sample), and
:func:`resolve_constraints`, which reads a family name, a rules file or a list mixing them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..conventions import UD_RELATIONS, UPOS_TAGS
from .rules import ANY, ROOT, Constraint, load_constraints

__all__ = [
    "TAG_PAIRS", "DISTANCES", "LABELS", "LABEL_SIDES", "PAIR_SIDES", "VALENCY", "DISTANCE_BUCKETS", "FAMILIES",
    "tag_pair_constraints", "distance_constraints", "label_constraints", "label_side_constraints",
    "pair_side_constraints", "valency_constraints", "resolve_constraints",
]  # fmt: skip

TAG_PAIRS = "tag_pairs"  # the name of the constraint set built by tag_pair_constraints()
DISTANCES = "distances"  # the name of the constraint set built by distance_constraints()
LABELS = "labels"  # the name of the constraint set built by label_constraints()
LABEL_SIDES = "label_sides"  # label_side_constraints()
PAIR_SIDES = "pair_sides"  # pair_side_constraints()
VALENCY = "valency"  # valency_constraints()
DISTANCE_BUCKETS = ((1, 1), (2, 2), (3, 6), (7, None))
"""The ``|h - m|`` ranges of :func:`distance_constraints` (inclusive; None: no upper bound)."""


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


def label_side_constraints(tags: Sequence[str] = UPOS_TAGS,
                           relations: Sequence[str] = tuple(r for r in UD_RELATIONS if r != ROOT)) -> list[Constraint]:
    """Every (child tag, universal relation, side) with any word as the head, per child: ESR's
    ``tail_dep_dir``, each child tag's distribution over relations and the side of its head."""
    return [Constraint(ANY, child, direction=side, label=relation)
            for child in tags for relation in relations for side in ("left", "right")]


def pair_side_constraints(tags: Sequence[str] = UPOS_TAGS) -> list[Constraint]:
    """Every (head tag, child tag) pair's left share, per arc: on which side of a head of one
    tag its dependents of another lie (the right share is its complement)."""
    return [Constraint(parent, child, direction="left", per="arc") for parent in tags for child in tags]


def valency_constraints(tags: Sequence[str] = UPOS_TAGS) -> list[Constraint]:
    """Every head tag's dependents on each side, per head: how many a word of the tag has
    on its left and on its right on average (ESR's valency)."""
    return [Constraint(parent, ANY, direction=side, per="head") for parent in tags for side in ("left", "right")]


FAMILIES = {TAG_PAIRS: tag_pair_constraints, DISTANCES: distance_constraints, LABELS: label_constraints,
            LABEL_SIDES: label_side_constraints, PAIR_SIDES: pair_side_constraints, VALENCY: valency_constraints}


def resolve_constraints(given: str | Path | Sequence[Constraint | dict | str]) -> list[Constraint]:
    """Constraints from a family name (:data:`FAMILIES`), a rules file, or a list of
    constraints, their fields as dicts, and family names."""
    if isinstance(given, (str, Path)):
        return FAMILIES[given]() if given in FAMILIES else load_constraints(given)
    return [c for item in given for c in (resolve_constraints(item) if isinstance(item, str) else
                                          [item if isinstance(item, Constraint) else Constraint(**item)])]
