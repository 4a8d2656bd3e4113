"""Partial annotation (objectives.partial, objectives.Likelihood on partial trees) against
brute-force enumeration of the trees that agree with the given heads."""

import pytest
import torch

from objectives import IGNORE_INDEX, Likelihood, TreeCRF
from objectives import baselines as bl
from objectives.partial import partial_log_prob

from .cases import DTYPES, TREE_SETS, batch, check
from .oracle import make_batch, ready, trees


def given_heads(lengths, multiroot, seed, share=0.5):
    """Heads ``(B, N+1)`` of a random tree of each sentence's set, each word's kept with
    probability ``share`` (else IGNORE_INDEX); position 0 and padding hold garbage."""
    generator = torch.Generator().manual_seed(seed)
    heads = torch.full((len(lengths), int(lengths.max()) + 1), 7)
    for b, n in enumerate(lengths.tolist()):
        every = bl.enumerate_trees(n, multiroot)
        tree = every[torch.randint(len(every), (), generator=generator)]
        kept = torch.rand(n, generator=generator) < share
        heads[b, 1 : n + 1] = tree[1:].masked_fill(~kept, IGNORE_INDEX)
    return heads


def oracle(arcs, lengths, heads, multiroot):
    """log of the probability mass of the enumerated trees agreeing with ``heads``: ``(B,)``."""
    out = []
    for b, n in enumerate(lengths.tolist()):
        every, log_p = trees(arcs[b], n, multiroot)
        given = heads[b, 1 : n + 1] != IGNORE_INDEX
        agree = (every[:, 1:] == heads[b, 1 : n + 1]).logical_or(~given).all(1)
        out.append(log_p[agree].logsumexp(0))
    return torch.stack(out)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", range(1, 6))
@pytest.mark.parametrize("share", [0.3, 0.7])
def test_partial_log_prob_is_the_mass_of_the_agreeing_trees(n, dtype, multiroot, share):
    arcs, lengths = batch(n, dtype=dtype, seed=n)
    heads = given_heads(lengths, multiroot, seed=10 * n + int(10 * share), share=share)
    got = partial_log_prob(TreeCRF(arcs, lengths, multiroot), heads)
    check(got, oracle(arcs, lengths, heads, multiroot), dtype)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_heads_given_is_the_gold_tree_and_none_given_is_zero(multiroot, dtype, device):
    arcs, lengths = batch(5, dtype=dtype, seed=3)
    heads = given_heads(lengths, multiroot, seed=4, share=1.1)
    crf = TreeCRF(arcs.to(device), lengths.to(device), multiroot)
    heads = heads.to(device)
    check(partial_log_prob(crf, heads).cpu(), crf.log_prob(heads).double().cpu(), dtype)
    # a batch mixing whole and partial trees: the whole ones through the constrained MTT
    mixed = heads.clone()
    mixed[0, 1] = IGNORE_INDEX
    got = partial_log_prob(crf, mixed).cpu()
    check(got[1:], crf.log_prob(heads)[1:].double().cpu(), dtype)
    check(got, oracle(arcs, lengths, mixed.cpu(), multiroot), dtype)
    none = torch.full_like(heads, IGNORE_INDEX)
    assert partial_log_prob(crf, none).eq(0).all()


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_partial_log_prob_gradient_matches_finite_differences(multiroot):
    arcs, lengths = batch(4, seed=5, scale=1.0)
    heads = given_heads(lengths, multiroot, seed=6)
    assert (heads[0, 1:] == IGNORE_INDEX).any() and (heads[0, 1:] != IGNORE_INDEX).any()
    mask = torch.zeros_like(arcs, dtype=torch.bool)  # perturb real arcs only (padding holds garbage)
    for b, n in enumerate(lengths.tolist()):
        mask[b, : n + 1, 1 : n + 1] = ~torch.eye(n + 1, dtype=torch.bool)[:, 1:]
    real = arcs[mask].clone().requires_grad_()

    def value(x):
        return partial_log_prob(TreeCRF(arcs.masked_scatter(mask, x), lengths, multiroot), heads)

    assert torch.autograd.gradcheck(value, (real,))


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("wrong", ["cycle", "self", "two roots"])
def test_heads_that_no_tree_agrees_with_raise(multiroot, wrong):
    arcs, lengths = bl.random_batch([4, 3], generator=torch.Generator().manual_seed(0))
    heads = torch.full((2, 5), IGNORE_INDEX)
    cases = {"cycle": {1: 2, 2: 1}, "self": {3: 3}, "two roots": {1: 0, 2: 0}}
    for word, head in cases[wrong].items():
        heads[1, word] = head
    crf = TreeCRF(arcs, lengths, multiroot)
    if wrong == "two roots" and multiroot:  # a multi-root tree may have them
        check(partial_log_prob(crf, heads), oracle(arcs, lengths, heads, multiroot), torch.float64)
        return
    with pytest.raises(ValueError, match=r"sentences \[1\] of the batch agree with no"):
        partial_log_prob(crf, heads)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("labeled_mtt", [False, True])
def test_likelihood_on_partial_trees(multiroot, labeled_mtt):
    """Tree term: -log of the agreeing trees' mass; label term only where head and label
    are given; per word of the batch."""
    scores, gold = make_batch([4, 3, 2], seed=2)
    heads = gold.heads.clone()
    heads[0, 2] = heads[1, 3] = IGNORE_INDEX
    heads[2, 1:3] = IGNORE_INDEX  # no head given at all
    partial = type(gold)(gold.lengths, gold.upos, heads, gold.labels)
    objective = ready(Likelihood(labeled_mtt=labeled_mtt), multiroot)
    arcs = scores.arcs + scores.labels.logsumexp(-1) if labeled_mtt else scores.arcs
    expected = -oracle(arcs, gold.lengths, heads, multiroot).sum()
    for b, n in enumerate(gold.lengths.tolist()):
        for m in range(1, n + 1):
            if heads[b, m] != IGNORE_INDEX and gold.labels[b, m] != IGNORE_INDEX:
                expected -= scores.labels[b, heads[b, m], m].log_softmax(-1)[gold.labels[b, m]]
    torch.testing.assert_close(objective(scores, partial), expected / gold.lengths.sum())
    # every head given: the gold tree's likelihood
    whole = -TreeCRF(arcs, gold.lengths, multiroot).log_prob(gold.heads).sum()
    labels = torch.stack([scores.labels[b, gold.heads[b, m], m].log_softmax(-1)[gold.labels[b, m]]
                          for b, n in enumerate(gold.lengths.tolist()) for m in range(1, n + 1)
                          if gold.labels[b, m] != IGNORE_INDEX])
    torch.testing.assert_close(objective(scores, gold), (whole - labels.sum()) / gold.lengths.sum())
