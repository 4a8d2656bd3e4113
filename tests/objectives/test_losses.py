"""Training objectives against brute-force enumeration of trees; gradients, autocast, optimisation."""

import math

import pytest
import torch

from objectives import baselines as bl
from objectives.conventions import UPOS_TAGS, ConfigurationError
from objectives.distribution import TreeCRF
from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import Constraint, GeneralizedExpectation
from objectives.kl import Distillation
from objectives.likelihood import Likelihood
from objectives.objective import Scores
from objectives.risk import Risk
from objectives.sampled import SampledSelfTraining
from objectives.schedule import Schedule
from objectives.tagging import TagLikelihood

from .oracle import UPOS_VOCAB, make_batch, ready, sentences

TREE_SETS = [False, True]
LENGTHS = [4, 2, 3, 1]
CLOSE = dict(rtol=1e-10, atol=1e-10)
CONSTRAINTS = [
    Constraint("root", "VERB", 0.6),
    Constraint("VERB", "NOUN", 0.7, direction="left"),
    Constraint("NOUN", "ADJ", 0.9, direction="right"),
    Constraint("NOUN", "DET", 0.8),
]
OBJECTIVES = {
    "likelihood": Likelihood,
    "likelihood-labeled-mtt": lambda: Likelihood(labeled_mtt=True),
    "risk": Risk,
    "risk-labeled-annealed": lambda: Risk(labeled=True, temperature=0.5),
    "entropy": EntropyRegularizer,
    "renyi": lambda: EntropyRegularizer(alpha=2.0),
    "kl": lambda: Distillation(labeled=True),
    "kl-reverse": lambda: Distillation(reverse=True),
    "ge": lambda: ready(GeneralizedExpectation(CONSTRAINTS, penalty="kl")),
    "ge-t2": lambda: ready(GeneralizedExpectation(CONSTRAINTS, gradient="t2")),
}


def label_log_probs(scores, batch, b, n):
    """log softmax of the labels of sentence b's gold arcs, at the gold labels: (n,) (nan if ignored)."""
    words = torch.arange(1, n + 1)
    logits = scores.labels[b, batch.heads[b, words], words].double().log_softmax(-1)
    gold = batch.labels[b, words]
    return torch.where(gold >= 0, logits.gather(1, gold.clamp_min(0)[:, None]).squeeze(1), math.nan)


# --------------------------------------------------------------------------- likelihood


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 3])
def test_likelihood_matches_brute_force(num_labels, multiroot):
    scores, batch = make_batch(LENGTHS, num_labels)
    total = 0.0
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        total -= log_p[(heads == batch.heads[b, : n + 1]).all(1)].sum()
        if num_labels:
            total -= 0.5 * label_log_probs(scores, batch, b, n).nansum()
    loss = ready(Likelihood(label_weight=0.5), multiroot)(scores, batch)
    torch.testing.assert_close(loss, total / sum(LENGTHS), **CLOSE)


def test_likelihood_is_tree_crf_log_prob_plus_label_cross_entropy():
    scores, batch = make_batch(LENGTHS)
    tree = -TreeCRF(scores.arcs, batch.lengths).log_prob(batch.heads).sum()
    logits = scores.labels[torch.arange(4)[:, None], batch.heads, torch.arange(5)]  # (B, N+1, L)
    labels = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), reduction="sum")
    torch.testing.assert_close(Likelihood()(scores, batch), (tree + labels) / sum(LENGTHS), **CLOSE)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_labeled_mtt_is_the_nll_of_the_labeled_tree(multiroot):
    scores, batch = make_batch([3, 2], num_labels=2)
    labeled = scores.arcs[..., None] + scores.labels  # labeled arc log-weights
    objective = ready(Likelihood(labeled_mtt=True), multiroot)
    # word 1 of sentence 0 has an ignored label: the labeled tree's probability sums it out
    choices = [batch.labels.clone() for _ in range(2)]
    for label, choice in enumerate(choices):
        choice[0, 1] = label
    log_p = torch.stack([bl.brute_log_prob(labeled, batch.lengths, batch.heads, c, multiroot) for c in choices])
    expected = -(log_p[:, 0].logsumexp(0) + log_p[0, 1]) / 5
    torch.testing.assert_close(objective(scores, batch), expected, **CLOSE)
    batch.labels = choices[1]
    expected = -log_p[1].sum() / 5
    torch.testing.assert_close(objective(scores, batch), expected, **CLOSE)


# --------------------------------------------------------------------------- risk


def brute_risk(scores, batch, labeled, multiroot):
    """Mean over sentences of 1 - E[(labeled) attachment score], and of the entropy per word."""
    risks, entropies = [], []
    for b, n, heads, log_p in sentences(scores, batch, multiroot):
        credit = label_log_probs(scores, batch, b, n).exp().nan_to_num(0.0) if labeled else torch.ones(n)
        correct = ((heads[:, 1:] == batch.heads[b, 1 : n + 1]) * credit).sum(1)
        risks.append(1 - (log_p.exp() * correct).sum() / n)
        entropies.append(-(log_p.exp() * log_p).sum() / n)
    return torch.stack(risks).mean(), torch.stack(entropies).mean()


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("labeled", [False, True])
def test_risk_matches_brute_force(labeled, multiroot):
    scores, batch = make_batch(LENGTHS)
    risk, _ = brute_risk(scores, batch, labeled, multiroot)
    torch.testing.assert_close(ready(Risk(labeled), multiroot)(scores, batch), risk, **CLOSE)


def test_annealed_risk_is_risk_minus_temperature_times_entropy(monkeypatch):
    scores, batch = make_batch(LENGTHS)
    risk, entropy = brute_risk(scores, batch, labeled=False, multiroot=False)
    objective = Risk(temperature=Schedule(2.0, decay="linear", final=0.0, until=10))
    assert [objective.temperature_at(step) for step in (0, 5, 10, 20)] == [2.0, 1.0, 0.0, 0.0]
    torch.testing.assert_close(objective(scores, batch, step=3), risk - 1.4 * entropy, **CLOSE)
    to_the_end = ready(Risk(temperature=Schedule(2.0, decay="linear")), total_steps=20)  # the run's length from setup
    assert to_the_end.temperature_at(5) == 1.5
    monkeypatch.setattr(TreeCRF, "entropy", lambda self: pytest.fail("entropy computed at T = 0"))
    torch.testing.assert_close(objective(scores, batch, step=10), risk, **CLOSE)  # T = 0: no entropy
    assert Risk(temperature=0.3).temperature_at(1000) == 0.3


def test_risk_rejects_bad_schedules():
    with pytest.raises(ValueError, match="non-negative"):
        Risk(temperature=-1.0)
    with pytest.raises(ValueError, match="non-negative"):
        Risk(temperature=Schedule(1.0, decay="linear", final=-0.5, until=10))


# --------------------------------------------------------------------------- tagging


def test_tag_likelihood_is_the_mean_nll_of_the_tagged_words():
    scores, batch = make_batch(LENGTHS)
    tags = torch.randn(*batch.upos.shape, len(UPOS_VOCAB), dtype=torch.float64, requires_grad=True)
    upos = batch.upos.clone()
    upos[0, 1] = UPOS_VOCAB.index("<unk>")  # an untagged word ("_") adds nothing
    objective = ready(TagLikelihood())
    value = objective(Scores(scores.arcs, tags=tags), type(batch)(batch.lengths, upos))
    words = [(b, i) for b, n in enumerate(LENGTHS) for i in range(1, n + 1) if UPOS_VOCAB[upos[b, i]] in UPOS_TAGS]
    expected = -sum(tags[b, i].log_softmax(-1)[upos[b, i]] for b, i in words) / len(words)
    torch.testing.assert_close(value, expected)
    (grad,) = torch.autograd.grad(value, tags)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, tags)[0])
    untagged = type(batch)(batch.lengths, torch.full_like(upos, UPOS_VOCAB.index("<unk>")))
    assert objective(Scores(scores.arcs, tags=tags), untagged).item() == 0.0  # 0, not NaN
    with pytest.raises(ValueError, match="tag scores"):
        objective(scores, batch)


# --------------------------------------------------------------------------- entropy


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("alpha", [None, 0.5, 2.0])
def test_entropy_matches_brute_force(alpha, multiroot):
    scores, batch = make_batch(LENGTHS, num_labels=None)
    total = 0.0
    for *_, log_p in sentences(scores, batch, multiroot):
        total += -(log_p.exp() * log_p).sum() if alpha is None else (alpha * log_p).logsumexp(0) / (1 - alpha)
    loss = ready(EntropyRegularizer(alpha), multiroot)(scores, batch)
    torch.testing.assert_close(loss, total / sum(LENGTHS), **CLOSE)


# --------------------------------------------------------------------------- distillation


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("reverse", [False, True])
def test_distillation_matches_brute_force(reverse, multiroot):
    student, batch = make_batch(LENGTHS, num_labels=None)
    teacher, _ = make_batch(LENGTHS, num_labels=None, seed=1)
    total = 0.0
    pairs = zip(sentences(student, batch, multiroot), sentences(teacher, batch, multiroot))
    for (*_, log_s), (*_, log_t) in pairs:
        p, q = (log_s, log_t) if reverse else (log_t, log_s)
        total += (p.exp() * (p - q)).sum()
    loss = ready(Distillation(reverse), multiroot)(student, batch, teacher)
    torch.testing.assert_close(loss, total / sum(LENGTHS), **CLOSE)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_distillation_tempers_the_teacher(temperature, multiroot):
    """KL(p_T || q) with p_T(d) = p(d)^(1/T) / sum_d' p(d')^(1/T), every tree enumerated."""
    student, batch = make_batch(LENGTHS, num_labels=None)
    teacher, _ = make_batch(LENGTHS, num_labels=None, seed=1)
    total = 0.0
    for (*_, log_s), (*_, log_t) in zip(sentences(student, batch, multiroot), sentences(teacher, batch, multiroot)):
        tempered = (log_t / temperature).log_softmax(0)
        total += (tempered.exp() * (tempered - log_s)).sum()
    loss = ready(Distillation(temperature=temperature), multiroot)(student, batch, teacher)
    torch.testing.assert_close(loss, total / sum(LENGTHS), **CLOSE)
    assert not torch.isclose(loss, ready(Distillation(), multiroot)(student, batch, teacher))


def test_labeled_distillation_tempers_labeled_trees():
    student, batch = make_batch([3, 2], num_labels=2)
    teacher, _ = make_batch([3, 2], num_labels=2, seed=1)
    labeled = [s.arcs[..., None] + s.labels.log_softmax(-1) for s in (teacher, student)]
    expected = bl.brute_kl_divergence(labeled[0] / 3.0, labeled[1], batch.lengths).sum() / 5
    torch.testing.assert_close(Distillation(labeled=True, temperature=3.0)(student, batch, teacher), expected, **CLOSE)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_distillation_refuses_a_temperature_not_positive(temperature):
    with pytest.raises(ConfigurationError, match="temperature must be > 0"):
        Distillation(temperature=temperature)


def test_labeled_distillation_compares_labeled_trees():
    student, batch = make_batch([3, 2], num_labels=2)
    teacher, _ = make_batch([3, 2], num_labels=2, seed=1)
    labeled = [s.arcs[..., None] + s.labels.log_softmax(-1) for s in (teacher, student)]
    expected = bl.brute_kl_divergence(*labeled, batch.lengths).sum() / 5
    torch.testing.assert_close(Distillation(labeled=True)(student, batch, teacher), expected, **CLOSE)
    # label sets of different sizes: arcs only
    other = Scores(teacher.arcs, torch.zeros(2, 4, 4, 3, dtype=torch.float64))
    arcs_only = Distillation()(student, batch, teacher)
    torch.testing.assert_close(Distillation(labeled=True)(student, batch, other), arcs_only, **CLOSE)


@pytest.mark.parametrize("objective", [Distillation(), Distillation(reverse=True), Distillation(labeled=True)])
def test_distillation_is_zero_when_teacher_equals_student(objective):
    scores, batch = make_batch(LENGTHS)
    arcs = scores.arcs.clone().requires_grad_()
    loss = objective(Scores(arcs, scores.labels), batch, Scores(scores.arcs.clone(), scores.labels.clone()))
    loss.backward()
    assert loss.abs() < 1e-12
    assert arcs.grad.abs().max() < 1e-12


def test_distillation_detaches_the_teacher():
    student, batch = make_batch(LENGTHS)
    teacher = student.arcs.clone().requires_grad_()
    Distillation()(Scores(student.arcs.clone().requires_grad_()), batch, Scores(teacher + 1.0)).backward()
    assert teacher.grad is None


# --------------------------------------------------------------------------- self-training on sampled trees


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampled_self_training_is_the_likelihood_of_the_teachers_samples(multiroot, dtype):
    """With the random stream fixed, the loss and its gradient are those of Likelihood on
    the labeled trees the teacher's distribution gives (padding included: LENGTHS)."""
    student, batch = make_batch(LENGTHS, dtype=dtype)
    teacher = make_batch(LENGTHS, seed=1, dtype=dtype)[0]
    arcs = student.arcs.clone().requires_grad_()
    torch.manual_seed(7)
    loss = ready(SampledSelfTraining(samples=3), multiroot)(Scores(arcs, student.labels), batch, teacher)
    (grad,) = torch.autograd.grad(loss, arcs)
    torch.manual_seed(7)
    labeled = teacher.arcs[..., None] + teacher.labels.log_softmax(-1)
    heads, labels = TreeCRF(labeled, batch.lengths, multiroot).sample((3,))
    likelihood = ready(Likelihood(), multiroot)
    expected = torch.stack([likelihood(Scores(arcs, student.labels), type(batch)(batch.lengths, batch.upos, h, l))
                            for h, l in zip(heads, labels)]).mean()
    torch.testing.assert_close(loss, expected, rtol=0, atol=0)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, arcs)[0], rtol=0, atol=0)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_sampled_self_training_estimates_the_cross_entropy(multiroot):
    """Over many samples the tree term averages to the exact per-word cross-entropy
    H(teacher, student), by enumeration, within 4 standard errors of the estimate."""
    student, batch = make_batch([3, 2], num_labels=None)
    teacher = make_batch([3, 2], num_labels=None, seed=1)[0]
    mean = variance = 0.0
    for (*_, log_s), (*_, log_t) in zip(sentences(student, batch, multiroot), sentences(teacher, batch, multiroot)):
        mean += -(log_t.exp() * log_s).sum()
        variance += (log_t.exp() * log_s**2).sum() - (log_t.exp() * log_s).sum() ** 2
    samples, words = 4000, 5
    torch.manual_seed(0)
    estimate = ready(SampledSelfTraining(samples), multiroot)(student, batch, teacher)
    standard_error = (variance / samples).sqrt() / words
    assert abs(estimate - mean / words) < 4 * standard_error
    assert 4 * standard_error < 0.05 * mean / words  # the test can tell a wrong distribution apart


def test_sampled_self_training_needs_a_teacher_and_a_sample():
    assert SampledSelfTraining.needs_teacher and not SampledSelfTraining.needs_gold
    with pytest.raises(ValueError, match="samples"):
        SampledSelfTraining(samples=0)
    scores, batch = make_batch(LENGTHS)
    with pytest.raises(ValueError, match="teacher"):
        SampledSelfTraining()(scores, batch)


# --------------------------------------------------------------------------- every objective


def run(name, arcs, labels, batch, teacher):
    """A fresh objective ``name`` on the scores (``teacher`` is ignored unless it needs one)."""
    return OBJECTIVES[name]()(Scores(arcs, labels), batch, teacher)


def test_objectives_declare_their_needs_and_default_to_single_root_trees():
    classes = [Likelihood, Risk, EntropyRegularizer, Distillation, GeneralizedExpectation]
    assert [cls.needs_gold for cls in classes] == [True, True, False, False, False]
    assert [cls.needs_teacher for cls in classes] == [False, False, False, True, False]
    assert EntropyRegularizer().multiroot is False and ready(EntropyRegularizer(), True).multiroot is True
    import objectives

    assert objectives.entropy is objectives.expectations.entropy  # the module does not shadow it


@pytest.mark.parametrize("name", OBJECTIVES)
def test_gradient_matches_finite_differences(name):
    scores, batch = make_batch([3, 1], num_labels=2)
    teacher = make_batch([3, 1], num_labels=2, seed=1)[0]
    arcs, labels = (x.clone().requires_grad_() for x in (scores.arcs, scores.labels))
    assert torch.autograd.gradcheck(lambda a, l: run(name, a, l, batch, teacher), (arcs, labels))


@pytest.mark.parametrize("name", OBJECTIVES)
def test_no_nan_under_bf16_autocast(name):
    _, batch = make_batch(LENGTHS)
    generator = torch.Generator().manual_seed(2)
    words = torch.randn(4, 5, 8, generator=generator)
    weights = [(0.5 * torch.randn(shape, generator=generator)).requires_grad_() for shape in [(8, 8), (8, 3, 8)]]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        arcs = torch.einsum("bhd,de,bme->bhm", words, weights[0], words)
        labels = torch.einsum("bhd,dle,bme->bhml", words, weights[1], words)
        teacher = Scores(arcs.detach().flip(1), labels.detach().flip(1))
        assert arcs.dtype == labels.dtype == torch.bfloat16
        loss = run(name, arcs, labels, batch, teacher)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(w.grad).all() for w in weights if w.grad is not None)
    assert weights[0].grad is not None


@pytest.mark.parametrize("name", OBJECTIVES)
def test_a_few_adam_steps_decrease_the_loss(name):
    scores, batch = make_batch(LENGTHS)
    teacher = make_batch(LENGTHS, seed=1)[0]
    arcs, labels = (x.clone().float().requires_grad_() for x in (scores.arcs, scores.labels))
    optimiser = torch.optim.Adam([arcs, labels], lr=0.1)
    losses = []
    for _ in range(15):
        optimiser.zero_grad()
        loss = run(name, arcs, labels, batch, Scores(teacher.arcs.float(), teacher.labels.float()))
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
