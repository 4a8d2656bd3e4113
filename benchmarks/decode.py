"""Decoding speed of `parser.decode.mst` against a plain per-sentence reference.

Sentence lengths come from the UD English-EWT test set (`$UD_DIR`, default
`<repo>/../shared/data/ud`), or are sampled (mean 12, max 80) if it is missing.
Scores are either gaussian ("random", the worst case: nearly every sentence needs
Chu-Liu-Edmonds) or gaussian plus 10 on the arcs of a random tree ("peaked", like a
trained parser). The reference decodes each sentence alone with one unconstrained
CLE per candidate root child. Prints the median, over interleaved repeats, of the
milliseconds per sentence.

    python3 -m benchmarks.decode [--sentences 300] [--repeats 3] [--batch-size 32]
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from parser.decode import chu_liu_edmonds, mst

REPO = Path(__file__).resolve().parents[1]
TEST_SET = "UD_English-EWT/en_ewt-ud-test.conllu"


def ud_lengths(rng: np.random.Generator) -> np.ndarray:
    """Words per sentence of the EWT test set, or a UD-like sample."""
    path = (
        Path(os.environ.get("UD_DIR", REPO.parent / "shared" / "data" / "ud"))
        / TEST_SET
    )
    if not path.is_file():
        print(f"{path} not found: sampling lengths")
        return np.clip(rng.gamma(2.0, 6.0, size=2000).round(), 1, 80).astype(int)
    lengths, words = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            if words:
                lengths.append(words)
            words = 0
        elif line.split("\t", 1)[0].isdigit():  # skips comments, ranges, empty nodes
            words += 1
    if words:
        lengths.append(words)
    return np.array(lengths)


def make_batches(
    lengths: np.ndarray, kind: str, batch_size: int, rng: np.random.Generator
):
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
    return sum(
        float(s.double().gather(1, h[:, None, :]).squeeze(1)[:, 1:].sum())
        for (s, _), h in zip(batches, heads)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sentences", type=int, default=300, help="subsample of the test set"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    lengths = ud_lengths(rng)
    if args.sentences < len(lengths):
        lengths = rng.choice(lengths, size=args.sentences, replace=False)
    print(
        f"{len(lengths)} sentences, mean {lengths.mean():.1f} words, "
        f"max {lengths.max()}"
    )

    methods = {
        "mst": lambda s, n: mst(s, n),
        "mst multiroot": lambda s, n: mst(s, n, multiroot=True),
        "reference": reference,
    }
    print(f"{'scores':<8} {'method':<14} {'ms/sentence':>11}")
    for kind in ("peaked", "random"):
        batches = make_batches(lengths, kind, args.batch_size, rng)
        times = {name: [] for name in methods}
        outputs = {}
        for _ in range(args.repeats):
            for name, decode in methods.items():
                start = time.perf_counter()
                outputs[name] = [decode(s, n) for s, n in batches]
                times[name].append((time.perf_counter() - start) * 1e3 / len(lengths))
        for name in methods:
            print(f"{kind:<8} {name:<14} {np.median(times[name]):11.3f}")
        gap = total_score(batches, outputs["reference"]) - total_score(
            batches, outputs["mst"]
        )
        assert abs(gap) < 1e-3 * len(lengths), f"mst and reference disagree by {gap}"


if __name__ == "__main__":
    main()
