"""`TreeCRF.argmax`, `mbr`, `kbest` and `sample` against brute-force enumeration."""

from pathlib import Path

import pytest
import torch
from scipy import stats

from objectives import TreeCRF
from objectives import baselines as bl

from .cases import DTYPES, SHAPES, TREE_SETS, TOL, batch

ATOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def enumerated(scores: torch.Tensor, n: int, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """All trees ``(T, n+1)`` of one sentence and their scores ``(T,)`` float64 (labeled
    scores ``(N+1, N+1, L)``: each arc with its best label)."""
    block = scores.double()[: n + 1, : n + 1]
    if block.dim() == 3:
        block = block.amax(-1)
    trees = bl.enumerate_trees(n, multiroot)
    return trees, block[trees[:, 1:], torch.arange(1, n + 1)].sum(1)


def labeled_score(scores: torch.Tensor, heads: torch.Tensor, labels: torch.Tensor, n: int) -> float:
    words = torch.arange(1, n + 1)
    return float(scores.double()[heads[words], words, labels[words]].sum())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n,num_labels", SHAPES)
def test_argmax_is_the_best_enumerated_tree(n, num_labels, multiroot, dtype):
    scores, lengths = batch(n, num_labels, dtype)
    best = TreeCRF(scores, lengths, multiroot).argmax()
    heads, labels = best if num_labels else (best, None)
    assert heads.dtype == torch.long and heads.shape == scores.shape[:2]
    for b, length in enumerate(lengths.tolist()):
        trees, values = enumerated(scores[b], length, multiroot)
        tree = heads[b, : length + 1]
        assert (trees == tree).all(1).any(), "not a tree of the set"
        assert (heads[b, length + 1 :] == 0).all()
        chosen = values[(trees == tree).all(1)][0]
        assert float(chosen) == pytest.approx(float(values.max()), abs=ATOL[dtype])  # ties: any best tree
        if num_labels:
            assert labeled_score(scores[b], tree, labels[b], length) == pytest.approx(float(values.max()), abs=ATOL[dtype])
            assert (labels[b, length + 1 :] == -100).all() and labels[b, 0] == -100


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_argmax_with_ties_and_minus_inf_arcs(multiroot):
    generator = torch.Generator().manual_seed(3)
    for trial in range(30):
        scores, lengths = batch(5, seed=trial)
        scores = scores.round()  # many ties
        scores[torch.rand(scores.shape, generator=generator) < 0.4] = float("-inf")
        heads = TreeCRF(scores, lengths, multiroot).argmax()
        for b, length in enumerate(lengths.tolist()):
            trees, values = enumerated(scores[b], length, multiroot)
            infinite = (~torch.isfinite(scores[b, : length + 1, : length + 1][trees[:, 1:], torch.arange(1, length + 1)])).sum(1)
            match = (trees == heads[b, : length + 1]).all(1)
            assert match.any()
            assert infinite[match][0] == infinite.min()  # as few -inf arcs as any tree
            if infinite.min() == 0:
                assert values[match][0] == values.max()


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_argmax_when_every_tree_scores_minus_inf(multiroot):
    scores = torch.full((1, 4, 4), float("-inf"))
    heads = TreeCRF(scores, torch.tensor([3]), multiroot).argmax()
    assert (bl.enumerate_trees(3, multiroot) == heads[0]).all(1).any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_kbest_is_the_enumerated_order(n, multiroot, dtype):
    k = 12
    scores, lengths = batch(n, dtype=dtype)
    scores[0, 0, 1] = float("-inf")  # an arc no tree may use (for n = 1: no tree at all)
    crf = TreeCRF(scores, lengths, multiroot)
    heads, log_probs = crf.kbest(k)
    assert heads.shape == (k, *scores.shape[:2]) and log_probs.shape == (k, len(lengths))
    torch.testing.assert_close(crf.log_prob(heads[:1])[:, 1:], log_probs[:1, 1:], **TOL[dtype])
    for b, length in enumerate(lengths.tolist()):
        trees, values = enumerated(scores[b], length, multiroot)
        finite = values > float("-inf")
        expected = (values[finite] - values.logsumexp(0)).sort(descending=True).values[:k]
        found = len(expected)
        torch.testing.assert_close(log_probs[:found, b].double(), expected, **TOL[dtype])  # order, ties as scores
        assert (log_probs[found:, b] == float("-inf")).all() and (heads[found:, b] == 0).all()
        got = heads[:found, b, : length + 1]
        assert len({tuple(tree) for tree in got.tolist()}) == found  # distinct trees
        assert all((trees[finite] == tree).all(1).any() for tree in got)  # of the set, finite
        index = torch.tensor([int((trees == tree).all(1).nonzero()[0, 0]) for tree in got], dtype=torch.long)
        torch.testing.assert_close(values[index] - values.logsumexp(0), log_probs[:found, b].double(), **TOL[dtype])


def test_kbest_needs_unlabeled_scores_and_positive_k():
    scores, lengths = batch(3, 2)
    with pytest.raises(ValueError, match="unlabeled"):
        TreeCRF(scores, lengths).kbest(2)
    with pytest.raises(ValueError, match="at least 1"):
        TreeCRF(*batch(3)).kbest(0)


@pytest.mark.parametrize("multiroot", TREE_SETS)
@pytest.mark.parametrize("num_labels", [None, 2])
def test_mbr_maximises_the_enumerated_expected_accuracy(num_labels, multiroot):
    scores, lengths = batch(4, num_labels, scale=1.0)
    crf = TreeCRF(scores, lengths, multiroot)
    best = crf.mbr()
    heads, labels = best if num_labels else (best, None)
    marginals = bl.brute_marginals(scores, lengths, multiroot)
    for b, length in enumerate(lengths.tolist()):
        trees, accuracy = enumerated(marginals[b], length, multiroot)  # expected (labeled) accuracy
        match = (trees == heads[b, : length + 1]).all(1)
        assert float(accuracy[match][0]) == pytest.approx(float(accuracy.max()), abs=1e-9)
        if num_labels:
            assert labeled_score(marginals[b], heads[b], labels[b], length) == pytest.approx(float(accuracy.max()), abs=1e-9)


def chi_square_p(counts: torch.Tensor, probabilities: torch.Tensor) -> float:
    """p-value of observed ``counts`` under ``probabilities`` (both ``(T,)``)."""
    expected = probabilities * counts.sum()
    return float(stats.chisquare(counts.double().numpy(), expected.numpy()).pvalue)


def tree_counts(heads: torch.Tensor, trees: torch.Tensor) -> torch.Tensor:
    """How often each of ``trees`` ``(T, n+1)`` occurs in ``heads`` ``(S, n+1)``."""
    match = (heads[:, None, :] == trees[None]).all(-1)  # (S, T)
    assert match.any(1).all(), "a sample is not a tree of the set"
    return match.sum(0)


@pytest.mark.parametrize("multiroot", TREE_SETS)
def test_sample_frequencies_pass_a_chi_square_test(multiroot):
    samples = 20000
    scores, lengths = batch(3, scale=1.0)
    crf = TreeCRF(scores, lengths, multiroot)
    heads = crf.sample((samples,), generator=torch.Generator().manual_seed(0))
    assert heads.shape == (samples, *scores.shape[:2])
    for b, length in enumerate(lengths.tolist()):
        assert (heads[:, b, length + 1 :] == 0).all()
        trees, values = enumerated(scores[b], length, multiroot)
        counts = tree_counts(heads[:, b, : length + 1], trees)
        if len(trees) == 1:
            continue
        assert chi_square_p(counts, values.softmax(0)) > 1e-3
        if len(trees) > 2:  # the same test rejects a wrong distribution
            assert chi_square_p(counts, torch.full((len(trees),), 1.0 / len(trees), dtype=torch.float64)) < 1e-3


def test_labeled_samples_pass_a_chi_square_test():
    samples, n, num_labels = 20000, 2, 2
    scores, lengths = bl.random_batch([n], num_labels, scale=1.0, generator=torch.Generator().manual_seed(5))
    heads, labels = TreeCRF(scores, lengths).sample((samples,), generator=torch.Generator().manual_seed(1))
    assert (labels[:, :, 0] == -100).all()
    trees = bl.enumerate_trees(n)
    outcomes = [(tree, (a, c)) for tree in trees for a in range(num_labels) for c in range(num_labels)]
    words = torch.arange(1, n + 1)
    log_weights = torch.stack([scores[0][tree[words], words, torch.tensor(lab)].sum() for tree, lab in outcomes])
    counts = torch.tensor([int(((heads[:, 0] == tree).all(-1) & (labels[:, 0, 1:] == torch.tensor(lab)).all(-1)).sum())
                           for tree, lab in outcomes])
    assert counts.sum() == samples
    assert chi_square_p(counts, log_weights.softmax(0)) > 1e-3


def test_sampling_a_sentence_without_trees_is_an_error():
    scores, lengths = batch(3)
    scores[1, 0, 1] = float("-inf")  # sentence 1 has one word: no tree left
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match=r"sentences \[1\]"):
        TreeCRF(scores, lengths).sample((2,))


def test_samples_follow_the_generator_and_log_prob_reads_them():
    scores, lengths = batch(4)
    crf = TreeCRF(scores, lengths)
    first = crf.sample((2, 3), generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, crf.sample((2, 3), generator=torch.Generator().manual_seed(7)))
    assert first.shape == (2, 3, *scores.shape[:2])
    log_p = crf.log_prob(first)
    assert log_p.shape == (2, 3, len(lengths))
    torch.testing.assert_close(log_p[1, 2], crf.log_prob(first[1, 2]))
    torch.testing.assert_close(log_p[0, 0], bl.brute_log_prob(scores, lengths, first[0, 0]), **TOL[torch.float64])


def test_the_readme_example_runs():
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### The tree distribution", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
