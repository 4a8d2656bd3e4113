"""T1/T2 expectations, entropies and divergences of the engine against independent oracles."""

import math

import pytest
import torch

from objectives import baselines as bl
from objectives import expectations as ex
from objectives.conventions import arc_mask
from objectives.expectations import (
    covariance,
    cross_entropy,
    entropy,
    expectation,
    kl_divergence,
    renyi_entropy,
    second_order,
)

from .cases import DTYPES, SHAPES, TOL, TREE_SETS, batch, check

F64 = TOL[torch.float64]


def features(scores, lengths, dims, seed=1):
    """Random per-arc values `(*scores.shape, dims)`, large garbage off the arcs."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(*scores.shape, dims, generator=generator, dtype=torch.float64)
    mask = arc_mask(lengths, scores.shape[1] - 1).view(scores.shape[:3] + (1,) * (scores.dim() - 2))
    return torch.where(mask, values, 1e3).to(scores.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", SHAPES)
def test_information_measures_match_brute_force(n, num_labels, multiroot, dtype):
    p, lengths = batch(n, num_labels, dtype)
    q, _ = batch(n, num_labels, dtype, seed=7)
    check(entropy(p, lengths, multiroot), bl.brute_entropy(p, lengths, multiroot), dtype)
    check(cross_entropy(p, q, lengths, multiroot), bl.brute_cross_entropy(p, q, lengths, multiroot), dtype)
    check(kl_divergence(p, q, lengths, multiroot), bl.brute_kl_divergence(p, q, lengths, multiroot), dtype)
    for alpha in (0.5, 2.0, 3.0):
        check(renyi_entropy(p, lengths, alpha, multiroot), bl.brute_renyi_entropy(p, lengths, alpha, multiroot), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", SHAPES)
def test_expectations_match_brute_force(n, num_labels, multiroot, dtype):
    scores, lengths = batch(n, num_labels, dtype)
    r, s = features(scores, lengths, 3), features(scores, lengths, 2, seed=2)
    check(expectation(scores, lengths, r, multiroot), bl.brute_expectation(scores, lengths, r, multiroot), dtype)
    check(
        second_order(scores, lengths, r, s, multiroot), bl.brute_second_order(scores, lengths, r, s, multiroot), dtype
    )
    check(covariance(scores, lengths, r, s, multiroot), bl.brute_covariance(scores, lengths, r, s, multiroot), dtype)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", [(5, None), (3, 2)])
def test_second_order_agrees_with_every_baseline(n, num_labels, multiroot):
    scores, lengths = batch(n, num_labels)
    r, s = features(scores, lengths, 4), features(scores, lengths, 3, seed=2)
    got = second_order(scores, lengths, r, s, multiroot)
    torch.testing.assert_close(got, bl.brute_second_order(scores, lengths, r, s, multiroot), **F64)
    torch.testing.assert_close(got, bl.reverse_mode_second_order(scores, lengths, r, s, multiroot), **F64)
    e_r = bl.brute_expectation(scores, lengths, r, multiroot)
    e_s = bl.brute_expectation(scores, lengths, s, multiroot)
    druck_smith = bl.druck_smith_covariance(scores, lengths, r, s, multiroot) + e_r[:, :, None] * e_s[:, None, :]
    torch.testing.assert_close(got, druck_smith, **F64)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_covariance_beyond_brute_force(multiroot):
    """N = 25: T2 against the O(N^4) Druck & Smith route and per-dimension reverse mode."""
    generator = torch.Generator().manual_seed(4)
    scores, lengths = bl.random_batch([25, 11, 18], scale=3.0, generator=generator)
    r, s = features(scores, lengths, 3), features(scores, lengths, 5, seed=2)
    got = covariance(scores, lengths, r, s, multiroot)
    torch.testing.assert_close(got, bl.druck_smith_covariance(scores, lengths, r, s, multiroot), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        second_order(scores, lengths, r, s, multiroot),
        bl.reverse_mode_second_order(scores, lengths, r, s, multiroot),
        rtol=1e-9,
        atol=1e-9,
    )
    torch.testing.assert_close(
        entropy(scores, lengths, multiroot),
        bl.smith_eisner_entropy_batched(scores, lengths, multiroot),
        rtol=1e-9,
        atol=1e-9,
    )


def one_hot_arcs(scores):
    """s_e = 1_e for every arc slot: `(B, N+1, N+1, (N+1)^2)`."""
    size = scores.shape[1]
    eye = torch.eye(size * size, dtype=scores.dtype).view(size, size, size * size)
    return eye.expand(len(scores), -1, -1, -1)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("lengths_list", [[6, 3, 1, 5], [30, 17]])
def test_generalized_expectation_gradient(lengths_list, multiroot):
    """GE with 20 binary arc features and a squared penalty: reverse-mode autograd of T1
    equals the covariance route sum_k 2 (E[f_k] - t_k) Cov(f_k, 1_e) (Druck & Smith)."""
    generator = torch.Generator().manual_seed(5)
    scores, lengths = bl.random_batch(lengths_list, scale=2.0, generator=generator)
    f = (torch.rand(*scores.shape, 20, generator=generator) < 0.3).double()
    targets = torch.rand(len(lengths), 20, generator=generator, dtype=torch.float64) * lengths[:, None] / 3

    x = scores.clone().requires_grad_()
    mean = expectation(x, lengths, f, multiroot)
    ((mean - targets) ** 2).sum().backward()

    direction = (2 * (mean.detach() - targets))[:, None, None, :]
    r = (direction * f).sum(-1, keepdim=True)  # (B, N+1, N+1, 1)
    arcs = one_hot_arcs(scores)
    via_covariance = covariance(scores, lengths, r, arcs, multiroot).view(scores.shape)
    torch.testing.assert_close(x.grad, via_covariance, rtol=0, atol=1e-12)
    if max(lengths_list) <= bl.MAX_BRUTE_LENGTH:
        oracle = bl.brute_covariance(scores, lengths, r, arcs, multiroot)
    else:
        oracle = bl.druck_smith_covariance(scores, lengths, r, arcs, multiroot)
    torch.testing.assert_close(x.grad, oracle.view(scores.shape), rtol=1e-10, atol=1e-10)


CALLS = {
    "entropy": lambda f, p, q, r, s, lengths, m: f(p, lengths, m),
    "cross_entropy": lambda f, p, q, r, s, lengths, m: f(p, q, lengths, m),
    "kl_divergence": lambda f, p, q, r, s, lengths, m: f(p, q, lengths, m),
    "renyi_entropy": lambda f, p, q, r, s, lengths, m: f(p, lengths, 2.0, m),
    "expectation": lambda f, p, q, r, s, lengths, m: f(p, lengths, r, m),
    "second_order": lambda f, p, q, r, s, lengths, m: f(p, lengths, r, s, m),
    "covariance": lambda f, p, q, r, s, lengths, m: f(p, lengths, r, s, m),
}


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 2])
def test_gradients_match_brute_force_gradients(num_labels, multiroot, name):
    """Gradients w.r.t. scores (p, q) and per-arc values (r, s) equal autograd through
    the enumeration."""
    p, lengths = batch(4, num_labels)
    q, _ = batch(4, num_labels, seed=3)
    inputs = (p, q, features(p, lengths, 2), features(p, lengths, 3, seed=2))
    grads = []
    for function in (getattr(ex, name), getattr(bl, "brute_" + name)):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = CALLS[name](function, *leaves, lengths, multiroot)
        cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=out.dtype)
        grads.append(torch.autograd.grad((out * cotangent).sum(), leaves, allow_unused=True))
    for got, expected in zip(*grads):
        if expected is None:
            assert got is None or (got == 0).all()
        else:
            torch.testing.assert_close(got, expected, **F64)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_gradcheck(multiroot):
    p, lengths = bl.random_batch([3, 2], scale=1.0)
    q, _ = bl.random_batch([3, 2], scale=1.0)
    r, s = features(p, lengths, 2), features(p, lengths, 2, seed=2)
    checks = [
        (lambda a: entropy(a, lengths, multiroot), (p,)),
        (lambda a, b: kl_divergence(a, b, lengths, multiroot), (p, q)),
        (lambda a, b: expectation(a, lengths, b, multiroot), (p, r)),
        (lambda a, b, c: second_order(a, lengths, b, c, multiroot), (p, r, s)),
    ]
    for function, args in checks:
        args = tuple(t.clone().requires_grad_() for t in args)
        assert torch.autograd.gradcheck(function, args, fast_mode=True)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_forbidden_arcs(multiroot):
    """-inf arcs that still leave trees: finite, exact results; q forbidding an arc p uses
    makes the cross-entropy and KL infinite."""
    p, lengths = batch(5)
    q, _ = batch(5, seed=3)
    p[:, 2, 1] = -math.inf
    q[:, 2, 1] = -math.inf
    q[:, 0, 3] = -math.inf
    r = features(p, lengths, 2)
    torch.testing.assert_close(entropy(p, lengths, multiroot), bl.brute_entropy(p, lengths, multiroot), **F64)
    torch.testing.assert_close(
        kl_divergence(q, p, lengths, multiroot), bl.brute_kl_divergence(q, p, lengths, multiroot), **F64
    )
    torch.testing.assert_close(
        expectation(p, lengths, r, multiroot), bl.brute_expectation(p, lengths, r, multiroot), **F64
    )
    torch.testing.assert_close(
        covariance(p, lengths, r, r, multiroot), bl.brute_covariance(p, lengths, r, r, multiroot), **F64
    )
    has_arc = lengths >= 3  # word 3 exists, so p gives 0 -> 3 positive probability
    assert (cross_entropy(p, q, lengths, multiroot)[has_arc] == math.inf).all()
    assert (kl_divergence(p, q, lengths, multiroot)[has_arc] == math.inf).all()
    torch.testing.assert_close(
        cross_entropy(p, q, lengths, multiroot)[~has_arc],
        bl.brute_cross_entropy(p, q, lengths, multiroot)[~has_arc],
        **F64,
    )


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_sentence_without_tree(multiroot):
    """A word with no possible head: warning, batch-mates exact, finite values and gradients."""
    scores, lengths = batch(4)
    scores[0, :, 2] = -math.inf
    r = features(scores, lengths, 2)
    x = scores.clone().requires_grad_()
    with pytest.warns(RuntimeWarning):
        h = entropy(x, lengths, multiroot)
    with pytest.warns(RuntimeWarning):
        mean = expectation(x, lengths, r, multiroot)
    with pytest.warns(RuntimeWarning):
        cov = covariance(x, lengths, r, r, multiroot)
    torch.testing.assert_close(h[1:], bl.brute_entropy(scores[1:], lengths[1:], multiroot), **F64)
    torch.testing.assert_close(mean[1:], bl.brute_expectation(scores[1:], lengths[1:], r[1:], multiroot), **F64)
    torch.testing.assert_close(cov[1:], bl.brute_covariance(scores[1:], lengths[1:], r[1:], r[1:], multiroot), **F64)
    for value in (h, mean, cov):
        assert not value.isnan().any()
    (h.sum() + mean.sum() + cov.sum()).backward()
    assert not x.grad.isnan().any()


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_long_sentences_in_float32(multiroot):
    generator = torch.Generator().manual_seed(0)
    scores, lengths = bl.random_batch([80, 41], scale=20.0, dtype=torch.float32, generator=generator)
    h = entropy(scores, lengths, multiroot)
    assert torch.isfinite(h).all() and (h >= 0).all()
    exact = bl.smith_eisner_entropy_batched(scores.double(), lengths, multiroot)
    torch.testing.assert_close(entropy(scores.double(), lengths, multiroot), exact, rtol=0, atol=1e-8)
    torch.testing.assert_close(h.double(), exact, rtol=0, atol=1e-3)
    q, _ = bl.random_batch([80, 41], scale=20.0, dtype=torch.float32, generator=generator)
    kl = kl_divergence(scores, q, lengths, multiroot)
    assert torch.isfinite(kl).all() and (kl >= 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    p, lengths = batch(5, dtype=dtype)
    q, _ = batch(5, dtype=dtype, seed=3)
    p, q = (torch.where(arc_mask(lengths, 5), t, 0.0) for t in (p, q))  # 1e4 is inf in fp16
    r = features(p, lengths, 2).to(dtype)
    results = [
        entropy(p, lengths),
        kl_divergence(p, q, lengths),
        renyi_entropy(p, lengths, 2.0),
        expectation(p, lengths, r),
        covariance(p, lengths, r, r),
    ]
    assert all(torch.isfinite(t).all() for t in results)
    torch.testing.assert_close(results[0].double(), bl.brute_entropy(p, lengths), rtol=1e-4, atol=1e-5)


def test_autocast_bfloat16():
    p, lengths = batch(5, dtype=torch.float32)
    q, _ = batch(5, dtype=torch.float32, seed=3)
    r = features(p, lengths, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = entropy(p, lengths)
        kl = kl_divergence(p, q, lengths)
        cov = covariance(p, lengths, r, r)
    for value in (h, kl, cov):
        assert torch.isfinite(value).all()
    torch.testing.assert_close(h.double(), bl.brute_entropy(p, lengths), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(kl.double(), bl.brute_kl_divergence(p, q, lengths), rtol=1e-4, atol=1e-5)


def test_bad_arguments_raise():
    p, lengths = bl.random_batch([3, 2])
    r = features(p, lengths, 2)
    with pytest.raises(ValueError, match="lengths"):
        entropy(p, torch.tensor([3, 0]))
    with pytest.raises(ValueError, match="lengths"):
        expectation(p, torch.tensor([4, 2]), r)
    with pytest.raises(ValueError, match="r"):
        expectation(p, lengths, r[:, :3])
    with pytest.raises(ValueError, match="s"):
        covariance(p, lengths, r, r[..., 0])
    with pytest.raises(ValueError, match="q_scores"):
        kl_divergence(p, p[:, :3, :3], lengths)
    with pytest.raises(ValueError, match="alpha"):
        renyi_entropy(p, lengths, 0.0)
    nan = p.clone()
    nan[1, 0, 2] = math.nan
    with pytest.raises(ValueError, match="scores"):
        entropy(nan, lengths)
