"""Generalized expectation: rates against enumeration, both gradient routes, rules files, errors."""

import math

import pytest
import torch

from objectives.conventions import UPOS_TAGS
from objectives.ge import (
    MIN_COUNT,
    DISTANCE_BUCKETS,
    BernoulliKL,
    Constraint,
    GeneralizedExpectation,
    LabeledTargets,
    OneSided,
    Penalty,
    RuleCoverage,
    Squared,
    TargetSource,
    TeacherTargets,
    distance_constraints,
    estimate_targets,
    label_constraints,
    load_constraints,
    tag_pair_constraints,
)
from objectives.objective import ObjectiveContext, Scores

from .oracle import UPOS_VOCAB, make_batch, ready, sentences

REPO_RULES = "configs/rules/naseem_ud.yaml"
CONSTRAINTS = [
    Constraint("root", "VERB", 0.6),
    Constraint("VERB", "NOUN", 0.7, direction="right"),
    Constraint("NOUN", "ADJ", 0.9, direction="right"),
    Constraint("NOUN", "DET", 0.2),
    Constraint("ADJ", "NOUN", 0.1, direction="right"),
    Constraint("VERB", "PRON", 0.5),  # no PRON in the test batches: masked out
]
# any word as the head, distances, both sides, a tag pair with a distance range, and the root
DISTANCE_CONSTRAINTS = [
    Constraint("any", "NOUN", 0.4, direction="left", distance=1),
    Constraint("any", "NOUN", 0.3, direction="right", distance=(2, None)),
    Constraint("VERB", "NOUN", 0.2, distance=(1, 2)),
    Constraint("any", "ADJ", 0.5),
    Constraint("root", "VERB", 0.6),
    Constraint("any", "DET", 0.3, distance=(2, 3)),
]
# the label vocabulary of make_batch's three labels; "obl" covers obl and obl:tmod
LABEL_VOCAB = ("nsubj", "obl", "obl:tmod")
LABEL_CONSTRAINTS = [
    Constraint("any", "NOUN", 0.4, label="obl"),
    Constraint("any", "NOUN", 0.3, label="obl:tmod"),
    Constraint("VERB", "NOUN", 0.2, direction="right", label="nsubj"),
    Constraint("any", "ADJ", 0.5, distance=1, label="nsubj"),
    Constraint("root", "VERB", 0.6),
    Constraint("any", "DET", 0.3),
]
LENGTHS = [4, 2, 3, 1]


def fires(constraint, tags, h, m):
    """The feature of one arc h -> m, from tag names."""
    parent = "root" if h == 0 else tags[h]
    side = "left" if m < h else "right"
    lo, hi = constraint.distance or (1, None)
    head = parent == constraint.parent or constraint.parent == "any" and h > 0
    near = lo <= abs(h - m) and (hi is None or abs(h - m) <= hi)
    child = constraint.child in (tags[m], "any")
    return head and child and constraint.direction in (None, side) and near


def label_weight(constraint, scores, b, h, m):
    """The probability that arc h -> m of sentence b has the constraint's label (label logits over LABEL_VOCAB)."""
    if constraint.label is None:
        return 1.0
    probabilities = scores.labels[b, h, m].double().softmax(-1).tolist()
    return sum(p for p, known in zip(probabilities, LABEL_VOCAB)
               if known == constraint.label or ":" not in constraint.label and known.split(":")[0] == constraint.label)


def brute_rates(scores, batch, constraints, multiroot=False):
    """E[#arcs firing f_k] / #child_k words over the batch, by enumeration: (K,), NaN if no child."""
    expected = torch.zeros(len(constraints), dtype=torch.float64)
    counts = torch.zeros(len(constraints), dtype=torch.float64)
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        tags = [UPOS_VOCAB[i] for i in batch.upos[b].tolist()]
        for k, c in enumerate(constraints):
            counts[k] += sum(tags[m] == c.child for m in range(1, n + 1))
            per_tree = torch.tensor([sum(fires(c, tags, int(t[m]), m) * label_weight(c, scores, b, int(t[m]), m)
                                         for m in range(1, n + 1)) for t in heads], dtype=torch.float64)
            expected[k] += (log_p.exp() * per_tree).sum()
    return expected / counts


def child_counts(batch, constraints):
    """The number of words of each constraint's child tag in the batch."""
    counts = []
    for b, n in enumerate(batch.lengths.tolist()):
        tags = [UPOS_VOCAB[i] for i in batch.upos[b, 1 : n + 1].tolist()]
        counts.append([tags.count(c.child) for c in constraints])
    return [sum(column) for column in zip(*counts)]


def brute_weights(batch, constraints, weighting):
    """Each constraint's weight: 1, or its child tag's count over the mean count of those present."""
    counts = child_counts(batch, constraints)
    present = [n for n in counts if n > 0]
    return [1.0 if weighting == "uniform" else n / (sum(present) / len(present)) for n in counts]


def assert_directional_derivative(function, x, grad):
    """``grad`` agrees with a central finite difference of ``function`` at ``x`` along a random
    direction (one check of all coordinates at once, cheaper than gradcheck's one per coordinate)."""
    direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    slope = (function(x + 1e-6 * direction) - function(x - 1e-6 * direction)) / 2e-6
    torch.testing.assert_close(slope, (grad * direction).sum(), rtol=1e-6, atol=1e-9)


def brute_penalty(rates, constraints, penalty, weights=None):
    total = 0.0
    weights = weights or [1.0] * len(constraints)
    for p, c, w in zip(rates.tolist(), constraints, weights):
        if math.isnan(p):
            continue
        t = torch.tensor(c.target, dtype=torch.float32).item()  # targets are stored in float32
        if penalty == "squared":
            total += w * (p - t) ** 2
        elif penalty == "one_sided":
            total += w * max(0.0, t - p) ** 2
        else:
            p, t = (min(max(x, 1e-6), 1 - 1e-6) for x in (p, t))
            total += w * (t * math.log(t / p) + (1 - t) * math.log((1 - t) / (1 - p)))
    return torch.tensor(total, dtype=torch.float64)


@pytest.mark.parametrize("weighting", ["uniform", "count"])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
@pytest.mark.parametrize("penalty", ["squared", "kl", "one_sided"])
def test_penalty_matches_brute_force(penalty, gradient, multiroot, weighting):
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS, multiroot)
    assert rates[:-1].isfinite().all() and rates[-1].isnan()
    objective = ready(GeneralizedExpectation(CONSTRAINTS, penalty, gradient, weighting=weighting), multiroot)
    weights = brute_weights(batch, CONSTRAINTS, weighting)
    assert weighting == "uniform" or len(set(weights)) > 2  # the counts differ: the weighting is tested
    expected = brute_penalty(rates, CONSTRAINTS, penalty, weights)
    torch.testing.assert_close(objective(scores, batch), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_zero_when_targets_are_the_model_rates(penalty):
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS).nan_to_num(0.5).tolist()
    constraints = [Constraint(c.parent, c.child, rate, c.direction) for c, rate in zip(CONSTRAINTS, rates)]
    objective = ready(GeneralizedExpectation(constraints, penalty))
    objective.targets = torch.tensor(rates, dtype=torch.float64)  # exact, not float32-rounded
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs), batch)
    loss.backward()
    assert loss.abs() < 1e-12
    assert arcs.grad.abs().max() < 1e-12


@pytest.mark.parametrize("weighting", ["uniform", "count"])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_reverse_mode_and_covariance_routes_agree(penalty, multiroot, weighting):
    scores, batch = make_batch([5, 3, 4, 1])  # every rate strictly inside (0, 1)
    results = []
    for gradient in ("reverse", "t2"):
        arcs = scores.arcs.clone().requires_grad_()
        objective = ready(GeneralizedExpectation(CONSTRAINTS, penalty, gradient, weighting=weighting), multiroot)
        loss = objective(Scores(arcs), batch)
        loss.backward()
        results.append((loss, arcs.grad))
    (loss, grad), (loss_t2, grad_t2) = results
    assert grad.abs().max() > 1e-3
    torch.testing.assert_close(loss_t2, loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_t2, grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_mean_reduction_is_the_sum_over_the_constraints_kept(gradient, multiroot, dtype):
    """reduction="mean": the brute-force sum over the number of constraints whose child occurs
    in the batch (5 of 6 here: no PRON); its gradient against a finite difference (float64),
    padding included (sentences of 4, 2, 3, 1 words in one batch)."""
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS, multiroot)
    kept = int(rates.isfinite().sum())
    assert kept == len(CONSTRAINTS) - 1
    objective = ready(GeneralizedExpectation(CONSTRAINTS, "squared", gradient, reduction="mean"), multiroot)
    expected = brute_penalty(rates, CONSTRAINTS, "squared") / kept
    tight = dtype == torch.float64
    arcs = scores.arcs.to(dtype).clone().requires_grad_()
    loss = objective(Scores(arcs), batch)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-10 if tight else 1e-5, atol=1e-12 if tight else 1e-7)
    if tight:
        loss.backward()
        assert_directional_derivative(lambda x: objective(Scores(x), batch).detach(), scores.arcs.double(), arcs.grad)


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_distance_and_any_word_features_match_brute_force(penalty, gradient, multiroot):
    """Constraints on how far and on which side the head lies, with any word as the head:
    the penalty against enumeration, the two gradient routes equal."""
    scores, batch = make_batch([5, 3, 4, 1])
    rates = brute_rates(scores, batch, DISTANCE_CONSTRAINTS, multiroot)
    assert ((rates > 1e-3) & (rates < 0.99)).all()  # every feature fires on some trees, not all
    objective = ready(GeneralizedExpectation(DISTANCE_CONSTRAINTS, penalty, gradient), multiroot)
    expected = brute_penalty(rates, DISTANCE_CONSTRAINTS, penalty)
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs), batch)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    loss.backward()
    reverse = ready(GeneralizedExpectation(DISTANCE_CONSTRAINTS, penalty, "reverse"), multiroot)
    reference = scores.arcs.clone().requires_grad_()
    reverse(Scores(reference), batch).backward()
    torch.testing.assert_close(arcs.grad, reference.grad, rtol=0, atol=1e-12)
    assert_directional_derivative(lambda a: reverse(Scores(a), batch), scores.arcs, arcs.grad)


# every label group of one arc class at once (the family's path), with targets
LABEL_FAMILY = [Constraint(c.parent, c.child, 0.3, label=c.label) for c in label_constraints(["NOUN", "ADJ"], ["nsubj", "obl"])]


@pytest.mark.parametrize("constraints", [LABEL_CONSTRAINTS, LABEL_FAMILY], ids=["rules", "family"])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_label_features_match_brute_force(penalty, multiroot, constraints):
    """Constraints on arc labels weight each arc by its label's probability: the penalty
    against enumeration; the label scores get a gradient, equal on both routes and to
    finite differences; a teacher's rates read its label scores too."""
    scores, batch = make_batch([5, 3, 4, 1])
    rates = brute_rates(scores, batch, constraints, multiroot)
    assert ((rates > 1e-3) & (rates < 0.99)).all()
    expected = brute_penalty(rates, constraints, penalty)
    grads = []
    for gradient in ("reverse", "t2"):
        objective = ready(GeneralizedExpectation(constraints, penalty, gradient), multiroot, labels=LABEL_VOCAB)
        arcs, labels = scores.arcs.clone().requires_grad_(), scores.labels.clone().requires_grad_()
        loss = objective(Scores(arcs, labels), batch)
        torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
        loss.backward()
        grads.append((arcs.grad, labels.grad))
    assert grads[0][1].abs().max() > 1e-3
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-12)
    assert_directional_derivative(lambda a: objective(Scores(scores.arcs, a), batch), scores.labels, grads[0][1])
    teacher = ready(GeneralizedExpectation(constraints, penalty, targets_from="teacher"), multiroot, labels=LABEL_VOCAB)
    assert teacher(scores, batch, teacher=scores) < 1e-12
    assert teacher(scores, batch, teacher=Scores(scores.arcs, scores.labels.flip(-1))) > 1e-4


def test_label_targets_from_gold_trees_and_errors():
    """Targets of constraints on labels count the gold labels of gold arcs (an ignored label
    counts for no label); the labels family gives each child tag its label distribution."""
    scores, batch = make_batch([5, 3, 4, 1])
    batch.labels[0, 1] = 0
    one_hot = torch.nn.functional.one_hot(batch.labels.clamp_min(0), 3).double()[:, None]  # (B, 1, N+1, 3)
    gold = Scores(_gold_scores(batch), (one_hot * 2e3 - 1e3).expand(-1, batch.labels.shape[1], -1, -1))
    nouns = label_constraints(["NOUN"]) + [Constraint("root", "NOUN")]  # every label of a NOUN's arc
    constraints = LABEL_CONSTRAINTS + nouns
    got = estimate_targets(constraints, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, 1, batch.labels, LABEL_VOCAB)
    torch.testing.assert_close(got, brute_rates(gold, batch, constraints), equal_nan=True)
    assert torch.isclose(got[-len(nouns):].sum(), torch.tensor(1.0, dtype=torch.float64))
    batch.labels[0, 1] = -100
    ignored = estimate_targets(constraints, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, 1, batch.labels, LABEL_VOCAB)
    assert (ignored <= got + 1e-12).all() and (ignored < got - 1e-3).any()
    with pytest.raises(ValueError, match="label vocabulary"):
        ready(GeneralizedExpectation(LABEL_CONSTRAINTS))
    with pytest.raises(ValueError, match="label scores"):
        ready(GeneralizedExpectation(LABEL_CONSTRAINTS), labels=LABEL_VOCAB)(Scores(scores.arcs), batch)
    with pytest.raises(ValueError, match="no labels"):
        estimate_targets(LABEL_CONSTRAINTS, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, 1, None, LABEL_VOCAB)


def test_distances_give_each_child_tag_its_head_side_and_distance():
    """With the root's share, the distance family's gold rates of a child tag sum to 1; a
    list may join families; a model with the gold trees meets targets estimated from them."""
    constraints = distance_constraints()
    assert len(set(constraints)) == len(constraints) == 17 * 2 * len(DISTANCE_BUCKETS)
    constraints += [Constraint("root", tag) for tag in UPOS_TAGS]
    _, batch = make_batch([5, 3, 4, 1])
    rates = _gold_distributions(constraints, batch)
    assert any(0 < rate < 1 for rate in rates[: len(constraints) - 17].tolist())
    objective = ready(GeneralizedExpectation(["tag_pairs", "distances"], targets_from="labeled", min_count=1))
    assert objective.constraints == tag_pair_constraints() + distance_constraints()
    objective.fit_targets([batch])
    assert objective(Scores(_gold_scores(batch)), batch) < 1e-12


def test_estimate_targets_counts_gold_trees():
    _, batch = make_batch(LENGTHS)
    expected = brute_rates(Scores(_gold_scores(batch)), batch, CONSTRAINTS)
    got = estimate_targets(CONSTRAINTS, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, min_count=1)
    torch.testing.assert_close(got, expected, equal_nan=True)


def _gold_scores(batch):
    """The gold trees as (almost) deterministic scores: enumeration puts all mass on them."""
    size = batch.upos.shape[1]
    return torch.full((len(batch.lengths), size, size), -1e3, dtype=torch.float64).scatter_(1, batch.heads[:, None, :], 0.0)


def _slice(batch, rows):
    return type(batch)(batch.lengths[rows], batch.upos[rows], batch.heads[rows])


def _gold_distributions(constraints, batch):
    """The constraints' rates in the gold trees of ``batch``, checked to sum to 1 over the
    constraints of each child tag present (NaN for the others)."""
    rates = estimate_targets(constraints, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, min_count=1)
    for tag in UPOS_TAGS:
        mine = torch.tensor([c.child == tag for c in constraints])
        present = (batch.upos == UPOS_VOCAB.index(tag)).any()
        assert torch.isclose(rates[mine].sum(), torch.tensor(1.0, dtype=torch.float64)) if present else rates[mine].isnan().all()
    return rates


def test_tag_pairs_give_each_child_tag_its_head_tag_distribution():
    constraints = tag_pair_constraints()
    assert len(set(constraints)) == len(constraints) == 17 + 17 * 17 * 2
    _, batch = make_batch([5, 3, 4, 1])
    _gold_distributions(constraints, batch)  # asserts each child tag's rates sum to 1
    # a model whose trees are the gold ones meets targets estimated from them exactly
    objective = ready(GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=1))
    objective.fit_targets([batch])
    assert objective(Scores(_gold_scores(batch)), batch) < 1e-12


def test_fit_targets_sums_counts_over_batches_and_leaves_out_rare_tags():
    _, batch = make_batch([5, 3, 4, 1])
    constraints = [Constraint(c.parent, c.child, None, c.direction) for c in CONSTRAINTS]
    objective = ready(GeneralizedExpectation(constraints, targets_from="labeled", min_count=1))
    targets = objective.fit_targets([_slice(batch, slice(0, 2)), _slice(batch, slice(2, 4))])
    expected = estimate_targets(constraints, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, min_count=1)
    torch.testing.assert_close(targets, expected, equal_nan=True)
    torch.testing.assert_close(objective.targets, expected.float(), equal_nan=True)

    counts = torch.tensor([(batch.upos == UPOS_VOCAB.index(c.child)).sum() for c in constraints])
    threshold = int(counts[counts > 0].min()) + 1  # the rarest present child tag falls below it
    objective.min_count = threshold
    targets = objective.fit_targets([batch])
    assert targets.isnan().tolist() == (counts < threshold).tolist()
    # constraints without a target are masked out: the same loss and gradient as leaving them out
    scores = make_batch([5, 3, 4, 1], seed=3)[0]
    kept = [Constraint(c.parent, c.child, t, c.direction) for c, t in zip(constraints, targets.tolist()) if t == t]
    reference = ready(GeneralizedExpectation(kept))
    reference.targets = objective.targets[targets.isfinite()]
    results = []
    for ge in (objective, reference):
        arcs = scores.arcs.clone().requires_grad_()
        loss = ge(Scores(arcs), batch)
        loss.backward()
        results.append((loss, arcs.grad))
    assert results[0][1].isfinite().all() and results[0][1].abs().max() > 0
    torch.testing.assert_close(results[0], results[1])


def test_targets_must_exist_before_training():
    scores, batch = make_batch(LENGTHS)
    with pytest.raises(ValueError, match="targets_from='labeled'"):
        GeneralizedExpectation("tag_pairs")
    with pytest.raises(ValueError, match="targets_from"):
        GeneralizedExpectation(CONSTRAINTS, targets_from="gold")
    objective = ready(GeneralizedExpectation("tag_pairs", targets_from="labeled"))
    with pytest.raises(RuntimeError, match="fit_targets"):
        objective(scores, batch)
    with pytest.raises(ValueError, match="or more words"):
        objective.fit_targets([batch])  # min_count 10: no tag is frequent enough here


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


def test_constraints_from_dicts_and_the_setup_hook():
    scores, batch = make_batch(LENGTHS)
    objective = GeneralizedExpectation([{"parent": "root", "child": "VERB", "target": 0.6}])
    with pytest.raises(RuntimeError, match="setup"):
        objective(scores, batch)
    ready(objective)
    torch.testing.assert_close(objective(scores, batch), ready(GeneralizedExpectation(CONSTRAINTS[:1]))(scores, batch))
    assert GeneralizedExpectation(CONSTRAINTS).min_count == MIN_COUNT


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"parent": "", "child": "NOUN", "target": 0.5}, "parent"),
        ({"parent": "VERB", "child": "root", "target": 0.5}, "child"),
        ({"parent": "VERB", "child": "NOUN", "target": 1.5}, "target"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "direction": "up"}, "direction"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "per": "word"}, "per must be"),
        ({"parent": "root", "child": "NOUN", "target": 0.5, "per": "head"}, "root constraint"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "per": "arc"}, "give a direction or a distance"),
        ({"parent": "VERB", "child": "NOUN", "target": 1.5, "per": "arc", "direction": "left"}, "target"),
        ({"parent": "VERB", "child": "NOUN", "target": -0.1, "per": "head"}, "target"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "tolerance": -0.1}, "tolerance"),
        ({"parent": "root", "child": "NOUN", "target": 0.5, "distance": 1}, "root arc has no distance"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "distance": 0}, "distance"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "distance": [3, 2]}, "distance"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "distance": [2]}, "distance"),
        ({"parent": "VERB", "child": "NOUN", "target": 0.5, "label": "nsubjj"}, "UD relation"),
        ({"parent": "root", "child": "NOUN", "target": 0.5, "label": "root"}, "root arcs are labeled root"),
    ],
)
def test_invalid_constraints(fields, message):
    with pytest.raises(ValueError, match=message):
        Constraint(**fields)


def test_untagged_batches_and_vocabularies_are_rejected():
    scores, batch = make_batch(LENGTHS)
    with pytest.raises(ValueError, match=r"\['ADJ', 'DET', 'PRON'\] of the constraints are not in the UPOS vocabulary"):
        GeneralizedExpectation(CONSTRAINTS).setup(ObjectiveContext(stage="fit", tags=["<pad>", "<unk>", "NOUN", "VERB"]))
    with pytest.raises(ValueError, match=r"\['VRB'\]"):  # a typo in a rules file
        ready(GeneralizedExpectation([Constraint("VRB", "NOUN", 0.5)]))
    objective = ready(GeneralizedExpectation(CONSTRAINTS))
    batch.upos = batch.upos.clamp(max=1)  # only <pad> and <unk>
    with pytest.raises(ValueError, match="tagged unlabeled text"):
        objective(scores, batch)
    batch.upos = None
    with pytest.raises(ValueError, match="tagged unlabeled text"):
        objective(scores, batch)


@pytest.mark.parametrize(
    "option, value",
    [("penalty", "l2"), ("gradient", "forward"), ("targets_from", "oracle"), ("weighting", "inverse"),
     ("reduction", "max")],
)
def test_invalid_options(option, value):
    with pytest.raises(ValueError, match=f"{option} must be"):
        GeneralizedExpectation(CONSTRAINTS, **{option: value})


def soft_rates(scores, batch, probs, constraints, multiroot=False):
    """Expected rates with tag probabilities ``probs`` ``(B, N+1, T)`` by enumeration: a word
    pair (h, m) fires constraint k with weight P[h, parent] P[m, child] on the right side."""
    expected = torch.zeros(len(constraints), dtype=torch.float64)
    counts = torch.zeros(len(constraints), dtype=torch.float64)
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        for k, c in enumerate(constraints):
            child = probs[b, :, UPOS_VOCAB.index(c.child)].double()
            parent = torch.zeros(n + 1, dtype=torch.float64)
            if c.parent == "root":
                parent[0] = 1.0
            else:  # the root has no tag
                parent[1:] = probs[b, 1 : n + 1, UPOS_VOCAB.index(c.parent)].double()
            counts[k] += child[1 : n + 1].sum()
            for tree, p in zip(heads, log_p.exp()):
                for m in range(1, n + 1):
                    h = int(tree[m])
                    if c.direction in (None, "left" if m < h else "right"):
                        expected[k] += p * parent[h] * child[m]
    return expected / counts


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_soft_tags(gradient, multiroot):
    """Tag probabilities: one-hot ones give the same loss and gradient as tag ids; soft ones
    give the rates of expected counts (enumeration), and no gradient reaches them."""
    scores, batch = make_batch(LENGTHS)
    objective = ready(GeneralizedExpectation(CONSTRAINTS, gradient=gradient), multiroot)
    one_hot = torch.nn.functional.one_hot(batch.upos, len(UPOS_VOCAB)).double()
    results = []
    for upos in (batch.upos, one_hot):
        arcs = scores.arcs.clone().requires_grad_()
        loss = objective(Scores(arcs), type(batch)(batch.lengths, upos))
        loss.backward()
        results.append((loss, arcs.grad))
    torch.testing.assert_close(results[0], results[1], rtol=1e-12, atol=1e-12)

    generator = torch.Generator().manual_seed(4)
    soft = (one_hot * 3 + torch.rand(one_hot.shape, generator=generator, dtype=torch.float64)).softmax(-1)
    soft = soft.masked_fill(torch.rand(soft.shape[:2] + (1,), generator=generator) < 0.2, 0.0)  # some untagged words
    soft.requires_grad_()
    rates = soft_rates(scores, batch, soft.detach(), CONSTRAINTS, multiroot)
    expected = brute_penalty(rates, CONSTRAINTS, "squared")
    loss = objective(scores, type(batch)(batch.lengths, soft))
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    assert not loss.requires_grad  # the tags are observations (scores need no grad here)
    with pytest.raises(ValueError, match="soft UPOS"):
        objective(scores, type(batch)(batch.lengths, soft[..., :5]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_trained_soft_tags_get_the_gradient_of_the_enumerated_penalty(gradient, multiroot, dtype):
    """train_tags: the same loss as observed tags, and the tag probabilities get its gradient:
    a finite difference of the penalty of enumerated rates, both routes, arcs' gradient unchanged."""
    scores, batch = make_batch(LENGTHS)
    scores = Scores(scores.arcs.to(dtype))
    one_hot = torch.nn.functional.one_hot(batch.upos, len(UPOS_VOCAB)).double()
    generator = torch.Generator().manual_seed(5)
    soft = (one_hot * 3 + torch.rand(one_hot.shape, generator=generator, dtype=torch.float64)).softmax(-1)
    soft = soft.masked_fill(torch.rand(soft.shape[:2] + (1,), generator=generator) < 0.2, 0.0)  # some untagged words
    results = {}
    for train_tags in (False, True):
        objective = ready(GeneralizedExpectation(CONSTRAINTS, gradient=gradient, train_tags=train_tags), multiroot)
        arcs, tags = scores.arcs.clone().requires_grad_(), soft.to(dtype).requires_grad_()
        loss = objective(Scores(arcs), type(batch)(batch.lengths, tags))
        loss.backward()
        results[train_tags] = loss, arcs.grad, tags.grad
    (observed, observed_arcs, no_grad), (loss, arcs_grad, tags_grad) = results[False], results[True]
    assert no_grad is None and tags_grad is not None and tags_grad.abs().sum() > 0
    tolerance = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-6}
    torch.testing.assert_close((loss, arcs_grad), (observed, observed_arcs), **tolerance)

    def penalty(probs):
        return brute_penalty(soft_rates(scores, batch, probs, CONSTRAINTS, multiroot), CONSTRAINTS, "squared")

    torch.testing.assert_close(loss.double(), penalty(soft), **tolerance)
    if dtype == torch.float64:
        assert_directional_derivative(penalty, soft, tags_grad)


@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_one_sided_constraints(gradient):
    """Zero loss and gradient while every rate reaches its target; otherwise the gradient
    matches finite differences, and only the violated constraints pull."""
    scores, batch = make_batch([4, 3, 2])
    rates = brute_rates(scores, batch, CONSTRAINTS).nan_to_num(0.5)
    met = ready(GeneralizedExpectation(CONSTRAINTS, "one_sided", gradient))
    met.targets = (rates - 0.05).clamp_min(0.0)
    arcs = scores.arcs.clone().requires_grad_()
    loss = met(Scores(arcs), batch)
    loss.backward()
    assert loss == 0 and (arcs.grad == 0).all()
    violated = ready(GeneralizedExpectation(CONSTRAINTS, "one_sided", gradient))
    violated.targets = torch.where(torch.arange(len(rates)) % 2 == 0, rates + 0.1, rates - 0.1).clamp(0.0, 1.0)
    assert torch.autograd.gradcheck(lambda a: violated(Scores(a), batch), (scores.arcs.clone().requires_grad_(),))


def brute_banded_penalty(rates, counts, targets, penalty, z):
    """Squared or one-sided penalty of the gaps shrunk by z binomial standard errors."""
    total = 0.0
    for p, n, t in zip(rates.tolist(), counts, targets.tolist()):
        if math.isnan(p):
            continue
        gap = p - t
        shrunk = math.copysign(max(abs(gap) - z * math.sqrt(t * (1 - t) / n), 0.0), gap)
        total += shrunk**2 if penalty == "squared" else max(-shrunk, 0.0) ** 2
    return torch.tensor(total, dtype=torch.float64)


@pytest.mark.parametrize("gradient", ["reverse", "t2"])
@pytest.mark.parametrize("penalty", ["squared", "one_sided"])
def test_tolerance_band(penalty, gradient):
    """With tolerance z a rate within z standard errors sqrt(t (1 - t) / n) of its target costs
    nothing (loss and gradient 0); outside, the gap shrinks by the band (enumeration) and the
    gradient matches finite differences."""
    scores, batch = make_batch(LENGTHS)
    rates = brute_rates(scores, batch, CONSTRAINTS)
    counts = child_counts(batch, CONSTRAINTS)
    z = 0.5
    bands = [z * math.sqrt(r * (1 - r) / max(n, 1)) for r, n in zip(rates.nan_to_num(0.5).tolist(), counts)]
    objective = ready(GeneralizedExpectation(CONSTRAINTS, penalty, gradient, tolerance=z))
    targets = torch.tensor([0.6, 0.7, 0.9, 0.2, 0.1, 0.5], dtype=torch.float64)
    objective.targets = targets
    expected = brute_banded_penalty(rates, counts, targets, penalty, z)
    assert 0 < expected < brute_banded_penalty(rates, counts, targets, penalty, 0.0)  # the band matters
    torch.testing.assert_close(objective(scores, batch), expected, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a: objective(Scores(a), batch), (scores.arcs.clone().requires_grad_(),))

    # targets half a band from the rates, towards 0.5: the band at the target is wider still
    rates = rates.nan_to_num(0.5)
    inside = rates + 0.5 * torch.tensor(bands) * (0.5 - rates).sign()
    assert (inside > rates).any() and (inside < rates).any()  # on both sides
    objective.targets = inside
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs), batch)
    loss.backward()
    assert loss == 0 and (arcs.grad == 0).all()


def test_tolerance_needs_a_penalty_with_a_band():
    with pytest.raises(ValueError, match="tolerance applies"):
        GeneralizedExpectation(CONSTRAINTS, "kl", tolerance=1.0)
    with pytest.raises(ValueError, match="tolerance must be"):
        GeneralizedExpectation(CONSTRAINTS, tolerance=-1.0)
    with pytest.raises(ValueError, match="tolerance must be"):
        OneSided(-1.0)
    with pytest.raises(ValueError, match="carries its own"):
        GeneralizedExpectation(CONSTRAINTS, Squared(), tolerance=1.0)


class Halved(Penalty):
    """A penalty of one's own: half the squared gap."""

    def __call__(self, rates, targets, counts, margins):
        return (rates - targets) ** 2 / 2


@pytest.mark.parametrize(
    "names, objects",
    [
        ({"penalty": "squared", "tolerance": 0.5}, {"penalty": Squared(0.5)}),
        ({"penalty": "one_sided", "tolerance": 0.5}, {"penalty": OneSided(0.5)}),
        ({"penalty": "kl", "targets_from": "teacher"}, {"penalty": BernoulliKL(), "targets_from": TeacherTargets()}),
    ],
)
def test_penalty_and_target_source_objects_are_their_names(names, objects):
    """A config's short names and the objects they map to give the same loss; the objects
    are what the loss calls, the names what was configured."""
    scores, batch = make_batch(LENGTHS)
    teacher = make_batch(LENGTHS, seed=1)[0]
    named, built = (ready(GeneralizedExpectation(CONSTRAINTS, **options)) for options in (names, objects))
    assert named.penalize == built.penalize and type(named.source) is type(built.source)
    assert named.penalty == names["penalty"]
    assert torch.equal(named(scores, batch, teacher), built(scores, batch, teacher))


def test_a_penalty_and_a_target_source_of_ones_own():
    """Any Penalty and TargetSource plug in: a halved squared penalty is half the squared one;
    a source that reads the constraints' targets doubled gives those targets."""

    class Doubled(TargetSource):
        def initial(self, constraints):
            return [min(2 * c.target, 1.0) for c in constraints]

    scores, batch = make_batch(LENGTHS)
    squared = ready(GeneralizedExpectation(CONSTRAINTS))(scores, batch)
    torch.testing.assert_close(ready(GeneralizedExpectation(CONSTRAINTS, Halved()))(scores, batch), squared / 2)
    doubled = [Constraint(c.parent, c.child, min(2 * c.target, 1.0), c.direction) for c in CONSTRAINTS]
    torch.testing.assert_close(ready(GeneralizedExpectation(CONSTRAINTS, targets_from=Doubled()))(scores, batch),
                               ready(GeneralizedExpectation(doubled))(scores, batch))
    assert isinstance(GeneralizedExpectation(CONSTRAINTS, targets_from="labeled").source, LabeledTargets)


def brute_coverage(scores, batch, constraints, multiroot=False):
    """E[#words whose arc fires some constraint] / #words over the batch, by enumeration."""
    covered, words = 0.0, 0
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        tags = [UPOS_VOCAB[i] for i in batch.upos[b].tolist()]
        per_tree = torch.tensor([sum(any(fires(c, tags, int(t[m]), m) for c in constraints) for m in range(1, n + 1))
                                 for t in heads], dtype=torch.float64)
        covered += float((log_p.exp() * per_tree).sum())
        words += n
    return covered / words


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_coverage_of_the_rule_set_against_enumeration(gradient, multiroot):
    """RuleCoverage: the rules act as one set (Naseem et al. 2010); the squared penalty
    reads the share of covered words, the one-sided one only while it is below the
    threshold, with the gradient of finite differences; both routes agree."""
    scores, batch = make_batch(LENGTHS)
    rules = [Constraint(c.parent, c.child, direction=c.direction) for c in CONSTRAINTS]  # no targets needed
    share = brute_coverage(scores, batch, rules, multiroot)
    assert 0.05 < share < 0.95
    squared = ready(RuleCoverage(rules, 0.8, "squared", gradient), multiroot)
    expected = (0.8 - share) ** 2
    torch.testing.assert_close(squared(scores, batch), torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-12)
    met = ready(RuleCoverage(rules, share - 0.01, "one_sided", gradient), multiroot)
    arcs = scores.arcs.clone().requires_grad_()
    loss = met(Scores(arcs), batch)
    loss.backward()
    assert loss == 0 and (arcs.grad == 0).all()
    below = ready(RuleCoverage(rules, min(share + 0.2, 1.0), "one_sided", gradient), multiroot)
    assert torch.autograd.gradcheck(lambda a: below(Scores(a), batch), (scores.arcs.clone().requires_grad_(),))


def test_coverage_needs_rules_that_do_not_overlap():
    rules = [Constraint("VERB", "NOUN"), Constraint("VERB", "NOUN", direction="left")]
    with pytest.raises(ValueError, match="overlap"):
        RuleCoverage(rules, 0.5)
    near, far = Constraint("any", "NOUN", distance=(1, 2)), Constraint("any", "NOUN", distance=(3, None))
    RuleCoverage([near, far, Constraint("root", "NOUN")], 0.5)  # apart: distances, the root
    RuleCoverage([Constraint("any", "NOUN", label="nsubj"), Constraint("any", "NOUN", label="obl")], 0.5)
    with pytest.raises(ValueError, match="overlap"):  # obl covers obl:tmod
        RuleCoverage([Constraint("any", "NOUN", label="obl:tmod"), Constraint("VERB", "NOUN", label="obl")], 0.5)
    for other in (Constraint("VERB", "NOUN", direction="left"), Constraint("any", "NOUN", distance=2)):
        with pytest.raises(ValueError, match="overlap"):
            RuleCoverage([near, other], 0.5)
    with pytest.raises(ValueError, match="coverage"):
        RuleCoverage(rules[:1], 1.5)
    loose = RuleCoverage(rules[:1], 0.5)  # no targets, none to estimate
    loose.setup(ObjectiveContext(stage="fit", multiroot=False, tags=UPOS_VOCAB, labeled_batches=None))
    assert not loose.needs_teacher


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("gradient", ["reverse", "t2"])
@pytest.mark.parametrize("penalty", ["squared", "kl"])
def test_teacher_targets_are_the_teachers_rates_on_the_batch(penalty, gradient, multiroot):
    """``targets_from="teacher"``: the targets are the teacher's expected rates on the same
    batch and tags, by enumeration; equal scores give 0 and no gradient."""
    student, batch = make_batch(LENGTHS)
    teacher = make_batch(LENGTHS, seed=1)[0]
    objective = ready(GeneralizedExpectation(CONSTRAINTS, penalty, gradient, targets_from="teacher"), multiroot)
    assert objective.needs_teacher and not GeneralizedExpectation(CONSTRAINTS).needs_teacher
    rates, targets = brute_rates(student, batch, CONSTRAINTS, multiroot), brute_rates(teacher, batch, CONSTRAINTS, multiroot)
    expected = 0.0
    for p, t in zip(rates.tolist(), targets.tolist()):
        if math.isnan(p):
            continue
        if penalty == "squared":
            expected += (p - t) ** 2
        else:
            expected += t * math.log(t / p) + (1 - t) * math.log((1 - t) / (1 - p))
    torch.testing.assert_close(objective(student, batch, teacher), torch.tensor(expected, dtype=torch.float64),
                               rtol=1e-10, atol=1e-12)
    arcs = student.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs), batch, Scores(student.arcs.clone()))
    loss.backward()
    assert loss.abs() < 1e-12 and arcs.grad.abs().max() < 1e-12
    with pytest.raises(ValueError, match="teacher"):
        objective(student, batch)


# the rates of ESR's statistics: per head (valency: its target may exceed 1), per arc (a side or distance
# given the parent, child and label: a ratio of expectations), a child "any" (every word),
# each constraint with a margin of its own
PER_CONSTRAINTS = [
    Constraint("NOUN", "ADJ", 0.9, direction="left", per="arc", tolerance=0.05),
    Constraint("any", "NOUN", 0.3, direction="right", distance=(2, None), per="arc"),
    Constraint("VERB", "any", 1.4, per="head", tolerance=0.1),
    Constraint("any", "any", 0.6, direction="left", per="child"),
    Constraint("VERB", "any", 0.2, direction="right", distance=1, per="arc"),
    Constraint("NOUN", "DET", 0.2, per="head"),
    Constraint("root", "any", 0.2),
]
PER_LABELED = [Constraint("any", "NOUN", 0.5, direction="left", label="obl", per="arc", tolerance=0.02),
               Constraint("VERB", "any", 0.3, label="nsubj", per="head")]


def expected_arcs(scores, batch, constraint, multiroot):
    """E[#arcs firing ``constraint``] over the batch, by enumeration."""
    total = 0.0
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        tags = [UPOS_VOCAB[i] for i in batch.upos[b].tolist()]
        per_tree = torch.tensor([sum(fires(constraint, tags, int(t[m]), m) * label_weight(constraint, scores, b, int(t[m]), m)
                                     for m in range(1, n + 1)) for t in heads], dtype=torch.float64)
        total += float((log_p.exp() * per_tree).sum())
    return total


def brute_per_rates(scores, batch, constraints, multiroot):
    """Each rate as its ``per`` says, by enumeration: over the child's or the head's words, or
    over the expected arcs of the same parent, child and label (both sides, any distance)."""
    out = []
    for c in constraints:
        words = [UPOS_VOCAB[i] for b, n in enumerate(batch.lengths.tolist()) for i in batch.upos[b, 1 : n + 1].tolist()]
        if c.per == "arc":
            over = expected_arcs(scores, batch, Constraint(c.parent, c.child, label=c.label), multiroot)
        else:
            tag = c.child if c.per == "child" else c.parent
            over = len(words) if tag == "any" else words.count(tag)
        out.append(expected_arcs(scores, batch, c, multiroot) / over)
    return out


def brute_margin_penalty(rates, constraints, penalty):
    total = 0.0
    for p, c in zip(rates, constraints):
        if math.isnan(p):  # not measured on this batch
            continue
        t = torch.tensor(c.target, dtype=torch.float32).item()
        m = torch.tensor(c.tolerance or 0.0, dtype=torch.float32).item()
        gap = max(abs(p - t) - m, 0.0)
        total += gap ** 2 if penalty == "squared" else gap
    return torch.tensor(total, dtype=torch.float64)


@pytest.mark.parametrize("constraints", [PER_CONSTRAINTS, PER_LABELED], ids=["tags", "labels"])
@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("penalty", ["squared", "l1"])
def test_rates_per_head_per_arc_and_any_child_match_brute_force(penalty, multiroot, constraints):
    """Rates per head and per arc, children of any tag and each constraint's own margin: the
    penalty against enumeration (float64), both gradient routes equal, and equal to finite
    differences (the denominators of the rates per arc are differentiated too)."""
    scores, batch = make_batch([5, 3, 4, 1])
    rates = brute_per_rates(scores, batch, constraints, multiroot)
    assert all(0 < r < 1 for r in rates)  # every statistic is measured (a target of 1.4 per head is far from its rate)
    expected = brute_margin_penalty(rates, constraints, penalty)
    assert expected > 1e-3  # some rate lies outside its band
    grads = []
    for gradient in ("reverse", "t2"):
        objective = ready(GeneralizedExpectation(constraints, penalty, gradient, min_arcs=0), multiroot,
                          labels=LABEL_VOCAB)  # small graphs: every rate, however few its arcs
        arcs, labels = scores.arcs.clone().requires_grad_(), scores.labels.clone().requires_grad_()
        loss = objective(Scores(arcs, labels), batch)
        torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
        loss.backward()
        grads.append((arcs.grad, labels.grad))
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-12)
    assert grads[0][0].abs().max() > 1e-3
    assert_directional_derivative(lambda a: objective(Scores(a, scores.labels), batch), scores.arcs, grads[0][0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rates_per_arc_in_both_precisions_and_padding(dtype):
    """The same statistics with float32 or float64 scores, and with a padded batch (a sentence
    of one word among longer ones), agree with enumeration."""
    scores, batch = make_batch([5, 1, 4])
    rates = brute_per_rates(scores, batch, PER_CONSTRAINTS, multiroot=False)
    assert all(0 < r < 1 for r in rates)
    objective = ready(GeneralizedExpectation(PER_CONSTRAINTS, "l1", min_arcs=0), labels=LABEL_VOCAB)
    loss = objective(Scores(scores.arcs.to(dtype), scores.labels.to(dtype)), batch)
    assert loss.dtype == dtype
    tolerance = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(loss.double(), brute_margin_penalty(rates, PER_CONSTRAINTS, "l1"), rtol=tolerance, atol=tolerance)


def test_gold_rates_per_arc_and_per_head():
    """Targets counted on gold trees: a side among the arcs of a tag pair, dependents per head."""
    scores, batch = make_batch([5, 3, 4, 1])
    gold = _gold_scores(batch)
    constraints = [Constraint("any", "NOUN", direction="right", per="arc"), Constraint("VERB", "any", per="head"),
                   Constraint("any", "any", direction="left")]
    counted = estimate_targets(constraints, batch.heads, batch.upos, batch.lengths, UPOS_VOCAB, min_count=1)
    torch.testing.assert_close(counted, torch.tensor(brute_per_rates(Scores(gold), batch, constraints, False), dtype=torch.float64))


def test_a_rate_per_arc_is_left_out_of_a_batch_that_expects_fewer_than_one_such_arc():
    scores, batch = make_batch([5, 3, 4, 1])
    rare = Constraint("NOUN", "DET", 0.9, direction="left", per="arc")
    expected = expected_arcs(scores, batch, Constraint("NOUN", "DET"), False)
    assert 0 < expected < 1
    arcs = scores.arcs.clone().requires_grad_()
    assert ready(GeneralizedExpectation([rare], "l1"))(Scores(arcs), batch) == 0  # the default: 1 arc at least
    assert ready(GeneralizedExpectation([rare], "l1", min_arcs=expected / 2))(Scores(arcs), batch) > 0


@pytest.mark.parametrize("gradient", ["reverse", "t2"])
def test_a_tolerance_band_at_targets_of_0_and_1_keeps_the_gradient_finite(gradient):
    """A whole treebank's rates include exact 0s and 1s (a side never or always seen), where the
    band of z standard errors is 0 and its square root has no slope: the gradient through the
    rates' differentiable denominators (per arc) stays finite and is the penalty's own."""
    scores, batch = make_batch([5, 3, 4, 1])
    objective = ready(GeneralizedExpectation(PER_CONSTRAINTS, "squared", gradient, tolerance=1.0, min_arcs=0),
                      labels=LABEL_VOCAB)
    objective.targets = torch.tensor([1.0, 0.0, 1.4, 1.0, 0.0, 0.2, 0.2], dtype=torch.float64)
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs, scores.labels), batch)
    loss.backward()
    assert loss > 1e-3 and arcs.grad.isfinite().all() and arcs.grad.abs().max() > 1e-4
    assert_directional_derivative(lambda a: objective(Scores(a, scores.labels), batch), scores.arcs, arcs.grad)
