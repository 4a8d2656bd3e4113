"""benchmarks.ge_targets --families: a family's rules with targets from gold trees, written as a
rules file that GE reads back."""

import math
import sys

import pytest

from benchmarks import ge_targets
from benchmarks.ge_targets import UPOS_VOCAB, family_rules, tree_tensors
from objectives.ge import FAMILIES, MIN_COUNT, estimate_targets, load_constraints
from parser.data.sentences import read_conllu

WOLOF_DEV = "UD_Wolof-WTB/wo_wtb-ud-dev.conllu"


@pytest.fixture(scope="module")
def wolof_dev(ud_dir):
    return read_conllu(ud_dir / WOLOF_DEV)


def test_family_rules_carry_the_gold_rates_and_leave_out_rare_child_tags(wolof_dev):
    rules = family_rules(["tag_pairs", "distances"], wolof_dev)
    everything = FAMILIES["tag_pairs"]() + FAMILIES["distances"]()
    rates = estimate_targets(everything, *tree_tensors(wolof_dev), UPOS_VOCAB, min_count=MIN_COUNT)
    kept = [(c, rate) for c, rate in zip(everything, rates.tolist()) if not math.isnan(rate)]
    assert 0 < len(rules) == len(kept) < len(everything)  # some tag has fewer than 10 words in Wolof dev
    for rule, (constraint, rate) in zip(rules, kept):
        assert (rule.parent, rule.child, rule.direction, rule.distance) == (
            constraint.parent, constraint.child, constraint.direction, constraint.distance)
        assert rule.target == pytest.approx(rate, abs=5e-5)
    # each child tag's tag-pair rates are the distribution of its head's tag and side
    noun = sum(r.target for r in rules if r.child == "NOUN" and r.distance is None)
    assert noun == pytest.approx(1.0, abs=1e-3)


def test_the_written_file_reads_back_as_the_same_rules(wolof_dev, ud_dir, tmp_path, monkeypatch, capsys):
    output = tmp_path / "rates.yaml"
    monkeypatch.setattr(sys, "argv", ["ge_targets", "--ud-root", str(ud_dir), "--families", "tag_pairs", "distances",
                                      "--from", WOLOF_DEV, "--skip", "10", "--output", str(output)])
    ge_targets.main()
    assert load_constraints(output) == family_rules(["tag_pairs", "distances"], wolof_dev[10:])
    assert output.read_text().startswith("# GE rules of tag_pairs + distances")
    assert "-> " + str(output) in capsys.readouterr().out
