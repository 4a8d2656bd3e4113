"""A language's facts as a linguist states them, read into GE constraints.

A facts file is YAML with a ``facts`` list; each fact is a word-order feature of the World
Atlas of Language Structures (WALS; Dryer & Haspelmath 2013) by name, or a free-form line::

    language: Wolof
    facts:
      - order: SVO                          # WALS 81A
      - adpositions: prepositions           # WALS 85A
      - adjective: after noun               # WALS 87A
      - ADJ amod after its NOUN head: 0.9 ± 0.1
      - PRON before its VERB head: 0.7      # ± 0.1 when no tolerance is given

GE reads a facts file wherever it reads a rules file (:func:`~objectives.ge.rules.load_constraints`).
Every fact becomes constraints ``per: arc``: the share of one side among the arcs of a kind
(child tag or ``any`` word, optional relation, head tag or any word), a rate with a tolerance.
A WALS feature says which order is dominant: :data:`DOMINANT` (0.85 ± 0.15, a band from 0.7
to 1) unless the file gives ``rate`` and ``tolerance`` beside ``facts``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..conventions import UPOS_TAGS, ConfigurationError
from .rules import ANY, Constraint

__all__ = ["DOMINANT", "FREE_TOLERANCE", "WALS", "read_facts", "facts_constraints", "fact_constraints"]

DOMINANT = (0.85, 0.15)
"""The rate and tolerance of a WALS feature's dominant order: most arcs of the kind, not all."""
FREE_TOLERANCE = 0.1
"""The tolerance of a free-form fact that gives none."""

# WALS feature name -> (its WALS number, child, relation, head, {value: the child's side}):
# the side of the dependent of each order, in UD's analysis (the adposition is the noun's
# `case` dependent; a relative clause is the noun's `acl`).
WALS = {
    "subject": ("82A", ANY, "nsubj", "VERB", {"before verb": "left", "after verb": "right"}),
    "object": ("83A", ANY, "obj", "VERB", {"before verb": "left", "after verb": "right"}),
    "adpositions": ("85A", "ADP", "case", ANY, {"prepositions": "left", "postpositions": "right"}),
    "genitive": ("86A", ANY, "nmod", "NOUN", {"before noun": "left", "after noun": "right"}),
    "adjective": ("87A", "ADJ", "amod", "NOUN", {"before noun": "left", "after noun": "right"}),
    "demonstrative": ("88A", "DET", "det", "NOUN", {"before noun": "left", "after noun": "right"}),
    "numeral": ("89A", "NUM", "nummod", "NOUN", {"before noun": "left", "after noun": "right"}),
    "relative clause": ("90A", ANY, "acl", "NOUN", {"before noun": "left", "after noun": "right"}),
}
ORDERS = ("SOV", "SVO", "VSO", "VOS", "OVS", "OSV")  # WALS 81A: subject and object around the verb

FREE = re.compile(r"^(?P<child>\S+)(?: (?P<relation>[a-z]+(?::[a-z]+)?))? (?P<side>before|after) its"
                  r"(?: (?P<head>\S+))? head: (?P<rate>[0-9.]+)(?: *(?:±|\+-|\+/-) *(?P<tolerance>[0-9.]+))?$")


def read_facts(path: str | Path) -> list[Constraint]:
    """The constraints of a facts file; a ConfigurationError names the file and the fact."""
    return facts_constraints(yaml.safe_load(Path(path).read_text(encoding="utf-8")), path)


def facts_constraints(spec: dict, path: str | Path) -> list[Constraint]:
    """The constraints of a facts file's content ``spec`` (read from ``path``)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("facts"), list):
        raise ConfigurationError(f"{path}: a facts file is a mapping with a 'facts' list")
    dominant = (spec.get("rate", DOMINANT[0]), spec.get("tolerance", DOMINANT[1]))
    constraints = []
    for number, fact in enumerate(spec["facts"], 1):
        try:
            constraints += fact_constraints(fact, dominant)
        except ConfigurationError as error:
            raise ConfigurationError(f"{path}: fact {number} ({fact!r}): {error}") from None
    return constraints


def fact_constraints(fact: str | dict, dominant: tuple[float, float] = DOMINANT) -> list[Constraint]:
    """One fact's constraints: a one-key mapping ``{feature: value}`` (:data:`WALS`, or
    ``order`` with one of the six orders of subject, verb and object), or a free-form line
    (as a string, or as YAML reads it: ``{"ADJ after its NOUN head": 0.9}``)."""
    rate, tolerance = dominant
    if isinstance(fact, str):
        return [_free(fact)]
    if not isinstance(fact, dict) or len(fact) != 1:
        raise ConfigurationError("a fact is a line or one 'feature: value' pair")
    (feature, value), = fact.items()
    if feature == "order":
        if value not in ORDERS:
            raise ConfigurationError(f"order is one of {', '.join(ORDERS)} (WALS 81A)")
        verb = value.index("V")
        return [*fact_constraints({"subject": "before verb" if value.index("S") < verb else "after verb"}, dominant),
                *fact_constraints({"object": "before verb" if value.index("O") < verb else "after verb"}, dominant)]
    if feature not in WALS:
        if FREE.match(f"{feature}: {value}"):  # YAML reads a free-form line as a one-key mapping
            return [_free(f"{feature}: {value}")]
        raise ConfigurationError(f"no feature {feature!r}; the features: order, {', '.join(WALS)}; or a line "
                                 "'CHILD [RELATION] before|after its [HEAD] head: RATE [± TOLERANCE]'")
    _, child, relation, head, sides = WALS[feature]
    if value not in sides:
        raise ConfigurationError(f"{feature} is {' or '.join(sides)}")
    return [Constraint(head, child, rate, sides[value], label=relation, per="arc", tolerance=tolerance)]


def _free(line: str) -> Constraint:
    """``CHILD [RELATION] before|after its [HEAD] head: RATE [± TOLERANCE]``."""
    match = FREE.match(line.strip())
    if match is None:
        raise ConfigurationError("write 'CHILD [RELATION] before|after its [HEAD] head: RATE [± TOLERANCE]', "
                                 "e.g. 'ADJ after its NOUN head: 0.9 ± 0.1'")
    child, head = match["child"], match["head"] or ANY
    for tag in (child, head):
        if tag != ANY and tag not in UPOS_TAGS:
            raise ConfigurationError(f"{tag!r} is not a UPOS tag (nor 'any')")
    tolerance = FREE_TOLERANCE if match["tolerance"] is None else float(match["tolerance"])
    return Constraint(head, child, float(match["rate"]), "left" if match["side"] == "before" else "right",
                      label=match["relation"], per="arc", tolerance=tolerance)
