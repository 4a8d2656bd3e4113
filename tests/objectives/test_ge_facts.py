"""A linguist's facts: WALS features and free-form lines read into rates per arc, errors
that name the file and the fact, and the shipped facts of the six targets."""

from pathlib import Path

import pytest

from objectives.conventions import ConfigurationError
from objectives.ge import Constraint, load_constraints, read_facts
from objectives.ge.facts import DOMINANT, FREE_TOLERANCE, fact_constraints

FACTS = Path(__file__).resolve().parents[2] / "configs" / "facts"
TARGETS = ("wolof", "vietnamese", "greek", "uyghur", "turkish", "welsh")


def test_wals_features_are_the_side_of_a_relation_among_its_arcs():
    rate, tolerance = DOMINANT
    assert fact_constraints({"order": "VSO"}) == [
        Constraint("VERB", "any", rate, "right", label="nsubj", per="arc", tolerance=tolerance),
        Constraint("VERB", "any", rate, "right", label="obj", per="arc", tolerance=tolerance)]
    assert fact_constraints({"order": "OSV"})[0].direction == "left" and fact_constraints({"order": "OSV"})[1].direction == "left"
    assert fact_constraints({"adpositions": "postpositions"}) == [
        Constraint("any", "ADP", rate, "right", label="case", per="arc", tolerance=tolerance)]
    assert fact_constraints({"adjective": "before noun"}, (0.95, 0.05)) == [
        Constraint("NOUN", "ADJ", 0.95, "left", label="amod", per="arc", tolerance=0.05)]


@pytest.mark.parametrize("line, expected", [
    ("ADJ after its NOUN head: 0.9 ± 0.05", Constraint("NOUN", "ADJ", 0.9, "right", per="arc", tolerance=0.05)),
    ("NOUN nsubj before its VERB head: 0.8", Constraint("VERB", "NOUN", 0.8, "left", label="nsubj", per="arc",
                                                        tolerance=FREE_TOLERANCE)),
    ("any before its head: 0.6 +- 0.2", Constraint("any", "any", 0.6, "left", per="arc", tolerance=0.2)),
    ({"AUX after its VERB head": "0.9 ± 0.1"}, Constraint("VERB", "AUX", 0.9, "right", per="arc", tolerance=0.1)),
])
def test_free_form_lines(line, expected):
    assert fact_constraints(line) == [expected]


@pytest.mark.parametrize("fact, message", [
    ({"order": "SVVO"}, "order is one of"),
    ({"adjective": "beside noun"}, "adjective is before noun or after noun"),
    ({"word order": "free"}, "no feature 'word order'"),
    ("ADJ next to its NOUN head: 0.9", "write 'CHILD"),
    ("ADJX after its NOUN head: 0.9", "not a UPOS tag"),
    ("ADJ after its NOUN head: 1.5", "target must lie in"),
])
def test_a_bad_fact_is_named_with_its_file(tmp_path, fact, message):
    path = tmp_path / "facts.yaml"
    path.write_text(f"facts:\n  - {{order: SVO}}\n  - {fact!r}\n" if isinstance(fact, str) else
                    f"facts:\n  - {{order: SVO}}\n  - {dict(fact)}\n".replace("'", ""))
    with pytest.raises(ConfigurationError, match=rf"{path}: fact 2 .*{message}"):
        read_facts(path)
    path.write_text("language: X\n")
    with pytest.raises(ConfigurationError, match="a 'facts' list"):
        read_facts(path)


@pytest.mark.parametrize("language", TARGETS)
def test_the_shipped_facts_of_each_target_read_as_constraints(language):
    """GE reads a facts file where it reads a rules file; each target's file cites its sources."""
    path = FACTS / f"{language}.yaml"
    constraints = load_constraints(path)
    assert 6 <= len(constraints) <= 20 and all(c.per == "arc" and c.tolerance for c in constraints)
    assert "WALS" in path.read_text() and "treebank" in path.read_text()  # its sources, and never the treebank
