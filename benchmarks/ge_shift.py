"""How far GE's targets from the labeled sample lie from the rates of the text GE trains on.

    python -m benchmarks.ge_shift [--treebank UD_English-EWT] [--sizes 100 1000]
        [--predicted K=PRED.conllu ...] [--write-sample K=OUT.conllu] [--sample 2000]

The low-resource protocol (``benchmarks.low_resource``) labels the first K training
sentences and leaves the rest unlabeled. ``configs/ge.yaml`` pulls the model's attachment
rates on that rest towards the rates of every (parent tag, child tag, side) triple in the
labeled sample (:func:`objectives.ge.tag_pair_constraints`, :func:`objectives.ge.estimate_targets`,
constraints whose child tag has fewer than ``MIN_COUNT`` labeled words left out, as in
training). Where the sample is not representative of the rest, GE pulls towards the wrong
rates. For each K this prints, over the constraints GE keeps, the distance between two
rate vectors ``a`` and ``b`` in two forms:

- ``penalty``: ``sum_k (a_k - b_k)^2``, GE's squared penalty at the corpus level;
- ``words``: ``sum_c w_c * TV_c(a, b)``, the total-variation distance between the head-tag
  distributions of each child tag ``c``, weighted by ``c``'s share ``w_c`` of the rest's words:
  the share of words whose (head tag, side) would have to change to turn one into the other.

Rows: the targets against the rest's gold rates (what GE pulls towards vs the truth) and
against test; the targets of K sentences drawn at random from the rest (mean of 5 draws)
against the remaining rest (sampling noise alone, no difference of text); and for each
``--predicted K=FILE`` (a parser's output on sentences of the rest, matched by ``sent_id``;
``--write-sample K=FILE`` writes ``--sample`` random sentences of the rest to parse):
the predicted trees' rates against the gold rates of the same sentences, and against the
targets. When a parser's own rates are already closer to the truth than the targets are,
the GE penalty can only pull it away.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from benchmarks.common import add_root_option
from parser.data.datamodule import treebank_file
from parser.statistics import UPOS_VOCAB, tree_tensors
from objectives.ge import MIN_COUNT, estimate_targets, tag_pair_constraints
from parser.data.sentences import Sentence, read_conllu, write_conllu

CONSTRAINTS = tag_pair_constraints()
DRAWS = 5
CHUNK = 256  # sentences per counting batch
CHILD_IDS = torch.tensor([UPOS_VOCAB.index(c.child) for c in CONSTRAINTS])


def rates(sentences: list[Sentence], min_count: int = 1) -> torch.Tensor:
    """``(K,)`` rates of :data:`CONSTRAINTS` in the sentences' trees (NaN: child tag rarer
    than ``min_count``), counted over chunks of sentences of similar length (one padded
    ``(B, N+1, N+1)`` arc tensor of a whole treebank would take gigabytes)."""
    fires, words = torch.zeros(len(CONSTRAINTS), dtype=torch.float64), torch.zeros(len(CONSTRAINTS), dtype=torch.float64)
    by_length = sorted(sentences, key=len)
    for start in range(0, len(by_length), CHUNK):
        heads, upos, lengths = tree_tensors(by_length[start : start + CHUNK])
        chunk = estimate_targets(CONSTRAINTS, heads, upos, lengths, UPOS_VOCAB, min_count=1)
        children = torch.bincount(upos.flatten(), minlength=len(UPOS_VOCAB))[CHILD_IDS].double()
        fires += chunk.nan_to_num(0.0) * children
        words += children
    return torch.where(words >= max(min_count, 1), fires / words.clamp_min(1), torch.nan)


def child_weights(sentences: list[Sentence]) -> dict[str, float]:
    """Each UPOS tag's share of the sentences' words."""
    tags = [tag for sentence in sentences for tag in sentence.upos]
    return {tag: tags.count(tag) / len(tags) for tag in set(tags)}


def distances(a: torch.Tensor, b: torch.Tensor, targets: torch.Tensor, weights: dict[str, float]) -> tuple[float, float]:
    """(squared penalty, weighted total variation) between rate vectors over the constraints
    ``targets`` keeps (not NaN); a rate NaN in ``a`` or ``b`` counts as 0."""
    kept = ~targets.isnan()
    gap = (a.nan_to_num(0.0) - b.nan_to_num(0.0)).where(kept, 0.0)
    words = sum(weights.get(c.child, 0.0) * abs(float(g)) / 2 for c, g in zip(CONSTRAINTS, gap))
    return float((gap**2).sum()), words


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_root_option(cli)
    cli.add_argument("--treebank", default="UD_English-EWT")
    cli.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    cli.add_argument("--predicted", nargs="*", default=[], metavar="K=FILE",
                     help="a parser's CoNLL-U output on sentences of the rest after K")
    cli.add_argument("--write-sample", nargs="*", default=[], metavar="K=FILE",
                     help="write --sample random sentences of the rest after K (seed 0) to FILE")
    cli.add_argument("--sample", type=int, default=2000)
    args = cli.parse_args()

    train, test = (read_conllu(treebank_file(args.treebank, split, args.root)) for split in ("train", "test"))
    predicted = {int(k): Path(f) for k, f in (item.split("=", 1) for item in args.predicted)}
    for k, out in (item.split("=", 1) for item in args.write_sample):
        rest = train[int(k):]
        write_conllu(random.Random(0).sample(rest, min(args.sample, len(rest))), out)
        print(f"wrote {out}")

    print("| labeled | rates | against | penalty | words |\n|---:|---|---|---:|---:|")
    for k in args.sizes:
        labeled, rest = train[:k], train[k:]
        targets = rates(labeled, MIN_COUNT)
        weights = child_weights(rest)
        rows = [("targets (first K)", "gold rest", distances(targets, rates(rest), targets, weights)),
                ("targets (first K)", "gold test", distances(targets, rates(test), targets, weights))]
        draws = []
        for draw in range(DRAWS):
            order = random.Random(draw).sample(range(len(rest)), len(rest))
            sample, remaining = [rest[i] for i in order[:k]], [rest[i] for i in order[k:]]
            drawn = rates(sample, MIN_COUNT)
            draws.append(distances(drawn, rates(remaining), drawn, weights))
        rows.append((f"targets (K random of the rest, mean of {DRAWS})", "gold remaining rest",
                     tuple(sum(d) / DRAWS for d in zip(*draws))))
        if k in predicted:
            parsed = read_conllu(predicted[k])
            by_id = {s.tokenlist.metadata["sent_id"]: s for s in rest}
            gold = [by_id[s.tokenlist.metadata["sent_id"]] for s in parsed]
            name = f"predicted ({predicted[k].name})"
            rows += [(name, "gold, same sentences", distances(rates(parsed), rates(gold), targets, weights)),
                     (name, "targets (first K)", distances(rates(parsed), targets, targets, weights))]
        for what, against, (penalty, words) in rows:
            print(f"| {k} | {what} | {against} | {penalty:.4f} | {100 * words:.1f}% |")


if __name__ == "__main__":
    main()
