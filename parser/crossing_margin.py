"""Choose the crossing margin of a trained parser on a dev set.

    python -m parser.crossing_margin CKPT DEV.conllu [--batch-size 32] [--device cpu]

A first-order parser may invent crossing arcs (on UD Wolof-WTB dev it predicted 44% of
trees non-projective where gold has 3.6%). ``--crossing-margin M`` keeps a sentence's best
spanning tree only where it outscores the sentence's best projective tree by more than M.
This parses the dev set once, then for every margin that changes a decision prints the
dev UAS/LAS (CoNLL 2018 definitions: the universal part of DEPREL) and the share of
non-projective predicted trees beside gold's, and names the margin of the best dev LAS
(the largest such margin on ties: fewer invented crossings) and the one whose share is
closest to gold's, for ``parser.predict --crossing-margin`` or ``--model.decoding.crossing_margin``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch

from parser.cli import run_reporting_errors
from parser.data.sentences import Sentence, read_conllu
from parser.data.vocab import universal_deprel
from parser.decoding.decode import crossing_gaps, root_label, tree_labels
from parser.evaluate import nonprojective_arcs
from parser.model import Parser
from parser.training.checkpoint import check_checkpoint_path


@dataclass(frozen=True)
class Choice:
    """Dev scores when sentences whose spanning tree wins by more than ``margin`` keep it."""

    margin: float
    uas: float
    las: float
    nonprojective: float  # share of predicted trees, %


@dataclass
class _Sentence:
    gap: float  # how much more the best spanning tree scores than the best projective one
    words: int
    correct: tuple[tuple[int, int], tuple[int, int]]  # (UAS, LAS) words right: spanning, projective
    crossing: bool  # whether the best spanning tree is non-projective


@torch.no_grad()
def _decode_both(parser: Parser, gold: list[Sentence], batch_size: int) -> list[_Sentence]:
    out = []
    for start in range(0, len(gold), batch_size):
        chunk = gold[start : start + batch_size]
        scores = parser([s.words for s in chunk])
        lengths = torch.tensor([len(s.words) for s in chunk], device=scores.arcs.device)
        spanning, projective, gaps = crossing_gaps(scores.arcs, lengths, parser.decoding.multiroot)
        root = root_label(parser.network.label_vocab.itos)
        trees = [(heads, tree_labels(scores.labels, heads, lengths, root)) for heads in (spanning, projective)]
        for i, sentence in enumerate(chunk):
            n, correct = len(sentence.words), []
            gold_labels = [universal_deprel(d) for d in sentence.deprels]
            for heads, labels in trees:
                h = heads[i, 1 : n + 1].tolist()
                names = [universal_deprel(parser.network.label_vocab.itos[x]) for x in labels[i, 1 : n + 1].tolist()]
                right = [a == b for a, b in zip(h, sentence.heads)]
                correct.append((sum(right), sum(r and x == y for r, x, y in zip(right, names, gold_labels))))
            crossing = any(nonprojective_arcs(spanning[i, 1 : n + 1].tolist()))
            out.append(_Sentence(float(gaps[i]), n, (correct[0], correct[1]), crossing))
    return out


def sweep(parser: Parser, gold: list[Sentence], batch_size: int = 32) -> list[Choice]:
    """Dev scores for margin 0 (plain MST), every margin that changes a decision, and inf
    (projective only), in increasing order."""
    sentences = _decode_both(parser, gold, batch_size)
    words = sum(s.words for s in sentences)
    margins = [0.0, *sorted({s.gap for s in sentences if s.gap > 0}), math.inf]
    choices = []
    for margin in margins:
        kept = [s.gap > margin for s in sentences]  # the spanning tree is kept
        uas = sum(s.correct[0 if k else 1][0] for s, k in zip(sentences, kept))
        las = sum(s.correct[0 if k else 1][1] for s, k in zip(sentences, kept))
        crossing = sum(s.crossing and k for s, k in zip(sentences, kept))
        choices.append(Choice(margin, 100 * uas / words, 100 * las / words, 100 * crossing / len(sentences)))
    return choices


def best(choices: list[Choice]) -> Choice:
    """The margin of the best dev LAS; the largest one among ties."""
    return max(choices, key=lambda c: (round(c.las, 6), c.margin))


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("checkpoint")
    cli.add_argument("dev", help="a CoNLL-U file with gold trees")
    cli.add_argument("--batch-size", type=int, default=32)
    cli.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def run() -> None:
        check_checkpoint_path(args.checkpoint)
        gold = read_conllu(args.dev)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        choices = sweep(Parser.load(args.checkpoint, map_location=device), gold, args.batch_size)
        share = 100 * sum(any(nonprojective_arcs(s.heads)) for s in gold) / len(gold)
        shown = choices if len(choices) <= 12 else [choices[round(i * (len(choices) - 1) / 11)] for i in range(12)]
        print(f"{'margin':>8} {'UAS':>7} {'LAS':>7} {'non-projective trees (gold ' + f'{share:.1f}%)':>32}")
        for c in sorted({*shown, best(choices)}, key=lambda c: c.margin):
            print(f"{c.margin:8.3f} {c.uas:7.2f} {c.las:7.2f} {c.nonprojective:31.1f}%")
        chosen = best(choices)
        closest = min(choices, key=lambda c: (abs(c.nonprojective - share), -c.margin))
        print(f"best dev LAS {chosen.las:.2f} at --crossing-margin {chosen.margin:.3f} "
              f"(plain MST {choices[0].las:.2f}, projective only {choices[-1].las:.2f}); the share of gold's "
              f"non-projective trees at --crossing-margin {closest.margin:.3f} ({closest.nonprojective:.1f}%, LAS {closest.las:.2f})")

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
