"""Combined objectives: the weighted sum of their terms, each with its own schedule."""

from __future__ import annotations

import pytest
import torch

from objectives.combined import Combined
from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import GeneralizedExpectation
from objectives.objective import ObjectiveContext, Scores
from objectives.schedule import linear_warmup_decay

TAGS = ["<pad>", "<unk>", "NOUN", "VERB", "DET"]


class _Batch:
    def __init__(self, lengths, upos):
        self.lengths, self.upos, self.heads, self.labels = lengths, upos, None, None


def _context(total_steps=10):
    return ObjectiveContext(stage="fit", tags=TAGS, total_steps=total_steps)


def test_terms_are_summed_with_their_schedules():
    torch.manual_seed(0)
    scores = Scores(torch.randn(2, 5, 5, dtype=torch.float64))
    batch = _Batch(torch.tensor([4, 3]), torch.tensor([[0, 2, 3, 4, 2], [0, 4, 2, 3, 0]]))
    constraints = [{"parent": "VERB", "child": "NOUN", "target": 0.6}, {"parent": "NOUN", "child": "DET", "target": 0.9}]
    entropy, ge = EntropyRegularizer(), GeneralizedExpectation(constraints)
    combined = Combined([entropy, ge], weights=[0.5, 2.0], warmups=[0, 4], schedules=["constant", "linear_decay"])
    combined.setup(_context(total_steps=10))
    for step in (0, 2, 4, 7, 10):
        expected = 0.5 * entropy(scores, batch) + 2.0 * linear_warmup_decay(step, 4, 10) * ge(scores, batch)
        torch.testing.assert_close(combined(scores, batch, step=step), expected)
    assert set(combined.values) == {"EntropyRegularizer"}  # at step 10 the decayed GE term is skipped
    assert combined.needs_upos and not combined.needs_teacher


def test_setup_reaches_every_term_and_bad_lists_are_refused():
    ge = GeneralizedExpectation([{"parent": "VERB", "child": "NOUN", "target": 0.5}])
    combined = Combined([EntropyRegularizer(), ge])
    combined.setup(ObjectiveContext(stage="fit", multiroot=True, tags=TAGS))
    assert all(term.multiroot for term in combined.terms) and ge.num_tags == len(TAGS)
    with pytest.raises(ValueError, match="1 weights for 2 objectives"):
        Combined([EntropyRegularizer(), EntropyRegularizer()], weights=[1.0])
    with pytest.raises(RuntimeError, match="total_steps"):
        decaying = Combined([EntropyRegularizer()], schedules=["linear_decay"])
        decaying.setup(ObjectiveContext(stage="fit"))
        decaying.factors(3)
