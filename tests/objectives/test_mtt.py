"""log Z and marginals of the matrix-tree engine against brute-force enumeration."""

import math

import pytest
import torch

from objectives import baselines as bl
from objectives.conventions import arc_mask
from objectives.mtt import log_partition, marginals

from .cases import DTYPES, SHAPES, TOL, TREE_SETS, batch, check


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", SHAPES)
def test_log_partition_and_marginals_match_brute_force(n, num_labels, multiroot, dtype):
    scores, lengths = batch(n, num_labels, dtype)
    check(log_partition(scores, lengths, multiroot), bl.brute_log_partition(scores, lengths, multiroot), dtype)
    mu = marginals(scores, lengths, multiroot)
    check(mu, bl.brute_marginals(scores, lengths, multiroot), dtype)
    mask = arc_mask(lengths, n)
    assert (mu[~mask] == 0).all()


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 2])
def test_padding_and_batch_mates_do_not_matter(num_labels, multiroot):
    scores, lengths = batch(5, num_labels)
    log_z, mu = log_partition(scores, lengths, multiroot), marginals(scores, lengths, multiroot)
    mask = arc_mask(lengths, 5)
    if num_labels:
        mask = mask[..., None]
    for garbage in (-1e4, 0.0, math.nan):
        other = torch.where(mask, scores, garbage)
        torch.testing.assert_close(log_partition(other, lengths, multiroot), log_z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(marginals(other, lengths, multiroot), mu, rtol=1e-12, atol=1e-12)
    for b, n in enumerate(lengths.tolist()):
        alone = scores[b : b + 1, : n + 1, : n + 1]
        one = lengths[b : b + 1]
        torch.testing.assert_close(log_partition(alone, one, multiroot), log_z[b : b + 1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(
            marginals(alone, one, multiroot), mu[b : b + 1, : n + 1, : n + 1], rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_gradient_of_log_partition_is_brute_force_gradient(multiroot):
    scores, lengths = batch(5)
    weights = torch.randn(len(lengths), dtype=torch.float64)
    x = scores.clone().requires_grad_()
    (weights * log_partition(x, lengths, multiroot)).sum().backward()
    y = scores.clone().requires_grad_()
    (weights * bl.brute_log_partition(y, lengths, multiroot)).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, **TOL[torch.float64])
    torch.testing.assert_close(
        x.grad, weights[:, None, None] * bl.brute_marginals(scores, lengths, multiroot), **TOL[torch.float64]
    )


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 2])
def test_gradient_of_marginals_is_brute_force_gradient(num_labels, multiroot):
    scores, lengths = batch(4, num_labels)
    cotangent = torch.randn(scores.shape, dtype=torch.float64)
    x = scores.clone().requires_grad_()
    (cotangent * marginals(x, lengths, multiroot)).sum().backward()
    y = scores.clone().requires_grad_()
    (cotangent * bl.brute_marginals(y, lengths, multiroot)).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, **TOL[torch.float64])


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_gradcheck(multiroot):
    scores, lengths = bl.random_batch([3, 2], scale=1.0)
    scores.requires_grad_()
    assert torch.autograd.gradcheck(lambda s: log_partition(s, lengths, multiroot), (scores,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda s: marginals(s, lengths, multiroot), (scores,), fast_mode=True)
    labeled, lengths = bl.random_batch([3, 2], num_labels=2, scale=1.0)
    labeled.requires_grad_()
    assert torch.autograd.gradcheck(lambda s: marginals(s, lengths, multiroot), (labeled,), fast_mode=True)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_long_sentences_in_float32(multiroot):
    generator = torch.Generator().manual_seed(0)
    scores, lengths = bl.random_batch([80, 57], scale=20.0, dtype=torch.float32, generator=generator)
    log_z, mu = log_partition(scores, lengths, multiroot), marginals(scores, lengths, multiroot)
    assert torch.isfinite(log_z).all() and torch.isfinite(mu).all()
    words = (torch.arange(81)[None, :] >= 1) & (torch.arange(81)[None, :] <= lengths[:, None])
    torch.testing.assert_close(mu.double().sum(1), words.double(), rtol=0, atol=1e-3)
    if not multiroot:
        torch.testing.assert_close(mu.double()[:, 0].sum(1), torch.ones(2, dtype=torch.float64), rtol=0, atol=1e-3)
    exact = log_partition(scores.double(), lengths, multiroot)
    torch.testing.assert_close(log_z.double(), exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    scores, lengths = batch(5, dtype=dtype, scale=3.0)
    scores = torch.where(arc_mask(lengths, 5), scores, 0.0)  # 1e4 garbage is inf in fp16
    log_z, mu = log_partition(scores, lengths), marginals(scores, lengths)
    assert torch.isfinite(log_z).all() and torch.isfinite(mu).all()
    # the engine upcasts: the result is exact for the rounded scores
    torch.testing.assert_close(log_z.double(), bl.brute_log_partition(scores, lengths), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mu.double(), bl.brute_marginals(scores, lengths), rtol=1e-4, atol=1e-5)


def test_autocast_bfloat16():
    scores, lengths = batch(5, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        log_z, mu = log_partition(scores, lengths), marginals(scores, lengths)
    assert torch.isfinite(log_z).all() and torch.isfinite(mu).all()
    torch.testing.assert_close(log_z.double(), bl.brute_log_partition(scores, lengths), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_word_without_heads_has_no_tree(multiroot):
    scores, lengths = batch(4)
    scores[0, :, 2] = -math.inf  # word 2 of sentence 0 cannot attach anywhere
    x = scores.clone().requires_grad_()
    with pytest.warns(RuntimeWarning):
        log_z = log_partition(x, lengths, multiroot)
    assert log_z[0] == -math.inf
    torch.testing.assert_close(
        log_z[1:], bl.brute_log_partition(scores[1:], lengths[1:], multiroot), **TOL[torch.float64]
    )
    log_z.sum().backward()
    assert not x.grad.isnan().any()
    with pytest.warns(RuntimeWarning):
        mu = marginals(scores, lengths, multiroot)
    assert (mu[0] == 0).all() and not mu.isnan().any()


def test_single_root_without_root_arcs_has_no_tree():
    scores, lengths = batch(3)
    scores[1, 0, :] = -math.inf
    with pytest.warns(RuntimeWarning):
        assert log_partition(scores, lengths)[1] == -math.inf


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_forbidden_arcs_get_zero_marginals(multiroot):
    scores, lengths = batch(5)
    scores[:, 1, 3] = -math.inf
    scores[:, 0, 2] = -math.inf
    mu = marginals(scores, lengths, multiroot)
    assert (mu[:, 1, 3] == 0).all() and (mu[:, 0, 2] == 0).all()
    torch.testing.assert_close(mu, bl.brute_marginals(scores, lengths, multiroot), **TOL[torch.float64])


@pytest.mark.parametrize("multiroot, n", [(True, 2), (False, 3)])
def test_cycle_dominated_scores(multiroot, n):
    """Two words prefer each other by 40 nats: every column maximum sits on a 2-cycle, the
    shifted Laplacian is exp(-40) from singular, and log Z must not come out -inf."""
    scores = torch.zeros(1, n + 1, n + 1, dtype=torch.float64)
    scores[0, n - 1, n] = scores[0, n, n - 1] = 40.0
    lengths = torch.tensor([n])
    expected = bl.brute_log_partition(scores, lengths, multiroot)
    torch.testing.assert_close(log_partition(scores, lengths, multiroot), expected, rtol=1e-12, atol=0)


def with_nan(scores):
    scores = scores.clone()
    scores[0, 1, 2] = math.nan
    return scores


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda s, n: (s, torch.tensor([3, 0])), "lengths"),
        (lambda s, n: (s, torch.tensor([3, 4])), "lengths"),
        (lambda s, n: (s, torch.tensor([3])), "lengths"),
        (lambda s, n: (s, torch.tensor([3.0, 2.0])), "lengths"),
        (lambda s, n: (s[:, :, :3], n), "scores"),
        (lambda s, n: (s[0], n), "scores"),
        (lambda s, n: (with_nan(s), n), "scores"),
    ],
    ids=["zero-length", "too-long", "batch-mismatch", "float-lengths", "not-square", "no-batch", "nan"],
)
def test_bad_arguments_raise(make, name):
    scores, lengths = make(*bl.random_batch([3, 2]))
    for function in (log_partition, marginals):
        with pytest.raises(ValueError, match=name):
            function(scores, lengths)
