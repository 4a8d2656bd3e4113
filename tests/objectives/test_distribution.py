"""`TreeCRF` against brute-force enumeration."""

import math

import pytest
import torch

from objectives import TreeCRF
from objectives import baselines as bl

TREE_SETS = [False, True]
F64 = {"rtol": 1e-10, "atol": 1e-10}


def batch(n, num_labels=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return bl.random_batch([n, 1, (n + 1) // 2, n], num_labels, scale=2.0, generator=generator)


def random_trees(lengths, multiroot, seed=0, num_labels=None):
    """One uniformly drawn tree per sentence: heads `(B, N+1)` and labels `(B, N+1)`."""
    generator = torch.Generator().manual_seed(seed)
    heads = torch.zeros(len(lengths), int(lengths.max()) + 1, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        trees = bl.enumerate_trees(n, multiroot)
        heads[b, : n + 1] = trees[torch.randint(len(trees), (), generator=generator)]
    positions = torch.arange(heads.shape[1])[None, :]
    words = (positions >= 1) & (positions <= lengths[:, None])
    labels = torch.randint(num_labels or 1, heads.shape, generator=generator).masked_fill(~words, -100)
    return heads, labels


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 3])
def test_tree_crf_matches_brute_force(num_labels, multiroot):
    n = 4
    scores, lengths = batch(n, num_labels)
    other, _ = batch(n, num_labels, seed=3)
    generator = torch.Generator().manual_seed(1)
    r = torch.randn(*scores.shape, 3, generator=generator, dtype=torch.float64)
    s = torch.randn(*scores.shape, 2, generator=generator, dtype=torch.float64)
    p, q = TreeCRF(scores, lengths, multiroot), TreeCRF(other, lengths, multiroot)

    torch.testing.assert_close(p.log_partition, bl.brute_log_partition(scores, lengths, multiroot), **F64)
    torch.testing.assert_close(p.marginals, bl.brute_marginals(scores, lengths, multiroot), **F64)
    torch.testing.assert_close(p.entropy(), bl.brute_entropy(scores, lengths, multiroot), **F64)
    torch.testing.assert_close(p.expectation(r), bl.brute_expectation(scores, lengths, r, multiroot), **F64)
    torch.testing.assert_close(p.second_order(r, s), bl.brute_second_order(scores, lengths, r, s, multiroot), **F64)
    torch.testing.assert_close(p.covariance(r, s), bl.brute_covariance(scores, lengths, r, s, multiroot), **F64)
    torch.testing.assert_close(p.cross_entropy(q), bl.brute_cross_entropy(scores, other, lengths, multiroot), **F64)
    kl = bl.brute_kl_divergence(scores, other, lengths, multiroot)
    torch.testing.assert_close(p.kl_divergence(q), kl, **F64)
    torch.testing.assert_close(torch.distributions.kl_divergence(p, q), kl, **F64)
    for alpha in (0.5, 2.0, 3.0):
        torch.testing.assert_close(
            p.renyi_entropy(alpha), bl.brute_renyi_entropy(scores, lengths, alpha, multiroot), **F64
        )


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 2])
def test_log_prob(num_labels, multiroot):
    scores, lengths = batch(5, num_labels)
    crf = TreeCRF(scores, lengths, multiroot)
    for seed in range(3):
        heads, labels = random_trees(lengths, multiroot, seed, num_labels)
        labels = labels if num_labels else None
        expected = bl.brute_log_prob(scores, lengths, heads, labels, multiroot)
        torch.testing.assert_close(crf.log_prob(heads, labels), expected, **F64)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_log_prob_sums_to_one_over_all_trees(multiroot):
    n = 4
    scores, lengths = bl.random_batch([n], scale=2.0)
    trees = bl.enumerate_trees(n, multiroot)
    crf = TreeCRF(scores.expand(len(trees), -1, -1), lengths.expand(len(trees)), multiroot)
    log_p = crf.log_prob(trees)
    torch.testing.assert_close(log_p.logsumexp(0), torch.zeros((), dtype=torch.float64), **F64)
    entropy = -(log_p.exp() * log_p).sum()
    torch.testing.assert_close(entropy, bl.brute_entropy(scores, lengths, multiroot)[0], **F64)


def test_log_prob_ignores_padding_and_is_differentiable():
    scores, lengths = batch(4)
    heads, _ = random_trees(lengths, False)
    garbage = heads.clone()
    padding = torch.arange(heads.shape[1])[None, :] > lengths[:, None]
    garbage[padding] = 3
    x = scores.clone().requires_grad_()
    log_p = TreeCRF(x, lengths).log_prob(garbage)
    torch.testing.assert_close(log_p, bl.brute_log_prob(scores, lengths, heads), **F64)
    log_p.sum().backward()
    # d log p(d) / d scores = 1[e in d] - mu_e
    chosen = torch.zeros_like(scores)
    for b, n in enumerate(lengths.tolist()):
        chosen[b, heads[b, 1 : n + 1], torch.arange(1, n + 1)] = 1.0
    torch.testing.assert_close(x.grad, chosen - bl.brute_marginals(scores, lengths), **F64)


def test_float32_keeps_dtype():
    scores, lengths = batch(4)
    crf = TreeCRF(scores.float(), lengths, multiroot=True)
    for value in (crf.log_partition, crf.marginals, crf.entropy(), crf.renyi_entropy(2.0)):
        assert value.dtype == torch.float32
    torch.testing.assert_close(
        crf.entropy().double(), bl.brute_entropy(scores.float(), lengths, True), rtol=1e-4, atol=1e-5
    )


def test_kl_needs_the_same_tree_set():
    scores, lengths = batch(3)
    with pytest.raises(ValueError):
        torch.distributions.kl_divergence(TreeCRF(scores, lengths), TreeCRF(scores, lengths, multiroot=True))


def test_bad_arguments_raise():
    scores, lengths = batch(3)
    with pytest.raises(ValueError, match="lengths"):
        TreeCRF(scores, lengths + 1)
    with pytest.raises(ValueError, match="lengths"):
        TreeCRF(scores, lengths[:2])
    with pytest.raises(ValueError, match="scores"):
        TreeCRF(scores[:, :, :2], lengths)
    nan = scores.clone()
    nan[0, 1, 2] = math.nan
    with pytest.raises(ValueError, match="scores"):
        TreeCRF(nan, lengths)
    with pytest.raises(ValueError, match="labels"):
        TreeCRF(scores, lengths).log_prob(torch.zeros(4, 4, dtype=torch.long), torch.zeros(4, 4, dtype=torch.long))


@pytest.mark.parametrize("num_labels", [None, 2])
def test_one_factorisation_per_distribution(num_labels, monkeypatch):
    """log_prob, entropy, marginals, expectations, T2 and KL (and their gradients) all read
    the one LU factorisation of each TreeCRF."""
    calls = []
    factor = torch.linalg.lu_factor_ex
    monkeypatch.setattr(torch.linalg, "lu_factor_ex", lambda *args, **kwargs: calls.append(1) or factor(*args, **kwargs))
    scores, lengths = batch(4, num_labels)
    x = scores.clone().requires_grad_()
    p, q = TreeCRF(x, lengths), TreeCRF(batch(4, num_labels, seed=3)[0], lengths)
    heads, labels = random_trees(lengths, False, num_labels=num_labels)
    r = torch.randn(*scores.shape, 2, dtype=torch.float64)
    log_p = p.log_prob(heads, labels if num_labels else None)
    assert len(calls) == 1
    values = [log_p, p.entropy(), p.marginals, p.expectation(r), p.covariance(r, r), p.kl_divergence(q), p.cross_entropy(q)]
    sum(v.sum() for v in values).backward()
    assert len(calls) == 2  # and one for q
    torch.testing.assert_close(values[1], bl.brute_entropy(scores, lengths), **F64)
    assert torch.isfinite(x.grad).all()


def test_validation_is_optional():
    scores, lengths = batch(3)
    nan = scores.clone()
    nan[0, 1, 2] = math.nan
    TreeCRF(nan, lengths, validate_args=False)  # no check, no host sync
    with pytest.raises(ValueError, match="NaN"):
        TreeCRF(nan, lengths, validate_args=True)
