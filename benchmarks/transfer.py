"""A new language from the multilingual base: test scores of every run of a transfer
pipeline's folder (``configs/pipelines/transfer.yaml``; any pipeline's, with ``--results``:
``new_language.yaml``'s in ``docs/results/new_language.jsonl``), recorded as rows, and their table.

    python -m benchmarks.transfer record --treebank UD_Wolof-WTB --output runs/transfer/UD_Wolof-WTB \
        [--zero-shot BASE.ckpt]
    python -m benchmarks.transfer report

``record`` parses the target's test file with the best parser of every finished run under
``OUTPUT/<stage>/seed<S>`` (and with the base itself, ``--zero-shot``), scores it with
``parser.evaluate`` (CoNLL 2018 definitions) and appends one row per run to ``--results``
(stage, seed, dev and test LAS/UAS, CPU minutes and peak RSS of its train.py, its command,
the commit); a run already recorded for the treebank is skipped. ``report`` prints a table
per treebank: mean and spread over seeds of each stage; ``summary`` one line per target beside
what the target's own trees give (the low-resource grid's rows, else ``new_language.yaml``'s), the
whole training file and UDPipe 2:

    python -m benchmarks.transfer summary
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.common import (ROOT, TRANSFER, append_row, grouped_bars, markdown_table, mean_sd, provenance, read_rows)
from benchmarks.recorded import STAGES, Target, targets
from parser import pipeline
from parser.pipeline import run_folder, stage_runs
from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_file
from parser.training.callbacks import MONITOR

RESULTS = TRANSFER
FIGURE = ROOT / "docs" / "figures" / "transfer.png"



def test_scores(checkpoint: Path, test_file: Path, scratch: Path) -> dict[str, float]:
    """Test UAS and LAS of a parser, as the row keeps them (``parser.pipeline.test_scores``)."""
    scores = pipeline.test_scores(checkpoint, test_file, scratch)
    return {"test_uas": round(scores["uas"], 2), "test_las": round(scores["las"], 2)}


def relative(path: Path | str) -> str:
    """A path as rows keep it: relative to the repository where it lies inside."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def record(treebank: str, output: Path, results: Path, zero_shot: Path | None, root: str | None) -> list[dict]:
    """Rows of every finished run under ``output`` not yet in ``results``."""
    test_file = treebank_file(treebank, "test", root)
    known = {(r["treebank"], r["run"]) for r in read_rows(results)}
    rows = []
    runs = [(stage, seed, run_folder(output, stage, seed), run) for stage, seed, run in stage_runs(output)]
    for stage, seed, folder, run in ([("zero-shot", None, None, None)] if zero_shot else []) + runs:
        key = relative(zero_shot) if folder is None else relative(folder)
        if (treebank, key) in known:
            continue
        if folder is None:
            checkpoint = zero_shot
            row = {"stage": stage, "seed": None, "run": key, **provenance(
                ["-m", "benchmarks.transfer", "record", "--treebank", treebank, "--output", relative(output),
                 "--zero-shot", key])}
        else:
            checkpoint, usage = run.best, run.usage()
            row = {"stage": stage, "seed": seed, "run": key,
                   "dev_las": round(run.dev().get(MONITOR, float("nan")), 2),
                   "cpu_minutes": round(usage.get("cpu_seconds", float("nan")) / 60, 1),
                   "peak_rss_mib": round(usage.get("peak_rss_bytes", float("nan")) / 2**20),
                   **run.provenance()}  # the commit and command that trained it
        scores = test_scores(checkpoint, test_file, output / "test" / f"{stage}-{row['seed']}.conllu")
        row = {"treebank": treebank, **row, **scores}
        append_row(results, row)
        rows.append(row)
    return rows


def report(results: Path) -> str:
    """A table per treebank: each stage's test LAS (mean ± sd over seeds), dev LAS and cost."""
    rows = read_rows(results)
    out = []
    for treebank in sorted({r["treebank"] for r in rows}):
        mine = [r for r in rows if r["treebank"] == treebank]
        table = []
        for stage in sorted({r["stage"] for r in mine}, key=lambda s: STAGES.index(s) if s in STAGES else len(STAGES)):
            group = [r for r in mine if r["stage"] == stage]

            def stat(key: str, digits: int = 2, group: list[dict] = group) -> str:
                return mean_sd([r[key] for r in group if r.get(key) is not None], digits)

            table.append([stage, len(group), stat("test_las"), stat("test_uas"), stat("dev_las"), stat("cpu_minutes", 1),
                          stat("peak_rss_mib", 0)])
        header = ["stage", "seeds", "test LAS", "test UAS", "dev LAS", "CPU min", "peak RSS MiB"]
        out += [f"### {treebank}", "", markdown_table(header, table, "lrrrrrr"), ""]
    return "\n".join(out)


def summary(found: list[Target]) -> str:
    """Markdown, a line per target: test LAS (mean ± sd over seeds) of the base as it is, the
    target's own 100 trees (supervised, best recipe), the base fine-tuned on them, its noisy
    student (+ GE), the student's margin over the best parser of the target's own trees, and
    on the whole training file: the grid's parser, the base fine-tuned, UDPipe 2."""
    header = ["target", "zero-shot", "own 100 trees: supervised", "own 100 trees: best recipe", "fine-tuned base",
              "+ self-training", "+ GE", "self-training - best own", "whole file: own", "whole file: base", "UDPipe 2"]
    rows = []
    for target in found:
        las = target.stages
        best = target.best_own or target.supervised
        margin = f"{statistics.mean(las['student']) - statistics.mean(best):+.1f}" if las["student"] and best else "-"
        own = [las["zero-shot"], target.supervised, target.best_own, las["finetuned"], las["student"], las["student_ge"]]
        whole = [target.full_own, las["full"], target.udpipe]
        rows.append([target.name, *(mean_sd(seeds, 1, "-") for seeds in own), margin,
                     *(mean_sd(seeds, 1, "-") for seeds in whole)])
    return markdown_table(header, rows, "l" + "r" * 10)


def figure(found: list[Target], output: Path) -> Path:
    """Grouped bars per target: its own 100 trees, the base fine-tuned on them and its student,
    the whole training file (own, from the base) and UDPipe 2."""
    series = [("own 100 trees: supervised", "0.6", [t.supervised for t in found]),
              ("own 100 trees: best recipe", "C1", [t.best_own for t in found]),
              ("base fine-tuned, 100 trees", "C2", [t.stages["finetuned"] for t in found]),
              ("+ self-training", "C3", [t.stages["student"] for t in found]),
              ("whole file: own", "C0", [t.full_own for t in found]),
              ("whole file: base", "C4", [t.stages["full"] for t in found]),
              ("UDPipe 2 (published)", "0.85", [t.udpipe for t in found])]
    return grouped_bars([t.name for t in found], series, output)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("action", choices=["record", "report", "summary"])
    cli.add_argument("--treebank")
    cli.add_argument("--output", type=Path, help="the transfer pipeline's --output folder")
    cli.add_argument("--zero-shot", type=Path, default=None, help="the base parser, scored on the target as it is")
    cli.add_argument("--root", default=None, help="the folder of UD treebanks (default: $UD_DIR)")
    cli.add_argument("--results", type=Path, default=RESULTS)
    cli.add_argument("--figure", type=Path, default=FIGURE, help="summary: where to draw its figure")
    args = cli.parse_args(argv)
    if args.action == "report":
        print(report(args.results))
        return
    if args.action == "summary":
        found = targets(args.results)
        print(f"{summary(found)}\nfigure: {figure(found, args.figure)}")
        return
    if not args.treebank or not args.output:
        cli.error("record needs --treebank and --output")
    rows = run_reporting_errors(lambda: record(args.treebank, args.output, args.results, args.zero_shot, args.root))
    for row in rows:
        print(f"{row['treebank']} {row['stage']} seed {row['seed']}: test LAS {row['test_las']:.2f}")


if __name__ == "__main__":
    main()
