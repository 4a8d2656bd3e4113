"""Tests for parser.decoding.decode: exact maximum spanning arborescences."""

import itertools
from functools import cache

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parser.decoding.decode import eisner, mst, mst_labels, tree_labels
from tests.parser.numpy_mst import chu_liu_edmonds, numpy_mst
from parser.evaluate import nonprojective_arcs

NEG_INF = float("-inf")


# ---------------------------------------------------------------- helpers


def is_tree(heads: np.ndarray) -> bool:
    """Whether heads `(n+1,)` (heads[0] == 0) make every word reach the root."""
    n = len(heads) - 1
    if heads[0] != 0 or np.any(heads[1:] < 0) or np.any(heads[1:] > n):
        return False
    for start in range(1, n + 1):
        node, steps = start, 0
        while node != 0 and steps <= n:
            node, steps = heads[node], steps + 1
        if node != 0:
            return False
    return True


@cache
def all_trees(n: int, single_root: bool) -> np.ndarray:
    """Every arborescence over words 1..n rooted at 0, as heads `(T, n+1)`."""
    grid = np.indices((n + 1,) * n).reshape(n, -1).T  # every head assignment
    heads = np.concatenate([np.zeros((len(grid), 1), dtype=int), grid], axis=1)
    ancestor = heads
    for _ in range(n):
        ancestor = np.take_along_axis(ancestor, ancestor, axis=1)
    keep = (ancestor == 0).all(1)
    if single_root:
        keep &= (heads[:, 1:] == 0).sum(1) == 1
    return heads[keep]


def tree_key(weights: np.ndarray, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(number of -inf arcs, sum of finite arcs) of trees `(..., n+1)`."""
    n = weights.shape[0] - 1
    arcs = weights[heads[..., 1:], np.arange(1, n + 1)]
    finite = np.isfinite(arcs)
    return (~finite).sum(-1), np.where(finite, arcs, 0.0).sum(-1)


def assert_optimal(weights: np.ndarray, heads: np.ndarray, single_root: bool) -> None:
    """`heads` is a valid tree, lexicographically best: fewest -inf arcs, then score."""
    n = weights.shape[0] - 1
    assert is_tree(heads)
    if single_root:
        assert (heads[1:] == 0).sum() == 1
    counts, totals = tree_key(weights, all_trees(n, single_root))
    fewest = counts.min()
    count, total = tree_key(weights, heads)
    assert count == fewest
    assert total == pytest.approx(totals[counts == fewest].max(), abs=1e-9)


def score(weights: np.ndarray, heads: np.ndarray) -> float:
    """Sum of the arc weights of the tree `heads` `(n+1,)`."""
    n = len(heads) - 1
    return float(weights[heads[1:], np.arange(1, n + 1)].sum())


def networkx_score(weights: np.ndarray, root_children: list[int]) -> float:
    """Best tree score by networkx's Edmonds, root arcs only to `root_children`."""
    n = weights.shape[0] - 1
    graph = nx.DiGraph()
    graph.add_weighted_edges_from(
        (h, m, weights[h, m])
        for h in range(n + 1)
        for m in range(1, n + 1)
        if h != m and (h != 0 or m in root_children)
    )
    tree = nx.maximum_spanning_arborescence(graph)
    return sum(d["weight"] for _, _, d in tree.edges(data=True))


def forced_root_reference(weights: np.ndarray) -> float:
    """Best single-root score: one unconstrained CLE per choice of root child."""
    n = weights.shape[0] - 1
    best = NEG_INF
    for child in range(1, n + 1):
        forced = np.full_like(weights, NEG_INF)
        forced[1:, 1:] = weights[1:, 1:]
        forced[0, child] = weights[0, child]
        np.fill_diagonal(forced, NEG_INF)
        best = max(best, score(weights, chu_liu_edmonds(forced)))
    return best


def random_weights(rng: np.random.Generator, n: int, kind: str, inf_prob: float = 0.0):
    """Scores `(n+1, n+1)`: gaussian, small integers (ties) or peaked on a tree."""
    if kind == "integer":
        weights = rng.integers(-2, 3, size=(n + 1, n + 1)).astype(float)
    else:
        weights = rng.normal(size=(n + 1, n + 1))
    if kind == "peaked":
        order = rng.permutation(n) + 1
        for i, m in enumerate(order[1:], start=1):
            weights[order[rng.integers(i)], m] += 10.0
        weights[0, order[0]] += 10.0
    weights[rng.random(weights.shape) < inf_prob] = NEG_INF
    return weights


def batch_of(sentences: list[np.ndarray], rng: np.random.Generator, padding: str):
    """Pad `(n+1, n+1)` matrices: scores `(B, N+1, N+1)` float32, lengths `(B,)`."""
    size = max(len(w) for w in sentences)
    if padding == "nan":
        scores = np.full((len(sentences), size, size), np.nan)
    elif padding == "-inf":
        scores = np.full((len(sentences), size, size), NEG_INF)
    else:
        scores = rng.normal(scale=100.0, size=(len(sentences), size, size))
    for b, w in enumerate(sentences):
        scores[b, : len(w), : len(w)] = w
        # Column 0 and the diagonal are not arcs: garbage there must be ignored too.
        scores[b, : len(w), 0] = rng.normal(scale=100.0, size=len(w))
        scores[b, np.arange(len(w)), np.arange(len(w))] = 1e4
    lengths = torch.tensor([len(w) - 1 for w in sentences])
    return torch.from_numpy(scores).float(), lengths


# ---------------------------------------------------------------- exactness


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["normal", "integer", "peaked"]),
    inf_prob=st.sampled_from([0.0, 0.3, 0.8]),
    multiroot=st.booleans(),
    padding=st.sampled_from(["random", "nan", "-inf"]),
)
def test_matches_brute_force(n, seed, kind, inf_prob, multiroot, padding):
    rng = np.random.default_rng(seed)
    # float32 first, as the batch holds it, so both sides see the same numbers.
    weights = random_weights(rng, n, kind, inf_prob).astype(np.float32).astype(float)
    mates = [random_weights(rng, int(m), "normal") for m in rng.integers(1, 9, size=2)]
    scores, lengths = batch_of([mates[0], weights, mates[1]], rng, padding)

    heads = mst(scores, lengths, multiroot=multiroot)

    assert_optimal(weights, heads[1, : n + 1].numpy(), single_root=not multiroot)
    assert (heads[1, n + 1 :] == 0).all()
    # Independent of padding contents and batch-mates.
    alone, alone_lengths = batch_of([weights], rng, "random")
    assert torch.equal(mst(alone, alone_lengths, multiroot)[0], heads[1, : n + 1])


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("kind", ["normal", "integer", "peaked", "minus-inf", "strong-root"])
def test_matches_the_numpy_decoder_on_random_batches(kind, multiroot):
    """The batched torch decoder finds trees of the same score (and the same number of
    -inf arcs) as the NumPy Chu-Liu-Edmonds it replaced, on many random batches."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        sizes = rng.integers(1, 40, size=16)
        weights = [random_weights(rng, int(n), "normal" if kind in ("minus-inf", "strong-root") else kind,
                                  0.5 if kind == "minus-inf" else 0.0) for n in sizes]
        if kind == "strong-root":
            for w in weights:
                w[0] += 4.0
        scores, lengths = batch_of(weights, rng, "random")
        got, expected = mst(scores, lengths, multiroot), numpy_mst(scores, lengths, multiroot)
        for b, w in enumerate(weights):
            n = len(w) - 1
            assert is_tree(got[b, : n + 1].numpy()) and (got[b, n + 1 :] == 0).all()
            assert multiroot or (got[b, 1 : n + 1] == 0).sum() == 1
            inf_got, score_got = tree_key(w.astype(np.float32).astype(float), got[b, : n + 1].numpy())
            inf_expected, score_expected = tree_key(w.astype(np.float32).astype(float), expected[b, : n + 1].numpy())
            assert inf_got == inf_expected
            assert score_got == pytest.approx(score_expected, abs=1e-6)


def test_single_root_constraint_changes_the_tree():
    """Cases where the unconstrained optimum has several root children."""
    rng = np.random.default_rng(0)
    constrained = 0
    for _ in range(200):
        n = int(rng.integers(2, 7))
        weights = rng.normal(size=(n + 1, n + 1))
        weights[0] += 1.5  # root arcs attractive
        scores, lengths = batch_of([weights], rng, "random")
        free = mst(scores, lengths, multiroot=True)[0].numpy()
        single = mst(scores, lengths)[0].numpy()
        weights = scores[0].double().numpy()
        assert_optimal(weights, free, single_root=False)
        assert_optimal(weights, single, single_root=True)
        constrained += (free[1:] == 0).sum() > 1
    assert constrained > 100


def test_single_root_fixed_case():
    # Every word prefers the root; the best single-root tree is the chain rooted at 2.
    scores = torch.tensor(
        [
            [
                [0.0, 5.0, 6.0, 5.0],
                [0.0, 0.0, 1.0, 4.0],
                [0.0, 4.5, 0.0, 3.0],
                [0.0, 2.0, 0.0, 0.0],
            ]
        ]
    )
    lengths = torch.tensor([3])
    assert mst(scores, lengths, multiroot=True).tolist() == [[0, 0, 0, 0]]
    assert mst(scores, lengths).tolist() == [[0, 2, 0, 1]]  # 6 + 4.5 + 4


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(2, 30),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["normal", "integer", "peaked"]),
)
def test_matches_references_on_longer_sentences(n, seed, kind):
    rng = np.random.default_rng(seed)
    weights = random_weights(rng, n, kind)
    scores, lengths = batch_of([weights], rng, "random")
    weights = scores[0].double().numpy()

    free = mst(scores, lengths, multiroot=True)[0].numpy()
    single = mst(scores, lengths)[0].numpy()

    assert is_tree(free) and is_tree(single) and (single[1:] == 0).sum() == 1
    assert score(weights, free) == pytest.approx(
        networkx_score(weights, list(range(1, n + 1)))
    )
    assert score(weights, single) == pytest.approx(forced_root_reference(weights))


@pytest.mark.parametrize("seed", range(3))
def test_single_root_matches_networkx_reference(seed):
    rng = np.random.default_rng(seed)
    n = 12
    weights = rng.normal(size=(n + 1, n + 1))
    weights[0] += 1.0
    scores, lengths = batch_of([weights], rng, "random")
    weights = scores[0].double().numpy()
    heads = mst(scores, lengths)[0].numpy()
    best = max(networkx_score(weights, [child]) for child in range(1, n + 1))
    assert score(weights, heads) == pytest.approx(best)


def test_long_sentences_beat_random_trees():
    rng = np.random.default_rng(1)
    n, batch = 40, 8
    sentences = [
        random_weights(rng, n, kind) for kind in ["normal", "peaked"] * (batch // 2)
    ]
    scores, lengths = batch_of(sentences, rng, "random")
    single = mst(scores, lengths).numpy()
    free = mst(scores, lengths, multiroot=True).numpy()
    for b in range(batch):
        weights = scores[b].double().numpy()
        assert is_tree(single[b]) and (single[b, 1:] == 0).sum() == 1
        assert is_tree(free[b])
        assert score(weights, free[b]) >= score(weights, single[b]) - 1e-6
        for _ in range(20):
            order = rng.permutation(n) + 1
            heads = np.zeros(n + 1, dtype=int)
            heads[order[1:]] = [order[rng.integers(i)] for i in range(1, n)]
            assert score(weights, single[b]) >= score(weights, heads) - 1e-6


# ---------------------------------------------------------------- -inf arcs


@pytest.mark.parametrize("multiroot", [False, True])
def test_all_arcs_minus_inf_still_gives_a_tree(multiroot):
    scores = torch.full((2, 6, 6), NEG_INF)
    lengths = torch.tensor([5, 3])
    heads = mst(scores, lengths, multiroot).numpy()
    assert is_tree(heads[0]) and is_tree(heads[1, :4])
    assert (heads[1, 4:] == 0).all()
    if not multiroot:
        assert (heads[0, 1:] == 0).sum() == 1 and (heads[1, 1:4] == 0).sum() == 1


def test_minus_inf_avoided_unless_unavoidable():
    # Every root arc and every arc into word 2 is -inf: the best tree pays once, by
    # making word 2 the root child.
    weights = np.zeros((4, 4))
    weights[:, 2] = NEG_INF
    weights[0, 1] = weights[0, 3] = NEG_INF
    weights[1, 3] = -50.0
    scores, lengths = batch_of([weights], np.random.default_rng(0), "random")
    heads = mst(scores, lengths)[0].numpy()
    arcs = weights[heads[1:], np.arange(1, 4)]
    assert np.isneginf(arcs).sum() == 1 and np.isneginf(arcs[1])


# ---------------------------------------------------------------- contract


def test_output_contract_and_input_untouched():
    rng = np.random.default_rng(3)
    scores, lengths = batch_of(
        [random_weights(rng, n, "normal") for n in (7, 2, 5)], rng, "nan"
    )
    scores.requires_grad_(True)
    before = scores.detach().clone()
    heads = mst(scores, lengths)
    assert heads.dtype == torch.long and heads.shape == (3, 8)
    assert heads.device == scores.device
    assert (
        (heads[:, 0] == 0).all()
        and (heads[1, 3:] == 0).all()
        and (heads[2, 6:] == 0).all()
    )
    torch.testing.assert_close(scores.detach(), before, rtol=0, atol=0, equal_nan=True)


def test_fast_path_returns_argmax_tree():
    rng = np.random.default_rng(4)
    weights = random_weights(rng, 10, "peaked")
    scores, lengths = batch_of([weights], rng, "random")
    heads = mst(scores, lengths)[0]
    masked = scores[0].clone()
    masked[:, 0] = NEG_INF
    masked.fill_diagonal_(NEG_INF)
    assert torch.equal(heads[1:], masked.argmax(0)[1:])


def test_deterministic_with_ties():
    rng = np.random.default_rng(5)
    sentences = [np.zeros((n + 1, n + 1)) for n in (1, 4, 9)]
    scores, lengths = batch_of(sentences, rng, "random")
    for multiroot in (False, True):
        first = mst(scores, lengths, multiroot)
        assert torch.equal(first, mst(scores.clone(), lengths, multiroot))
        for b, n in enumerate(lengths.tolist()):
            assert is_tree(first[b, : n + 1].numpy())


def test_mst_labels():
    rng = np.random.default_rng(6)
    label_scores = torch.from_numpy(rng.normal(size=(2, 5, 5, 7)))
    heads = torch.tensor([[0, 2, 0, 2, 3], [0, 0, 1, 0, 0]])
    lengths = torch.tensor([4, 2])
    labels = mst_labels(label_scores, heads, lengths)
    assert labels.tolist()[0][0] == -100 and labels.tolist()[1][3:] == [-100, -100]
    for b, n in enumerate(lengths.tolist()):
        for m in range(1, n + 1):
            assert labels[b, m] == label_scores[b, heads[b, m], m].argmax()


@pytest.mark.parametrize("multiroot", [False, True])
def test_tree_labels_give_root_to_the_arcs_from_the_root_only(multiroot):
    """Label scores that prefer ``root`` (label 0) everywhere: it lands on the root's arcs
    and nowhere else, where each word gets its next best label; without ``root`` given,
    each arc's best label."""
    rng = np.random.default_rng(7)
    label_scores = torch.from_numpy(rng.normal(size=(3, 7, 7, 5)))
    label_scores[..., 0] += 10.0
    lengths = torch.tensor([6, 3, 1])
    heads = mst(torch.from_numpy(rng.normal(size=(3, 7, 7))), lengths, multiroot)
    assert torch.equal(tree_labels(label_scores, heads, lengths), mst_labels(label_scores, heads, lengths))
    labels = tree_labels(label_scores, heads, lengths, root=0)
    for b, n in enumerate(lengths.tolist()):
        for m in range(1, n + 1):
            expected = 0 if heads[b, m] == 0 else 1 + label_scores[b, heads[b, m], m, 1:].argmax()
            assert labels[b, m] == expected
        assert labels[b, n + 1 :].eq(-100).all() and labels[b, 0] == -100


def _projective_trees(n: int, single_root: bool):
    """Every projective tree over n words (brute force), as head tuples."""
    for heads in itertools.product(range(n + 1), repeat=n):
        if single_root and heads.count(0) != 1:
            continue
        if any(h == m for m, h in enumerate(heads, 1)) or not _reaches_root(heads):
            continue
        if not any(nonprojective_arcs(list(heads))):
            yield heads


def _reaches_root(heads) -> bool:
    for m in range(1, len(heads) + 1):
        seen = set()
        while m != 0:
            if m in seen:
                return False
            seen.add(m)
            m = heads[m - 1]
    return True


@pytest.mark.parametrize("single_root", [True, False])
def test_eisner_finds_the_best_projective_tree(single_root):
    rng = np.random.default_rng(1)
    for n in range(1, 6):
        for _ in range(10):
            s = rng.normal(size=(n + 1, n + 1))
            best = max(sum(s[h, m] for m, h in enumerate(t, 1)) for t in _projective_trees(n, single_root))
            heads = eisner(s, single_root)
            assert sum(s[heads[m], m] for m in range(1, n + 1)) == pytest.approx(best)
            assert tuple(heads[1:]) in set(_projective_trees(n, single_root))


def test_projective_mst_decodes_every_sentence_of_a_batch():
    torch.manual_seed(0)
    scores, lengths = torch.randn(3, 7, 7), torch.tensor([6, 3, 1])
    heads = mst(scores, lengths, projective=True)
    assert heads[2, 1] == 0 and (heads[:, 0] == 0).all() and (heads[1, 4:] == 0).all()
    assert [int((heads[b, 1 : n + 1] == 0).sum()) for b, n in enumerate(lengths.tolist())] == [1, 1, 1]


def test_crossing_margin_chooses_between_the_best_spanning_and_projective_trees():
    """Margin 0 decodes as MST, an infinite one as Eisner; in between, a sentence keeps its
    spanning tree exactly where it outscores its projective tree by more than the margin."""
    from parser.decoding.decode import crossing_gaps, mst_with_margin, tree_scores

    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(40, 9, 9, generator=generator, dtype=torch.float64) * 3
    lengths = torch.randint(1, 9, (40,), generator=generator)
    spanning, projective = mst(scores, lengths), mst(scores, lengths, projective=True)
    torch.testing.assert_close(mst_with_margin(scores, lengths, 0.0), spanning)
    torch.testing.assert_close(mst_with_margin(scores, lengths, float("inf")), projective)
    _, _, gap = crossing_gaps(scores, lengths)
    manual = [sum(float(scores[b, spanning[b, m], m]) for m in range(1, n + 1))
              - sum(float(scores[b, projective[b, m], m]) for m in range(1, n + 1)) for b, n in enumerate(lengths.tolist())]
    torch.testing.assert_close(gap, torch.tensor(manual, dtype=torch.float64).clamp_min(0))
    torch.testing.assert_close(tree_scores(scores, spanning, lengths) - tree_scores(scores, projective, lengths), gap)
    crossing = torch.tensor([any(nonprojective_arcs(spanning[b, 1 : n + 1].tolist())) for b, n in enumerate(lengths.tolist())])
    assert crossing.sum() > 5 and (gap[~crossing] == 0).all() and (gap[crossing] > 0).all()
    margin = float(gap[crossing].median())
    chosen = mst_with_margin(scores, lengths, margin)
    for b in range(len(lengths)):
        torch.testing.assert_close(chosen[b], spanning[b] if gap[b] > margin else projective[b])


def test_decoding_is_one_value_for_every_route():
    """``Decoding`` picks the route (spanning, projective, margin), refuses projective with a
    margin, and gives the heads' best labels; a predict-time change is a new value."""
    import dataclasses

    from objectives.conventions import ConfigurationError
    from parser.decoding.decode import Decoding, mst_with_margin

    generator = torch.Generator().manual_seed(3)
    arcs, labels = torch.randn(4, 8, 8, generator=generator), torch.randn(4, 8, 8, 5, generator=generator)
    lengths = torch.tensor([7, 5, 3, 1])
    spanning = Decoding()
    heads, chosen = spanning(arcs, labels, lengths)
    torch.testing.assert_close(heads, mst(arcs, lengths))
    torch.testing.assert_close(chosen, mst_labels(labels, heads, lengths))
    projective = dataclasses.replace(spanning, projective=True)
    torch.testing.assert_close(projective.heads(arcs, lengths), mst(arcs, lengths, projective=True))
    margin = Decoding(multiroot=True, crossing_margin=0.5)
    torch.testing.assert_close(margin.heads(arcs, lengths), mst_with_margin(arcs, lengths, 0.5, multiroot=True))
    assert not spanning.projective  # replace made a new value
    with pytest.raises(ConfigurationError, match="not both"):
        Decoding(projective=True, crossing_margin=1.0)
