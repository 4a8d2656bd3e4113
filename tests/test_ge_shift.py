"""benchmarks.ge_shift: chunked rates equal one-batch GE targets; the distances it reports."""

import pytest
import torch

from benchmarks import ge_shift
from parser.statistics import UPOS_VOCAB, tree_tensors
from objectives.ge import estimate_targets
from parser.data.sentences import read_conllu


@pytest.fixture(scope="module")
def wolof_dev(ud_dir):
    return read_conllu(ud_dir / "UD_Wolof-WTB/wo_wtb-ud-dev.conllu")


@pytest.mark.parametrize("min_count", [1, 10])
def test_rates_counted_in_chunks_equal_the_targets_of_one_batch(wolof_dev, monkeypatch, min_count):
    monkeypatch.setattr(ge_shift, "CHUNK", 7)  # many chunks of unequal padding
    whole = estimate_targets(ge_shift.CONSTRAINTS, *tree_tensors(wolof_dev), UPOS_VOCAB, min_count=min_count)
    chunked = ge_shift.rates(wolof_dev, min_count)
    assert torch.equal(whole.isnan(), chunked.isnan())
    torch.testing.assert_close(chunked.nan_to_num(-1.0), whole.nan_to_num(-1.0))


def test_distances_penalty_and_share_of_words():
    k = len(ge_shift.CONSTRAINTS)
    noun_root = next(i for i, c in enumerate(ge_shift.CONSTRAINTS) if (c.parent, c.child) == ("root", "NOUN"))
    noun_verb = next(i for i, c in enumerate(ge_shift.CONSTRAINTS)
                     if (c.parent, c.child, c.direction) == ("VERB", "NOUN", "left"))
    a, b = torch.zeros(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    a[noun_root], b[noun_verb] = 1.0, 1.0  # every NOUN: root in a, left of a VERB in b
    targets = torch.zeros(k, dtype=torch.float64)
    penalty, words = ge_shift.distances(a, b, targets, {"NOUN": 0.25, "VERB": 0.75})
    assert penalty == pytest.approx(2.0)
    assert words == pytest.approx(0.25)  # all NOUNs, a quarter of the words, change head
    targets[noun_verb] = torch.nan  # a constraint GE leaves out does not count
    assert ge_shift.distances(a, b, targets, {"NOUN": 0.25})[0] == pytest.approx(1.0)
    assert ge_shift.distances(a, a, targets, {"NOUN": 0.25}) == (0.0, 0.0)
