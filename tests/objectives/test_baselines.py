"""The slow baselines agree with brute-force enumeration and with each other."""

import math

import pytest
import torch

from objectives import baselines as bl
from objectives.conventions import arc_mask

SIZES = range(1, 7)
TREE_SETS = [False, True]
TOL = {"rtol": 1e-10, "atol": 1e-10}


def batch(n, num_labels=None, seed=0, scale=2.0):
    """Mixed lengths with n the longest; garbage on padding and non-arcs."""
    generator = torch.Generator().manual_seed(seed)
    return bl.random_batch([n, 1, (n + 1) // 2, n], num_labels, scale=scale, generator=generator)


def features(scores, dims, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*scores.shape, dims, generator=generator, dtype=torch.float64)


def one_hot_arcs(scores):
    """s_e = 1_e for every entry of an unlabeled score array: `(B, N+1, N+1, (N+1)^2)`."""
    size = scores.shape[1]
    eye = torch.eye(size * size, dtype=torch.float64).view(size, size, size * size)
    return eye.expand(len(scores), -1, -1, -1)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n", SIZES)
def test_tree_counts_follow_cayley(n, multiroot):
    trees = bl.enumerate_trees(n, multiroot)
    assert len(trees) == ((n + 1) ** (n - 1) if multiroot else n ** (n - 1))
    assert len(torch.unique(trees, dim=0)) == len(trees)
    assert (trees[:, 0] == 0).all()
    assert (trees[:, 1:] != torch.arange(1, n + 1)).all()
    if not multiroot:
        assert ((trees[:, 1:] == 0).sum(1) == 1).all()


def test_enumeration_rejects_cycles():
    trees = bl.enumerate_trees(3, multiroot=True).tolist()
    assert [0, 2, 1, 0] not in trees  # 1 <-> 2 cycle
    assert [0, 0, 1, 2] in trees  # chain
    with pytest.raises(ValueError, match="n"):
        bl.enumerate_trees(8)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_brute_marginals_are_distributions(multiroot):
    scores, lengths = batch(5)
    mu = bl.brute_marginals(scores, lengths, multiroot)
    mask = arc_mask(lengths, scores.shape[1] - 1)
    assert (mu[~mask] == 0).all()
    words = torch.arange(scores.shape[1])[None, :]
    column_sums = mu.sum(1)
    torch.testing.assert_close(column_sums, ((words >= 1) & (words <= lengths[:, None])).double())
    if not multiroot:
        torch.testing.assert_close(mu[:, 0].sum(1), torch.ones(len(lengths), dtype=torch.float64))


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_labeled_brute_force_collapses_labels(multiroot):
    """Proposition 2: labeled log Z is unlabeled log Z of the label-logsumexp scores."""
    scores, lengths = batch(4, num_labels=3)
    torch.testing.assert_close(
        bl.brute_log_partition(scores, lengths, multiroot),
        bl.brute_log_partition(scores.logsumexp(-1), lengths, multiroot),
        **TOL,
    )
    mu = bl.brute_marginals(scores, lengths, multiroot)
    torch.testing.assert_close(mu.sum(-1), bl.brute_marginals(scores.logsumexp(-1), lengths, multiroot), **TOL)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_brute_log_prob(multiroot):
    n = 4
    scores, lengths = bl.random_batch([n], scale=2.0)
    trees = bl.enumerate_trees(n, multiroot)
    log_p = torch.stack([bl.brute_log_prob(scores, lengths, t[None], multiroot=multiroot)[0] for t in trees])
    torch.testing.assert_close(log_p.logsumexp(0), torch.zeros((), dtype=torch.float64), **TOL)
    score = scores[0, trees[:, 1:], torch.arange(1, n + 1)].sum(1)
    torch.testing.assert_close(log_p, score - bl.brute_log_partition(scores, lengths, multiroot), **TOL)
    cycle = torch.tensor([[0, 2, 1, 0, 3]])
    assert bl.brute_log_prob(scores, lengths, cycle, multiroot=multiroot)[0] == -math.inf


def test_brute_information_identities():
    scores, lengths = batch(4)
    other, _ = batch(4, seed=5)
    entropy = bl.brute_entropy(scores, lengths)
    torch.testing.assert_close(bl.brute_cross_entropy(scores, scores, lengths), entropy, **TOL)
    torch.testing.assert_close(
        bl.brute_kl_divergence(scores, other, lengths), bl.brute_cross_entropy(scores, other, lengths) - entropy, **TOL
    )
    near_one = bl.brute_renyi_entropy(scores, lengths, 1 + 1e-7)
    torch.testing.assert_close(near_one, entropy, rtol=1e-5, atol=1e-6)
    uniform = torch.where(arc_mask(lengths, 4), 0.0, scores)
    counts = torch.tensor([len(bl.enumerate_trees(n)) for n in lengths.tolist()], dtype=torch.float64)
    torch.testing.assert_close(bl.brute_entropy(uniform, lengths), counts.log(), **TOL)
    torch.testing.assert_close(bl.brute_renyi_entropy(uniform, lengths, 2.0), counts.log(), **TOL)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n", SIZES)
def test_smith_eisner_entropy_matches_brute_force(n, multiroot):
    scores, lengths = batch(n)
    expected = bl.brute_entropy(scores, lengths, multiroot)
    torch.testing.assert_close(bl.smith_eisner_entropy(scores, lengths, multiroot), expected, **TOL)
    torch.testing.assert_close(bl.smith_eisner_entropy_batched(scores, lengths, multiroot), expected, **TOL)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_smith_eisner_entropy_labeled(multiroot):
    scores, lengths = batch(4, num_labels=3)
    expected = bl.brute_entropy(scores, lengths, multiroot)
    torch.testing.assert_close(bl.smith_eisner_entropy(scores, lengths, multiroot), expected, **TOL)
    torch.testing.assert_close(bl.smith_eisner_entropy_batched(scores, lengths, multiroot), expected, **TOL)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", [(n, None) for n in SIZES] + [(4, 2)])
def test_druck_smith_covariance_matches_brute_force(n, num_labels, multiroot):
    scores, lengths = batch(n, num_labels=num_labels)
    r, s = features(scores, 3), features(scores, 2, seed=2)
    torch.testing.assert_close(
        bl.druck_smith_covariance(scores, lengths, r, s, multiroot),
        bl.brute_covariance(scores, lengths, r, s, multiroot),
        **TOL,
    )


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n", SIZES)
def test_two_arc_marginals(n, multiroot):
    scores, lengths = batch(n)
    pairs = bl.druck_smith_two_arc_marginals(scores, lengths, multiroot)
    size = scores.shape[1]
    hot = one_hot_arcs(scores)
    expected = bl.brute_second_order(scores, lengths, hot, hot, multiroot).view(pairs.shape)
    torch.testing.assert_close(pairs, expected, **TOL)

    mu = bl.brute_marginals(scores, lengths, multiroot)
    flat = pairs.view(len(scores), size * size, size * size)
    torch.testing.assert_close(flat.diagonal(dim1=1, dim2=2).view(mu.shape), mu, **TOL)
    torch.testing.assert_close(flat, flat.transpose(1, 2), **TOL)
    # every tree has n arcs, one into each word
    torch.testing.assert_close(pairs.sum((3, 4)), lengths[:, None, None] * mu, **TOL)
    words = (mu.sum(1) > 0.5)[:, None, None, :]
    torch.testing.assert_close(pairs.sum(3), mu[..., None] * words, **TOL)
    if not multiroot:  # one root arc: two distinct root arcs never co-occur
        root = pairs[:, 0, :, 0, :]
        torch.testing.assert_close(root, torch.diag_embed(mu[:, 0]), **TOL)


def test_two_arc_marginals_reject_labels():
    scores, lengths = batch(3, num_labels=2)
    with pytest.raises(ValueError, match="scores"):
        bl.druck_smith_two_arc_marginals(scores, lengths)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", [(n, None) for n in SIZES] + [(3, 3)])
def test_reverse_mode_matches_brute_force(n, num_labels, multiroot):
    scores, lengths = batch(n, num_labels=num_labels)
    r, s = features(scores, 3), features(scores, 4, seed=2)
    torch.testing.assert_close(
        bl.reverse_mode_second_order(scores, lengths, r, s, multiroot),
        bl.brute_second_order(scores, lengths, r, s, multiroot),
        **TOL,
    )


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_baselines_agree_beyond_brute_force(multiroot):
    """N = 20 is out of reach of enumeration: the O(N^4) routes check each other."""
    generator = torch.Generator().manual_seed(3)
    scores, lengths = bl.random_batch([20, 13], scale=3.0, generator=generator)
    r, s = features(scores, 2), features(scores, 3, seed=2)
    constant = torch.ones_like(r[..., :1]) / lengths.view(-1, 1, 1, 1)  # sums to 1 over any tree
    cov = bl.druck_smith_covariance(scores, lengths, r, s, multiroot)
    e_r = bl.reverse_mode_second_order(scores, lengths, r, constant, multiroot)
    e_s = bl.reverse_mode_second_order(scores, lengths, s, constant, multiroot)
    torch.testing.assert_close(
        bl.reverse_mode_second_order(scores, lengths, r, s, multiroot),
        cov + e_r * e_s.transpose(1, 2),
        rtol=1e-9,
        atol=1e-9,
    )
    torch.testing.assert_close(
        bl.smith_eisner_entropy(scores, lengths, multiroot),
        bl.smith_eisner_entropy_batched(scores, lengths, multiroot),
        rtol=1e-10,
        atol=1e-10,
    )
