"""GE constraints and rules files: :class:`Constraint`, :func:`load_constraints`, and when two
constraints fire on the same arc (:func:`overlap`).

Rules files are YAML: a mapping with a ``constraints`` list of :class:`Constraint` fields
(see ``configs/rules/naseem_ud.yaml``); a language's statistics file (docs/usage.md) is one, each
entry a rate with a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..conventions import UD_RELATIONS, ConfigurationError

__all__ = ["ROOT", "ANY", "SIDES", "FAR", "PER", "Constraint", "load_constraints", "covers", "overlap", "denominator"]

ROOT = "root"
ANY = "any"  # a constraint's parent that is any word (not the root)
SIDES = {None: 0, "left": 1, "right": 2}  # a constraint's direction -> index into the (either, left, right) side masks
FAR = 2**31 - 1  # the upper end of a distance range without one
PER = ("child", "head", "arc")  # what a constraint's rate is counted over (Constraint.per)


@dataclass(frozen=True)
class Constraint:
    """A target rate for the arcs of a kind: by default ``p(parent | child)``, the share of
    ``child`` words headed by ``parent``.

    Its feature fires on an arc h -> m when ``upos[h] == parent`` (``h >= 1`` for ``"any"``,
    ``h == 0`` for ``"root"``), ``upos[m] == child`` (any word for ``"any"``), and the arc has
    the direction, distance and label given (each optional). The rate is the expected number
    of arcs firing it over (``per``):

    - ``"child"``: the words of the child tag (``p(parent, side, ... | child)``);
    - ``"head"``: the words of the parent tag (any word for ``"any"``): how many such
      dependents a head has on average (valency; may exceed 1);
    - ``"arc"``: the arcs of the same parent, child and label on either side at any distance
      (the conditional form: ``p(side, distance | parent -label-> child)``, e.g. "an ADJ
      precedes its NOUN head in 90% of such arcs"; see :func:`denominator`).

    Attributes:
        parent: a tag of the UPOS vocabulary, ``"any"`` for any word, or ``"root"`` for the
            artificial root.
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
        per: ``"child"``, ``"head"`` or ``"arc"`` (above).
        tolerance: a half-width around ``target`` within which the rate costs nothing (an
            absolute margin, e.g. a bootstrap standard error), or ``None``: the loss's own.

    Tags are checked against the vocabulary the objective is set up with.
    """

    parent: str
    child: str
    target: float | None = None
    direction: str | None = None
    distance: int | tuple[int, int | None] | None = None
    label: str | None = None
    per: str = "child"
    tolerance: float | None = None

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
        if not isinstance(self.child, str) or not self.child or self.child == ROOT:
            raise ConfigurationError(f"child must be a UPOS tag or {ANY!r}, got {self.child!r}")
        if self.direction not in SIDES:
            raise ConfigurationError(f"direction must be 'left', 'right' or None, got {self.direction!r}")
        if self.per not in PER:
            raise ConfigurationError(f"per must be one of {', '.join(PER)}, got {self.per!r}")
        if self.per != "child" and self.parent == ROOT:
            raise ConfigurationError(f"a root constraint's rate is per child: leave out per: {self.per}")
        if self.per == "arc" and self.direction is None and self.distance is None:
            raise ConfigurationError("a rate per arc is the share of a side or distance among the arcs of its parent, "
                                     "child and label: give a direction or a distance")
        if self.target is not None and not (0 <= self.target and (self.per == "head" or self.target <= 1)):
            raise ConfigurationError(f"target must lie in [0, 1]{' (>= 0 per head)' if self.per == 'head' else ''}, "
                                     f"got {self.target}")
        if self.tolerance is not None and not self.tolerance >= 0:
            raise ConfigurationError(f"tolerance must be >= 0, got {self.tolerance}")


def load_constraints(path: str | Path) -> list[Constraint]:
    """Read a YAML rules (or statistics) file: a mapping with a ``constraints`` list of
    Constraint fields; or a facts file (a ``facts`` list: :mod:`objectives.ge.facts`)."""
    rules = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(rules, dict) and "facts" in rules:
        from .facts import facts_constraints  # facts are read into Constraints: imported here, not at the top

        return facts_constraints(rules, path)
    if not isinstance(rules, dict) or not isinstance(rules.get("constraints"), list):
        raise ConfigurationError(f"{path}: expected a mapping with a 'constraints' list (or a 'facts' list)")
    constraints = []
    for number, rule in enumerate(rules["constraints"], 1):
        try:
            constraints.append(Constraint(**rule))
        except (TypeError, ConfigurationError) as error:
            raise ConfigurationError(f"{path}: constraint {number} ({rule}): {error}") from None
    return constraints


def denominator(constraint: Constraint) -> Constraint | None:
    """The constraint whose expected arcs a rate ``per: arc`` is counted over: the same parent,
    child and label on either side at any distance; None for other rates."""
    if constraint.per != "arc":
        return None
    return Constraint(constraint.parent, constraint.child, label=constraint.label)


def covers(label: str, known: str) -> bool:
    """Whether a constraint's ``label`` fires on arcs labeled ``known``: the same label, or
    ``known``'s universal part when ``label`` has no subtype (``obl`` covers ``obl:tmod``)."""
    return known == label if ":" in label else known.split(":")[0] == label


def overlap(a: Constraint, b: Constraint) -> bool:
    """Whether some arc fires both constraints (a constraint without a direction fires on both
    sides; any word heads all but the root)."""
    parents = a.parent == b.parent or ROOT not in (a.parent, b.parent) and ANY in (a.parent, b.parent)
    sides = None in (a.direction, b.direction) or a.direction == b.direction
    (lo_a, hi_a), (lo_b, hi_b) = a.distance or (1, None), b.distance or (1, None)
    distances = lo_a <= (hi_b or FAR) and lo_b <= (hi_a or FAR)
    labels = None in (a.label, b.label) or covers(a.label, b.label) or covers(b.label, a.label)
    children = a.child == b.child or ANY in (a.child, b.child)
    return children and parents and sides and distances and labels
