"""Generalized expectation: rates against enumeration, both gradient routes, rules files, errors."""

import math

import pytest
import torch

from objectives.ge import Constraint, GeneralizedExpectation, estimate_targets, load_constraints
from objectives.objective import Scores

from .oracle import UPOS_VOCAB, make_batch, sentences

REPO_RULES = "configs/rules/naseem_ud.yaml"
CONSTRAINTS = [
    Constraint("root", "VERB", 0.6),
    Constraint("VERB", "NOUN", 0.7, direction="right"),
    Constraint("NOUN", "ADJ", 0.9, direction="right"),
    Constraint("NOUN", "DET", 0.2),
    Constraint("ADJ", "NOUN", 0.1, direction="right"),
    Constraint("VERB", "PRON", 0.5),  # no PRON in the test batches: masked out
]
LENGTHS = [4, 2, 3, 1]


def fires(constraint, tags, h, m):
    """The feature of one arc h -> m, from tag names."""
    parent = "root" if h == 0 else tags[h]
    side = "left" if m < h else "right"
    return parent == constraint.parent and tags[m] == constraint.child and constraint.direction in (None, side)


def brute_rates(scores, batch, constraints, multiroot=False):
    """E[#arcs firing f_k] / #child_k words over the batch, by enumeration: (K,), NaN if no child."""
    expected = torch.zeros(len(constraints), dtype=torch.float64)
    counts = torch.zeros(len(constraints), dtype=torch.float64)
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        tags = [UPOS_VOCAB[i] for i in batch.upos[b].tolist()]
        for k, c in enumerate(constraints):
            counts[k] += sum(tags[m] == c.child for m in range(1, n + 1))
            per_tree = torch.tensor([sum(fires(c, tags, int(t[m]), m) for m in range(1, n + 1)) for t in heads])
            expected[k] += (log_p.exp() * per_tree).sum()
    return expected / counts


def brute_penalty(rates, constraints, penalty):
    total = 0.0
    for p, c in zip(rates.tolist(), constraints):
        if math.isnan(p):
            continue
        t = torch.tensor(c.target, dtype=torch.float32).item()  # targets are stored in float32
        if penalty == "squared":
            total += (p - t) ** 2
        else:
            p, t = (min(max(x, 1e-6), 1 - 1e-6) for x in (p, t))
            total += t * math.log(t / p) + (1 - t) * math.log((1 - t) / (1 - p))
    return torch.tensor(total, dtype=torch.float64)


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_penalty_matches_brute_force(penalty, gradient, multiroot):
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS, multiroot)
    assert rates[:-1].isfinite().all() and rates[-1].isnan()
    objective = GeneralizedExpectation(CONSTRAINTS, penalty, gradient, UPOS_VOCAB, multiroot)
    expected = brute_penalty(rates, CONSTRAINTS, penalty)
    torch.testing.assert_close(objective(scores, batch), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_zero_when_targets_are_the_model_rates(penalty):
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS).nan_to_num(0.5).tolist()
    constraints = [Constraint(c.parent, c.child, rate, c.direction) for c, rate in zip(CONSTRAINTS, rates)]
    objective = GeneralizedExpectation(constraints, penalty, upos_vocab=UPOS_VOCAB)
    objective.targets = torch.tensor(rates, dtype=torch.float64)  # exact, not float32-rounded
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs), batch)
    loss.backward()
    assert loss.abs() < 1e-12
    assert arcs.grad.abs().max() < 1e-12


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_reverse_mode_and_covariance_routes_agree(penalty, multiroot):
    scores, batch = make_batch([5, 3, 4, 1])  # every rate strictly inside (0, 1)
    results = []
    for gradient in ("reverse", "t2"):
        arcs = scores.arcs.clone().requires_grad_()
        loss = GeneralizedExpectation(CONSTRAINTS, penalty, gradient, UPOS_VOCAB, multiroot)(Scores(arcs), batch)
        loss.backward()
        results.append((loss, arcs.grad))
    (loss, grad), (loss_t2, grad_t2) = results
    assert grad.abs().max() > 1e-3
    torch.testing.assert_close(loss_t2, loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_t2, grad, rtol=0, atol=1e-12)


def test_estimate_targets_counts_gold_trees():
    _, batch = make_batch(LENGTHS)
    # the gold trees as (almost) deterministic scores: enumeration puts all mass on them
    gold = torch.full((4, 5, 5), -1e3, dtype=torch.float64)
    gold.scatter_(1, batch.heads[:, None, :], 0.0)
    expected = brute_rates(Scores(gold), batch, CONSTRAINTS)
    got = estimate_targets(CONSTRAINTS, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB)
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_rules_files(tmp_path):
    shipped = load_constraints(REPO_RULES)
    assert Constraint("root", "VERB", shipped[0].target) == shipped[0]
    assert all(0 < c.target < 1 for c in shipped)
    path = tmp_path / "rules.yaml"
    path.write_text(
        "# my rules\nconstraints:\n"
        "  - {parent: NOUN, child: ADJ, target: 0.8, direction: right}\n"
        "  - {parent: root, child: VERB, target: 0.5}\n"
    )
    objective = GeneralizedExpectation(path)
    assert objective.constraints == [Constraint("NOUN", "ADJ", 0.8, "right"), Constraint("root", "VERB", 0.5)]
    path.write_text("- {parent: NOUN, child: ADJ, target: 0.8}\n")
    with pytest.raises(ValueError, match="constraints"):
        load_constraints(path)


def test_constraints_from_dicts_and_bind_later():
    scores, batch = make_batch(LENGTHS)
    objective = GeneralizedExpectation([{"parent": "root", "child": "VERB", "target": 0.6}])
    with pytest.raises(RuntimeError, match="bind"):
        objective(scores, batch)
    objective.bind(list(UPOS_VOCAB))
    bound = GeneralizedExpectation(CONSTRAINTS[:1], upos_vocab=UPOS_VOCAB)
    torch.testing.assert_close(objective(scores, batch), bound(scores, batch))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"parent": "VRB", "child": "NOUN", "target": 0.5}, "parent"),
        ({"parent": "VERB", "child": "root", "target": 0.5}, "child"),
        ({"parent": "VERB", "child": "NOUN", "target": 1.5}, "target"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "direction": "up"}, "direction"),
    ],
)
def test_invalid_constraints(fields, message):
    with pytest.raises(ValueError, match=message):
        Constraint(**fields)


def test_untagged_batches_and_vocabularies_are_rejected():
    scores, batch = make_batch(LENGTHS)
    with pytest.raises(ValueError, match="not in the UPOS vocabulary"):
        GeneralizedExpectation(CONSTRAINTS, upos_vocab=["<pad>", "<unk>", "NOUN", "VERB"])
    objective = GeneralizedExpectation(CONSTRAINTS, upos_vocab=UPOS_VOCAB)
    batch.upos = batch.upos.clamp(max=1)  # only <pad> and <unk>
    with pytest.raises(ValueError, match="tagged unlabeled text"):
        objective(scores, batch)
    batch.upos = None
    with pytest.raises(ValueError, match="tagged unlabeled text"):
        objective(scores, batch)
