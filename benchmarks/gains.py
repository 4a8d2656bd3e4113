"""Where a semi-supervised parser's gain lands: test LAS by how each word was seen in training.

    python -m benchmarks.gains --treebank UD_X --baseline PRED[,PRED...] --run NAME PRED[,PRED...] [--run ...]
        [--reference PRED] [--labeled 100] [--root DIR] [--results FILE.jsonl]

Every word of the treebank's test file (a syntactic word, its form lower-cased) falls in one
of three groups: seen in the first ``--labeled`` sentences of train (the trees every parser
of the setting learns from), seen only in the rest of train (the text a student reads
without trees), seen nowhere in train. Per group: its share of the test words, the LAS of
the ``--baseline`` predictions and of each ``--run`` (several files joined by commas, e.g.
the seeds of one recipe: the mean of their LAS), the difference, and the points of
whole-test LAS the group adds to it (difference x share; the groups' points sum to the
whole difference). ``--reference`` (a parser trained on every tree of train) adds its LAS
and the share of the gap between baseline and reference that each run closes in each group.
LAS as the CoNLL 2018 scorer counts it (``parser.evaluate``). Nothing is trained: seconds.
``--results`` appends one JSON row per run (its groups, the commit and the exact command).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from benchmarks.common import add_root_option, append_row, markdown_table, provenance
from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_file
from parser.data.sentences import Sentence, read_conllu
from parser.evaluate import aligned, labeled_attachments

GROUPS = ("in the labeled sentences", "only in the unlabeled text", "nowhere in train")


def word_groups(train: list[Sentence], labeled: int, test: list[Sentence]) -> list[int]:
    """Each test word's group, flattened over sentences: 0 its lower-cased form is in the
    first ``labeled`` sentences of ``train``, 1 only in the rest of it, 2 nowhere in it."""
    in_labeled = {word.lower() for sentence in train[:labeled] for word in sentence.words}
    in_train = {word.lower() for sentence in train for word in sentence.words}
    return [0 if word.lower() in in_labeled else 1 if word.lower() in in_train else 2
            for sentence in test for word in sentence.words]


def attachments(gold_path: str | os.PathLike, predictions: list[str]) -> list[float]:
    """Per test word, flattened: the share of the ``predictions`` files that attach it right
    with the right label (1.0 or 0.0 for one file)."""
    counts = None
    for path in predictions:
        right = [float(r) for gold, pred in aligned(gold_path, path) for r in labeled_attachments(gold, pred)]
        counts = right if counts is None else [a + b for a, b in zip(counts, right, strict=True)]
    return [count / len(predictions) for count in counts]


@dataclass(frozen=True)
class Group:
    """One group's test words (``words``; ``share`` of the test, percent) and the LAS of the
    baseline, of a run and of the reference (``None`` without one)."""

    words: int
    share: float
    baseline: float
    run: float
    reference: float | None

    @property
    def points(self) -> float:
        """What the group adds to the whole test's LAS difference, in LAS points."""
        return (self.run - self.baseline) * self.share / 100

    @property
    def gap_closed(self) -> float | None:
        """The share of the baseline's gap to the reference that the run closes, percent."""
        if self.reference is None or self.reference == self.baseline:
            return None
        return 100 * (self.run - self.baseline) / (self.reference - self.baseline)


def compare(groups: list[int], baseline: list[float], run: list[float], reference: list[float] | None) -> dict[str, Group]:
    """Each of ``GROUPS`` and ``"all"`` -> its Group, from per-word groups and attachments."""
    def las(values: list[float], members: list[int]) -> float:
        return 100 * sum(values[i] for i in members) / len(members) if members else 0.0

    result = {}
    for name, members in [*((GROUPS[g], [i for i, k in enumerate(groups) if k == g]) for g in range(len(GROUPS))),
                          ("all", list(range(len(groups))))]:
        result[name] = Group(len(members), 100 * len(members) / len(groups), las(baseline, members), las(run, members),
                             None if reference is None else las(reference, members))
    return result


def table(name: str, compared: dict[str, Group]) -> str:
    reference = compared["all"].reference is not None
    header = ["test words seen", "words", "share", "baseline LAS", f"{name} LAS", "difference", "LAS points",
              "share of the gain", *(["reference LAS", "gap closed"] if reference else [])]
    total = compared["all"].points
    rows = []
    for group_name, group in compared.items():
        row = [group_name, f"{group.words:,}", f"{group.share:.1f}%", f"{group.baseline:.2f}", f"{group.run:.2f}",
               f"{group.run - group.baseline:+.2f}", f"{group.points:+.2f}",
               f"{100 * group.points / total:.0f}%" if total else "-"]
        if reference:
            row += [f"{group.reference:.2f}", "-" if group.gap_closed is None else f"{group.gap_closed:.0f}%"]
        rows.append(row)
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--treebank", required=True, help="its train file gives the groups, its test file the gold trees")
    cli.add_argument("--baseline", required=True, help="the baseline's test predictions: PRED[,PRED...]")
    cli.add_argument("--run", nargs=2, action="append", required=True, metavar=("NAME", "PRED[,PRED...]"))
    cli.add_argument("--reference", help="the test predictions of a parser trained on every tree of train")
    cli.add_argument("--labeled", type=int, default=100, help="the labeled sentences: the first of train")
    add_root_option(cli)
    cli.add_argument("--results", help="a JSON-lines file to append each run's row to")
    args = cli.parse_args(argv)
    recorded = provenance(["-m", "benchmarks.gains", *(sys.argv[1:] if argv is None else argv)])
    gold = treebank_file(args.treebank, "test", args.root)
    groups = word_groups(read_conllu(treebank_file(args.treebank, "train", args.root)), args.labeled, read_conllu(gold))
    baseline = attachments(gold, args.baseline.split(","))
    reference = attachments(gold, [args.reference]) if args.reference else None
    for name, predictions in args.run:
        compared = compare(groups, baseline, attachments(gold, predictions.split(",")), reference)
        print(f"\n{args.treebank}, {args.labeled} labeled: {name} against the baseline\n")
        print(table(name, compared))
        if args.results:
            append_row(args.results, {
                "run": name, "treebank": args.treebank, "labeled": args.labeled, "baseline": args.baseline,
                "predictions": predictions, "reference": args.reference,
                "groups": {k: {"words": g.words, "baseline": round(g.baseline, 4), "run": round(g.run, 4),
                               "reference": None if g.reference is None else round(g.reference, 4)}
                           for k, g in compared.items()},
                **recorded})


if __name__ == "__main__":
    run_reporting_errors(main)
