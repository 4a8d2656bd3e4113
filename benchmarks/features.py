"""What one more thing adds to a target's 100-tree fine-tuning: character vectors, its nearest
treebanks beside it, word vectors of its own text.

    OMP_NUM_THREADS=1 python -m benchmarks.features run --target UD_Welsh-CCG [UD_X ...] --feature characters \\
        --base runs/base/multilingual_base/version_0/checkpoints/best.ckpt [--seed 1] [--output runs/features]
    python -m benchmarks.features report

``run``: the base fine-tuned on the target's first 100 trees as ``configs/transfer.yaml`` does (400
steps, chosen on the first 100 dev trees), once alone and once with the feature; a row per target
in ``docs/results/language_features.jsonl`` with both runs' dev LAS (what a user with 100 trees can
measure) and test LAS and their differences. The features:

- ``characters``: ``--model.encoder_options.characters 64`` (the LSTM's columns for them start at zero);
- ``relatives``: the 3 treebanks nearest the target (``treeexp nearness`` on its 100 trees and the
  rest of its train file as raw text, among every other treebank under ``--root``, ranked once into
  OUTPUT/TARGET/nearness.json) sharing half of every epoch by nearness, as
  ``configs/pipelines/transfer.yaml``'s fine-tuning does;
- ``characters+relatives``: both;
- ``relatives+treebank_vectors``: the nearest treebanks and a learned vector per treebank
  (``--model.encoder_options.treebank_embedding``, starting at zero: UDify's and MaChAmp's dataset
  embeddings), so the parser can tell the target's trees from its relatives';
- ``word_vectors``: ``--model.encoder_options.word_vectors`` ``--vectors`` (a ``treeexp vectors`` file).

``--against FEATURE`` measures the gain over that feature's run instead of the fine-tuning alone
(``relatives+treebank_vectors --against relatives``: what the vectors add). ``--nearest N`` gives the
feature's run the N nearest treebanks instead of the recipe's 3, each in proportion to its nearness,
so that N = every candidate is the whole mix weighted toward the target (``relatives --nearest 48
--against relatives``: what the farther ones add; the run against keeps 3). Runs in
OUTPUT/TARGET/FEATURE/seedS (alone: ``alone``; with ``--nearest N``: FEATURE-nearestN), reused once
finished. ``report``: the table of the rows, a feature's mean gains and the targets where it gains on dev.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import ROWS, add_root_option, append_row, markdown_table, portable, read_rows
from parser.data.datamodule import treebank_file
from parser.pipeline import nearest_treebanks, test_scores
from parser.runs import config_path, fit
from parser.training.callbacks import MONITOR

TREES = 100
CHARACTERS = 64
NEAREST, SHARE = 3, 0.5  # configs/pipelines/transfer.yaml
FEATURES = ("characters", "relatives", "characters+relatives", "relatives+treebank_vectors", "word_vectors")
ALONE = "alone"
RESULTS = ROWS / "language_features.jsonl"


def fine_tuned(target: str, name: str, extra: Sequence[str], base: str, seed: int, root: Path, output: Path) -> dict:
    """The base fine-tuned on the target's first 100 trees with the ``extra`` overrides, in
    OUTPUT/TARGET/NAME/seedS: its run's dev and test LAS, cost (CPU minutes, peak memory) and
    provenance (a finished run reused)."""
    folder = output / target / name / f"seed{seed}"
    overrides = ["--data.treebank", target, "--data.root", str(root), "--model.init", base,
                 "--data.labeled_size", str(TREES), "--data.dev_size", str(TREES),
                 "--seed_everything", str(seed), "--data.seed", str(seed), *extra]
    run = fit(config_path("transfer.yaml"), overrides, folder)
    test = test_scores(run.best, treebank_file(target, "test", root), folder / "test.conllu")
    usage = run.usage()
    return {"dev_las": round(run.dev()[MONITOR], 2), "test_uas": round(test["uas"], 2), "test_las": round(test["las"], 2),
            "cpu_minutes": round(usage["cpu_seconds"] / 60, 1) if usage else None,
            "peak_rss_mib": round(usage["peak_rss_bytes"] / 2**20) if usage else None, **run.provenance()}


def overrides(feature: str, target: str, root: Path, output: Path, vectors: Path | None,
              nearest: int = NEAREST) -> list[str]:
    """The fine-tuning's overrides that add ``feature`` (none for ``alone``), relatives the ``nearest``."""
    extra = []
    if "characters" in feature:
        extra += ["--model.encoder_options.characters", str(CHARACTERS)]
    if "relatives" in feature:
        from parser.nearness import relative_shares

        train = treebank_file(target, "train", root)
        ranked = nearest_treebanks(train, TREES, None, str(root), None, output / target, print)
        shares = relative_shares(ranked, nearest, SHARE)
        extra += ["--data.relatives", json.dumps({name: round(share, 4) for name, share in shares.items()})]
    if "treebank_vectors" in feature:
        extra += ["--model.encoder_options.treebank_embedding", "true"]
    if feature == "word_vectors":
        extra += ["--model.encoder_options.word_vectors", str(vectors)]
    return extra


def run(targets: Sequence[str], feature: str, base: str, seed: int, root: Path, output: Path,
        vectors: Path | None = None, results: Path = RESULTS, against: str = ALONE, nearest: int = NEAREST) -> list[dict]:
    """A row per target, appended to ``results``: the fine-tuning with ``feature`` (its relatives the
    ``nearest``) beside the one with ``against`` (a feature, or alone; its relatives the recipe's 3)."""
    rows = []
    wide = nearest != NEAREST and "relatives" in feature
    name = f"{feature}-nearest{nearest}" if wide else feature
    for target in targets:
        without = fine_tuned(target, against, overrides(against, target, root, output, vectors), base, seed, root, output)
        added = fine_tuned(target, name, overrides(feature, target, root, output, vectors, nearest), base, seed, root,
                           output)
        head = {"treebank": target, "trees": TREES, "stage": "finetuned", "feature": feature, "seed": seed,
                **({"nearest": nearest} if wide else {}), **({"against": against} if against != ALONE else {})}
        rows.append(record_gain(head, added, without, "without", root, results, f"{target} + {name} over {against}"))
    return rows


def record_gain(head: dict, added: dict, alone: dict, key: str, root: Path, results: Path, label: str) -> dict:
    """The row ``head`` + the ``added`` run + its dev and test LAS gains over the ``alone`` run (what that was
    under ``key``), its paths portable, appended to ``results`` and said in a line starting with ``label``."""
    row = portable({**head, **added, "dev_gain": round(added["dev_las"] - alone["dev_las"], 2),
                    "test_gain": round(added["test_las"] - alone["test_las"], 2),
                    key: {name: alone[name] for name in ("dev_las", "test_las", "command", "commit")}},
                   {str(root): "$UD_DIR"})
    append_row(results, row)
    print(f"{label}: dev {row['dev_gain']:+.2f} test {row['test_gain']:+.2f}", flush=True)
    return row


def report(rows: list[dict]) -> str:
    """Per feature and target: dev and test LAS with it and their gains over the fine-tuning alone
    (or over the feature it was run ``against``; mean over seeds), then the feature's mean gains and
    on how many targets it gains on dev."""
    found = defaultdict(lambda: defaultdict(list))
    for row in rows:
        label = row["feature"] + (f" ({row['nearest']} nearest)" if "nearest" in row else "")
        found[label + (f" over {row['against']}" if "against" in row else "")][row["treebank"]].append(row)
    table = []
    for feature, targets in found.items():
        dev, test = [], []
        for target, runs in sorted(targets.items()):
            dev.append(statistics.mean(r["dev_las"] - r["without"]["dev_las"] for r in runs))
            test.append(statistics.mean(r["test_las"] - r["without"]["test_las"] for r in runs))
            table.append([feature, target, len(runs), f"{statistics.mean(r['dev_las'] for r in runs):.2f}",
                          f"{dev[-1]:+.2f}", f"{statistics.mean(r['test_las'] for r in runs):.2f}", f"{test[-1]:+.2f}"])
        table.append([f"**{feature}, mean**", f"gains on dev: {sum(d > 0 for d in dev)} of {len(dev)}", "", "",
                      f"{statistics.mean(dev):+.2f}", "", f"{statistics.mean(test):+.2f}"])
    return markdown_table(["feature", "target", "seeds", "dev LAS", "dev gain", "test LAS", "test gain"], table, "llrrrrr")


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("command", choices=("run", "report"))
    add_root_option(cli)
    cli.add_argument("--target", nargs="+", help="run: the target treebanks")
    cli.add_argument("--feature", choices=FEATURES, help="run: what is added to the fine-tuning")
    cli.add_argument("--against", choices=(ALONE, *FEATURES), default=ALONE,
                     help="run: the fine-tuning the gain is measured over (default: alone)")
    cli.add_argument("--nearest", type=int, default=NEAREST,
                     help=f"run: the nearest treebanks a relatives feature reads (default {NEAREST}, the recipe's)")
    cli.add_argument("--base", help="run: the multilingual base's checkpoint")
    cli.add_argument("--vectors", type=Path, help="run, word_vectors: the word2vec text file")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--output", type=Path, default=Path("runs/features"), help="run: the runs' folder")
    cli.add_argument("--results", type=Path, default=RESULTS, help="the rows' file")
    args = cli.parse_args(argv)
    if args.command == "report":
        print(report(read_rows(args.results)))
        return
    if not (args.target and args.feature and args.base):
        cli.error("run needs --target, --feature and --base")
    for option, value in (("--feature", args.feature), ("--against", args.against)):
        if value == "word_vectors" and not args.vectors:
            cli.error(f"{option} word_vectors needs --vectors")
    if args.nearest != NEAREST and "relatives" not in args.feature or args.nearest < 1:
        cli.error("--nearest N (N >= 1) is for the relatives features")
    if args.against == args.feature and args.nearest == NEAREST:
        cli.error("--against names the feature itself")
    run(args.target, args.feature, args.base, args.seed, args.root.resolve(), args.output, args.vectors, args.results,
        args.against, args.nearest)


if __name__ == "__main__":
    main()
