"""Decoding speed of `parser.decoding.decode.mst` (the batched torch decoder of
`objectives.arborescence`) against the NumPy decoder it replaced and two single-root baselines.

Sentence lengths come from the UD English-EWT test set (`$UD_DIR`, default
`data/ud`), or are sampled (mean 12, max 80) if it is missing.
Scores are either gaussian ("random", the worst case: nearly every sentence needs
Chu-Liu-Edmonds) or gaussian plus 10 on the arcs of a random tree ("peaked"); with
``--checkpoint``, also a trained parser's scores of its treebank's test sentences
("trained"). Baselines: "numpy mst" is `mst` until 2026-11-25 (greedy heads, else one NumPy
Chu-Liu-Edmonds per sentence with the single-root swap; tests/parser/numpy_mst.py), "numpy
multiroot" the same without the root constraint; "reweighted" takes the greedy heads where they form a
single-root tree, else lowers every root arc by more than any tree's score spread and
runs one unconstrained CLE (Stanojević & Cohen 2021; `mst` until 2026-11-24); "reference"
runs one unconstrained CLE per candidate root child. Prints the median, over
interleaved repeats, of the milliseconds per sentence and the NumPy decoder's time over
each method's (single-root methods against "numpy mst", multi-root against "numpy
multiroot"), and checks that every method finds trees of the same score. ``--device``
decodes scores on that device (CUDA timings synchronise).

    python3 -m benchmarks.decode [--sentences 300] [--repeats 3] [--batch-size 32] \
        [--checkpoint best.ckpt --treebank UD_English-EWT] [--device cpu]
"""

import argparse

import numpy as np
import torch

from benchmarks.common import interleaved
from parser.data.datamodule import treebank_file
from parser.decoding.decode import mst
from parser.fetch import default_root
from parser.model import Parser
from parser.data.sentences import read_conllu
from tests.parser.numpy_mst import _find_cycle, _tree_weights, chu_liu_edmonds, numpy_mst

TEST_SET = "UD_English-EWT/en_ewt-ud-test.conllu"


def ud_lengths(rng: np.random.Generator) -> np.ndarray:
    """Words per sentence of the EWT test set, or a UD-like sample."""
    path = default_root() / TEST_SET
    if not path.is_file():
        print(f"{path} not found: sampling lengths")
        return np.clip(rng.gamma(2.0, 6.0, size=2000).round(), 1, 80).astype(int)
    return np.array([len(sentence) for sentence in read_conllu(path)])


def make_batches(lengths: np.ndarray, kind: str, batch_size: int, rng: np.random.Generator):
    """Score batches `(B, N+1, N+1)` float32 with their lengths `(B,)`."""
    batches = []
    for start in range(0, len(lengths), batch_size):
        chunk = lengths[start : start + batch_size]
        size = chunk.max() + 1
        scores = rng.normal(size=(len(chunk), size, size))
        if kind == "peaked":
            for b, n in enumerate(chunk):
                order = rng.permutation(n) + 1
                heads = [0] + [order[rng.integers(i)] for i in range(1, n)]
                scores[b, heads, order] += 10.0
        batches.append((torch.from_numpy(scores).float(), torch.from_numpy(chunk)))
    return batches


def trained_batches(checkpoint: str, treebank: str, sentences: int, batch_size: int):
    """A trained parser's arc scores `(B, N+1, N+1)` float32 of the first ``sentences``
    test sentences of ``treebank``, in length-sorted batches, with their lengths `(B,)`."""
    model = Parser.load(checkpoint).eval()
    test = read_conllu(treebank_file(treebank, "test"))
    words = sorted((s.words for s in test[:sentences]), key=len)
    with torch.no_grad():
        return [(model(words[i : i + batch_size]).arcs.float(), torch.tensor([len(w) for w in words[i : i + batch_size]]))
                for i in range(0, len(words), batch_size)]


def greedy_tree(weights: np.ndarray) -> np.ndarray | None:
    """Each word's best head `(n+1,)` from one sentence's `_tree_weights` `(n+1, n+1)`, if
    that is a single-root tree (what `mst` keeps without Chu-Liu-Edmonds), else None."""
    greedy = weights.argmax(0)
    greedy[0] = 0
    return greedy if _find_cycle(greedy) is None and np.count_nonzero(greedy[1:] == 0) == 1 else None


def needs_cle(scores: torch.Tensor, lengths: torch.Tensor) -> int:
    """How many sentences of a batch `(B, N+1, N+1)` go to Chu-Liu-Edmonds."""
    return sum(greedy_tree(_tree_weights(scores[b, : n + 1, : n + 1].double().numpy())) is None
               for b, n in enumerate(lengths.tolist()))


def reweighted(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Single-root heads `(B, N+1)`: per sentence, the greedy heads where they form a
    single-root tree, else one unconstrained CLE after every root arc is lowered by more
    than the spread of any tree's score (`mst` until 2026-11-24)."""
    heads = torch.zeros(scores.shape[:2], dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        weights = _tree_weights(scores[b, : n + 1, : n + 1].double().numpy())
        greedy = greedy_tree(weights)
        if greedy is not None:
            heads[b, : n + 1] = torch.from_numpy(greedy)
            continue
        finite = weights[np.isfinite(weights)]
        weights[0] -= (n + 1) * (finite.max() - finite.min()) + 1.0
        heads[b, : n + 1] = torch.from_numpy(chu_liu_edmonds(weights))
    return heads


def reference(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Single-root heads `(B, N+1)`: per sentence, the best over root children r of
    unconstrained CLE where 0 -> r is the only root arc."""
    heads = torch.zeros(scores.shape[:2], dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        weights = scores[b, : n + 1, : n + 1].double().numpy().copy()
        weights[:, 0] = -np.inf
        np.fill_diagonal(weights, -np.inf)
        best, best_score = None, -np.inf
        for child in range(1, n + 1):
            forced = weights.copy()
            forced[0] = -np.inf
            forced[0, child] = weights[0, child]
            tree = chu_liu_edmonds(forced)
            tree_score = weights[tree[1:], np.arange(1, n + 1)].sum()
            if tree_score > best_score:
                best, best_score = tree, tree_score
        heads[b, : n + 1] = torch.from_numpy(best)
    return heads


def total_score(batches, heads) -> float:
    return sum(float(s.double().gather(1, h[:, None, :]).squeeze(1)[:, 1:].sum()) for (s, _), h in zip(batches, heads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=300, help="subsample of the test set")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint", help="a trained parser: also decode its scores")
    parser.add_argument("--treebank", default="UD_English-EWT", help="whose test set --checkpoint parses")
    parser.add_argument("--device", default="cpu", help="where the torch decoder runs (the NumPy ones on the host)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    lengths = ud_lengths(rng)
    if args.sentences < len(lengths):
        lengths = rng.choice(lengths, size=args.sentences, replace=False)
    print(f"{len(lengths)} sentences, mean {lengths.mean():.1f} words, max {lengths.max()}")
    kinds = {kind: make_batches(lengths, kind, args.batch_size, rng) for kind in ("peaked", "random")}
    if args.checkpoint:
        kinds["trained"] = trained_batches(args.checkpoint, args.treebank, args.sentences, args.batch_size)
        trained = torch.cat([n for _, n in kinds["trained"]]).double()
        slow = sum(needs_cle(s, n) for s, n in kinds["trained"])
        print(f"trained: {args.treebank}, {len(trained)} test sentences, mean {trained.mean():.1f} words, "
              f"{100 * slow / len(trained):.0f}% of them not a single-root tree by each word's best head")

    device = torch.device(args.device)

    def on_device(decode):
        return lambda scores, lengths: decode(scores.to(device), lengths.to(device)).cpu()  # .cpu() waits for the GPU

    methods = {
        "mst": on_device(lambda s, n: mst(s, n)),
        "numpy mst": numpy_mst,
        "mst multiroot": on_device(lambda s, n: mst(s, n, multiroot=True)),
        "numpy multiroot": lambda s, n: numpy_mst(s, n, multiroot=True),
        "reweighted": reweighted,
        "reference": reference,
    }
    baseline = {name: "numpy multiroot" if "multiroot" in name else "numpy mst" for name in methods}
    print(f"{'scores':<8} {'method':<16} {'ms/sentence':>11} {'numpy / method':>15}")
    for kind, batches in kinds.items():
        sentences = sum(len(n) for _, n in batches)
        outputs = {name: [decode(s, n) for s, n in batches] for name, decode in methods.items()}  # also the warm-up
        times = interleaved({name: lambda decode=decode: [decode(s, n) for s, n in batches]
                             for name, decode in methods.items()}, args.repeats, warmup=0)
        ms = {name: np.median(seconds) * 1e3 / sentences for name, seconds in times.items()}
        for name in methods:
            print(f"{kind:<8} {name:<16} {ms[name]:11.3f} {ms[baseline[name]] / ms[name]:14.2f}x")
        for name, expected in [("mst", "reference"), ("numpy mst", "reference"), ("reweighted", "reference"),
                               ("mst multiroot", "numpy multiroot")]:
            gap = total_score(batches, outputs[expected]) - total_score(batches, outputs[name])
            assert abs(gap) < 1e-3 * sentences, f"{name} and {expected} disagree by {gap}"


if __name__ == "__main__":
    main()
