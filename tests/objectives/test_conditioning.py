"""Cycle-dominated scores: the LU of the shifted Laplacian cancels, the engine must not.

When the best incoming arcs of some words form a cycle with a large score gap, the
Laplacian is exp(-gap) from singular and a plain LU loses about gap nats of digits (or
calls the sentence treeless). The engine detects those sentences and redoes them by a
subtraction-free elimination; brute-force enumeration (a logsumexp over every tree) is
exact at any scale, so it is the oracle here.
"""

import contextlib
import math
import warnings

import pytest
import torch

from objectives import baselines as bl
from objectives.expectations import covariance, covariance_with_arcs, entropy
from objectives.mtt import (
    NoSpanningTreeWarning,
    factorise,
    log_partition,
    log_partition_and_marginals,
    marginals,
)

TREE_SETS = [False, True]
GAPS = [20.0, 30.0, 40.0, 60.0, 200.0]


def two_cycle(gap, multiroot):
    """All scores 0 but the arcs n-1 -> n and n -> n-1 (``gap``): multi-root N=2, single-root N=3."""
    n = 2 if multiroot else 3
    scores = torch.zeros(1, n + 1, n + 1, dtype=torch.float64)
    scores[0, n - 1, n] = scores[0, n, n - 1] = gap
    return scores, torch.tensor([n])


def large_scale_batch(scale, seed):
    """Mixed lengths up to 6 words, N(0, scale^2) scores: many best-arc cycles with big gaps."""
    generator = torch.Generator().manual_seed(seed)
    return bl.random_batch([6, 5, 4, 6, 3, 2, 1, 6], scale=scale, generator=generator)


@contextlib.contextmanager
def no_false_alarms():
    """Every sentence here has a tree: a NoSpanningTreeWarning is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoSpanningTreeWarning)
        yield


@pytest.mark.parametrize("gap", GAPS)
@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_two_cycle_matches_closed_form_and_brute_force(gap, multiroot):
    scores, lengths = two_cycle(gap, multiroot)
    with no_false_alarms():
        log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
    expected = bl.brute_log_partition(scores, lengths, multiroot)
    if multiroot:  # trees: {0->1, 0->2}, {0->1, 1->2}, {0->2, 2->1}
        torch.testing.assert_close(expected, torch.tensor([gap + math.log(2 + math.exp(-gap))], dtype=torch.float64))
    torch.testing.assert_close(log_z, expected, rtol=1e-13, atol=0)
    torch.testing.assert_close(mu, bl.brute_marginals(scores, lengths, multiroot), rtol=0, atol=1e-12)
    assert factorise(scores, lengths, multiroot).exact is not None  # the plain LU is not trusted here
    with torch.inference_mode():  # (validation loops run in it; the marginals still use autograd)
        torch.testing.assert_close(log_partition_and_marginals(scores, lengths, multiroot), (log_z, mu))


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("scale", [20.0, 40.0])
def test_large_scales_match_brute_force(scale, multiroot):
    redone = 0
    for seed in range(6):
        scores, lengths = large_scale_batch(scale, seed)
        with no_false_alarms():
            log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
            exact = factorise(scores, lengths, multiroot).exact
        redone += 0 if exact is None else len(exact)
        expected = bl.brute_log_partition(scores, lengths, multiroot)
        torch.testing.assert_close(log_z, expected, rtol=1e-8, atol=0)
        torch.testing.assert_close(mu, bl.brute_marginals(scores, lengths, multiroot), rtol=0, atol=1e-6)
        sums = mu.sum(1)[:, 1:]  # every word has exactly one head
        torch.testing.assert_close(sums, (sums > 0).double(), rtol=0, atol=1e-6)
    assert redone > 0


def test_well_conditioned_scores_take_the_lu_path():
    scores, lengths = large_scale_batch(2.0, 0)
    for multiroot in TREE_SETS:
        factor = factorise(scores, lengths, multiroot)
        assert factor.exact is None and factor.dead is None


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_gradients_match_brute_force(multiroot):
    """log Z, marginal VJPs (double backward), entropy gradients and T2 per-arc covariances."""
    scores, lengths = large_scale_batch(20.0, 1)
    cycle = torch.zeros(1, 7, 7, dtype=torch.float64)
    cycle[0, 4, 5] = cycle[0, 5, 4] = 40.0  # singular to the LU
    scores, lengths = torch.cat([scores, cycle]), torch.cat([lengths, torch.tensor([6])])
    assert factorise(scores, lengths, multiroot).exact is not None
    cotangent = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def total(function, x):
        value = function(x)
        return (cotangent * value).sum() if value.dim() > 1 else value.sum()

    for ours, oracle in [
        (lambda s: log_partition(s, lengths, multiroot), lambda s: bl.brute_log_partition(s, lengths, multiroot)),
        (lambda s: marginals(s, lengths, multiroot), lambda s: bl.brute_marginals(s, lengths, multiroot)),
        (lambda s: entropy(s, lengths, multiroot), lambda s: bl.brute_entropy(s, lengths, multiroot)),
    ]:
        x = scores.clone().requires_grad_()
        (got,) = torch.autograd.grad(total(ours, x), x)
        y = scores.clone().requires_grad_()
        (expected,) = torch.autograd.grad(total(oracle, y), y)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    r = torch.randn(scores.shape + (2,), dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    one_hot = torch.eye(49, dtype=torch.float64).view(1, 7, 7, 49).expand(len(lengths), -1, -1, -1)
    expected = bl.brute_covariance(scores, lengths, r, one_hot, multiroot).view(len(lengths), 2, 7, 7)
    torch.testing.assert_close(covariance_with_arcs(scores, lengths, r, multiroot), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_covariance_and_its_gradients_match_brute_force(multiroot):
    """T2 of redone sentences (one with a forbidden arc), differentiated once more."""
    generator = torch.Generator().manual_seed(5)
    scores, lengths = bl.random_batch([4, 3, 4], scale=3.0, generator=generator)
    scores[0, 2, 3] = scores[0, 3, 2] = 30.0
    scores[2, 1, 2] = scores[2, 2, 1] = 50.0
    scores[2, 0, 3] = -math.inf
    assert factorise(scores, lengths, multiroot).exact.tolist() == [0, 2]
    r = torch.randn(scores.shape + (2,), dtype=torch.float64, generator=generator)
    s = torch.randn(scores.shape + (3,), dtype=torch.float64, generator=generator)
    cotangent = torch.randn(len(lengths), 2, 3, dtype=torch.float64, generator=generator)
    results = []
    for function in (covariance, bl.brute_covariance):
        inputs = [t.clone().requires_grad_() for t in (scores, r, s)]
        value = function(inputs[0], lengths, inputs[1], inputs[2], multiroot)
        results.append([value, *torch.autograd.grad((cotangent * value).sum(), inputs)])
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    assert covariance_with_arcs(scores, lengths, r[..., :0], multiroot).shape == (3, 0, 5, 5)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_graphs_without_trees_still_warn(multiroot):
    scores = torch.zeros(4, 4, 4, dtype=torch.float64)
    scores[:, 2, 3] = scores[:, 3, 2] = 40.0  # every sentence is cycle-dominated
    scores[0, :, 1] = -math.inf  # word 1 has no head
    scores[1, :2, 2:] = -math.inf  # words 2 and 3 only reach each other
    scores[2, 0, :] = -math.inf  # no root arc at all
    lengths = torch.tensor([3, 3, 3, 3])
    x = scores.clone().requires_grad_()
    with pytest.warns(NoSpanningTreeWarning, match=r"\[0, 1, 2\]"):
        log_z, mu = log_partition_and_marginals(x, lengths, multiroot)
    assert (log_z[:3] == -math.inf).all() and (mu[:3] == 0).all()
    expected = bl.brute_log_partition(scores[3:], lengths[3:], multiroot)
    torch.testing.assert_close(log_z[3:], expected, rtol=1e-13, atol=0)
    (log_z[3] + mu.sum()).backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_sparse_graphs_match_brute_force(multiroot):
    """Half the arcs forbidden and a dominant cycle 1 <-> 2 everywhere: every sentence is
    redone, many have no tree, and the elimination meets words that no word left reaches."""
    for seed in range(10):
        generator = torch.Generator().manual_seed(seed)
        scores, lengths = bl.random_batch([5, 4, 6, 3, 2, 6], scale=3.0, generator=generator)
        scores = scores.masked_fill(torch.rand(scores.shape, generator=generator) < 0.5, -math.inf)
        scores[:, 1, 2] = scores[:, 2, 1] = 40.0
        expected = bl.brute_log_partition(scores, lengths, multiroot)
        dead = (expected == -math.inf).nonzero().flatten().tolist()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoSpanningTreeWarning)
            log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
        assert [str(dead) in str(w.message) for w in caught] == ([True] if dead else [])
        torch.testing.assert_close(log_z, expected, rtol=1e-12, atol=0)
        tree = expected > -math.inf  # (brute-force marginals are NaN without a tree)
        assert (mu[~tree] == 0).all()
        expected = bl.brute_marginals(scores[tree], lengths[tree], multiroot)
        torch.testing.assert_close(mu[tree], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_root_only_child(multiroot):
    """A word whose only possible head is the root (single-root: the root's only child)."""
    scores, lengths = large_scale_batch(20.0, 3)
    scores[:, 1:, 2] = -math.inf
    scores[0, 4, 5] = scores[0, 5, 4] = 80.0
    assert 0 in factorise(scores, lengths, multiroot).exact
    with no_false_alarms():
        log_z, mu = log_partition_and_marginals(scores, lengths, multiroot)
    torch.testing.assert_close(log_z, bl.brute_log_partition(scores, lengths, multiroot), rtol=1e-10, atol=0)
    torch.testing.assert_close(mu, bl.brute_marginals(scores, lengths, multiroot), rtol=0, atol=1e-9)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_labeled_arc_without_labels(multiroot):
    """An arc with -inf on every label is no arc: marginal 0, entropy and gradients finite
    (sentence 0); labeled scores are redone like unlabeled ones (sentence 1)."""
    generator = torch.Generator().manual_seed(0)
    scores, lengths = bl.random_batch([4, 3], num_labels=3, generator=generator)
    scores[0, 1, 2] = -math.inf
    scores[1, 1, 2] = scores[1, 2, 1] = 40.0
    assert factorise(scores.logsumexp(-1), lengths, multiroot).exact.tolist() == [1]
    x = scores.clone().requires_grad_()
    log_z, mu = log_partition_and_marginals(x, lengths, multiroot)
    value = entropy(x, lengths, multiroot)
    assert (mu[0, 1, 2] == 0).all()
    torch.testing.assert_close(mu, bl.brute_marginals(scores, lengths, multiroot), rtol=0, atol=1e-12)
    torch.testing.assert_close(value, bl.brute_entropy(scores, lengths, multiroot), rtol=1e-10, atol=1e-12)
    (log_z.sum() + mu.sum() + value.sum()).backward()
    assert torch.isfinite(x.grad).all()
