"""Property-based tests: invariants of tree distributions that hold for any scores."""

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from objectives import baselines as bl
from objectives.conventions import arc_mask
from objectives.expectations import entropy, kl_divergence, renyi_entropy
from objectives.mtt import log_partition, marginals

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def batches(draw, max_length=6, labels=False):
    """A padded batch (scores, lengths, multiroot) with garbage padding and a random scale.

    Scales stay <= 5: beyond that, float64 determinants lose digits to cancellation
    (see test_mtt.py::test_cycle_dominated_scores), which is not what these tests probe.
    """
    lengths = draw(st.lists(st.integers(1, max_length), min_size=1, max_size=4))
    scale = draw(st.sampled_from([0.1, 1.0, 3.0, 5.0]))
    num_labels = draw(st.integers(1, 3)) if labels else None
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    scores, lengths = bl.random_batch(lengths, num_labels, scale=scale, generator=generator)
    return scores, lengths, draw(st.booleans())


def word_positions(lengths, size):
    positions = torch.arange(size)[None, :]
    return (positions >= 1) & (positions <= lengths[:, None])


@SETTINGS
@given(batches(max_length=12))
def test_every_word_has_one_head(batch):
    scores, lengths, multiroot = batch
    mu = marginals(scores, lengths, multiroot)
    assert (mu >= 0).all() and (mu <= 1 + 1e-12).all()
    torch.testing.assert_close(mu.sum(1), word_positions(lengths, scores.shape[1]).double(), rtol=0, atol=1e-8)
    if not multiroot:
        torch.testing.assert_close(mu[:, 0].sum(1), torch.ones(len(lengths), dtype=torch.float64), rtol=0, atol=1e-8)


@SETTINGS
@given(batches(labels=True))
def test_labeled_marginals_sum_over_labels(batch):
    scores, lengths, multiroot = batch
    torch.testing.assert_close(
        marginals(scores, lengths, multiroot).sum(-1),
        marginals(scores.logsumexp(-1), lengths, multiroot),
        rtol=1e-10,
        atol=1e-12,
    )


@SETTINGS
@given(batches(max_length=12))
def test_entropy_bounds(batch):
    """0 <= H_3 <= H_2 <= H <= H_0.5 <= log(number of trees) (Cayley's formula)."""
    scores, lengths, multiroot = batch
    n = lengths.double()
    log_count = (n - 1) * (n + 1).log() if multiroot else (n - 1) * n.log()
    chain = [
        torch.zeros_like(n),
        renyi_entropy(scores, lengths, 3.0, multiroot),
        renyi_entropy(scores, lengths, 2.0, multiroot),
        entropy(scores, lengths, multiroot),
        renyi_entropy(scores, lengths, 0.5, multiroot),
        log_count,
    ]
    for lower, upper in itertools.pairwise(chain):
        assert (lower <= upper + 1e-8 * (1 + upper.abs())).all()


@SETTINGS
@given(batches(max_length=12), st.integers(0, 2**31 - 1))
def test_kl_is_a_divergence(batch, seed):
    p, lengths, multiroot = batch
    q = p + torch.randn(p.shape, generator=torch.Generator().manual_seed(seed), dtype=p.dtype)
    assert (kl_divergence(p, q, lengths, multiroot) >= 0).all()
    torch.testing.assert_close(
        kl_divergence(p, p, lengths, multiroot), torch.zeros(len(lengths), dtype=torch.float64), rtol=0, atol=1e-9
    )
    # adding a per-word constant to all arcs into that word does not change the distribution
    shifted = q + torch.randn(q.shape[0], 1, q.shape[2], generator=torch.Generator().manual_seed(seed), dtype=q.dtype)
    torch.testing.assert_close(
        kl_divergence(shifted, q, lengths, multiroot), torch.zeros(len(lengths), dtype=torch.float64), rtol=0, atol=1e-8
    )


@SETTINGS
@given(batches(), st.sampled_from([-1e4, 0.0, 1e4, math.nan]))
def test_padding_and_batch_mates_do_not_matter(batch, garbage):
    scores, lengths, multiroot = batch
    log_z, h = log_partition(scores, lengths, multiroot), entropy(scores, lengths, multiroot)
    expected_log_z = bl.brute_log_partition(scores, lengths, multiroot)
    torch.testing.assert_close(log_z, expected_log_z, rtol=1e-10, atol=1e-10)
    padded = torch.nn.functional.pad(scores, (0, 2, 0, 2), value=garbage)
    padded = torch.where(arc_mask(lengths, padded.shape[1] - 1), padded, garbage)
    for b in range(len(lengths)):
        alone = padded[b : b + 1]
        one = lengths[b : b + 1]
        torch.testing.assert_close(log_partition(alone, one, multiroot), log_z[b : b + 1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(entropy(alone, one, multiroot), h[b : b + 1], rtol=1e-10, atol=1e-10)
