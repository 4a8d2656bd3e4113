"""A new language from the multilingual base: test scores of every run of a transfer
pipeline's folder (``configs/pipelines/transfer.yaml``; any pipeline's, with ``--results``:
``new_language.yaml``'s in ``docs/results/new_language.jsonl``), recorded as rows, and their table.

    python -m parser.pipeline configs/pipelines/transfer.yaml --treebank UD_Wolof-WTB --output runs/transfer/UD_Wolof-WTB --test
    python -m benchmarks.transfer record --treebank UD_Wolof-WTB --output runs/transfer/UD_Wolof-WTB
    python -m benchmarks.transfer report

``record`` reads the pipeline's own rows (``OUTPUT/runs.jsonl``: each run's test scores by
``parser.evaluate``, CoNLL 2018 definitions, with ``--test``) and appends one row per run to
``--results`` (stage, seed, dev and test LAS/UAS, CPU minutes and peak RSS of its train.py,
its command, the commit; the base's run is the zero-shot row; a choice's (``better_student``)
names the stage it took, ``chosen``, and costs nothing; ``dev_trees: K`` where the run
was chosen on the first K dev trees, ``--trees K``); a run already recorded for the treebank
is skipped. ``report`` prints a table per treebank and number of dev trees: mean and spread
over seeds of each stage; ``protocols`` the recipe (to the better of its two students, or its
one student in rows recorded before the second round) chosen on every dev tree beside the same
chosen on as many dev trees as labeled ones; ``recipes`` one line per target and recipe (a results file:
``transfer_relatives.jsonl`` holds the recipe since its fine-tuning reads the 3 nearest treebanks beside the
target's, issue #56); ``stages`` one line per target and stage of two recipes, dev and test; ``summary`` one line per target beside
what the target's own trees give (the low-resource grid's rows, else ``new_language.yaml``'s), the
whole training file and UDPipe 2:

    python -m benchmarks.transfer summary
"""

from __future__ import annotations

import argparse
import shlex
import statistics
from pathlib import Path

from benchmarks.common import (ROOT, TARGETS, TRANSFER, append_row, grouped_bars, markdown_table, mean_sd, portable,
                               provenance, read_rows)
from benchmarks.recorded import STAGES, Target, targets
from objectives.conventions import ConfigurationError
from parser import pipeline
from parser.pipeline import run_folder
from parser.cli import run_reporting_errors
from parser.training.callbacks import MONITOR

RESULTS = TRANSFER
RELATIVES = ROOT / "docs" / "results" / "transfer_relatives.jsonl"  # the recipe's fine-tuning beside the 3 nearest treebanks
# the recipe as it ships (the fine-tuning at 2e-4, two rounds of 200-step students at 1e-4, the better of
# them), chosen on 100 dev trees, on the base as it ships (1500 steps)
SHIPPED = (ROOT / "docs" / "results" / "transfer_finetuning_lr2e-4_base1500.jsonl",)
FIGURE = ROOT / "docs" / "figures" / "transfer.png"
FINAL = "better_student"  # configs/pipelines/transfer.yaml's last stage: the better of its two students on dev
TRAININGS = ("finetuned", "student", "round2")  # the recipe's trainings once the base exists: what a language costs


def option(command: str | None, name: str) -> int | None:
    """The integer value of the option ``name`` in a run's command, None where it has none."""
    words = shlex.split(command or "")
    return int(words[words.index(name) + 1]) if name in words else None


def dev_trees(command: str | None) -> int | None:
    """The dev trees a run chose its best checkpoint on (``--data.dev_size K``), None for all."""
    return option(command, "--data.dev_size")


def record(treebank: str, output: Path, results: Path) -> list[dict]:
    """Rows of every run in the pipeline folder ``output`` not yet in ``results``, read from its
    ``runs.jsonl`` (``treeexp pipeline ... --test`` scored each run on the test file): the base's
    run is its zero-shot row; a run chosen on the first K dev trees says ``dev_trees: K``."""
    ran = pipeline.read_rows(output)
    if not ran:
        raise ConfigurationError(f"no {output / pipeline.RESULTS}: no run of a pipeline has ended in {output}")
    known = {(r["treebank"], r["run"]) for r in read_rows(results)}
    recording = provenance(["-m", "benchmarks.transfer", "record", "--treebank", treebank, "--output", str(output)])
    rows = []
    for run in ran:
        if "test" not in run:
            raise ConfigurationError(f"{output / pipeline.RESULTS}: its {run['stage']} run has no test scores: run the "
                                     "pipeline again with --test (its runs are reused)")
        key = run["checkpoint"] if run["seed"] is None else str(run_folder(output, run["stage"], run["seed"]))
        if (treebank, key) in known:
            continue
        trained = {"commit": run["commit"], "command": run["command"], "date": run.get("date") or recording["date"],
                   **({"machine": run["machine"]} if run.get("machine") else {})}
        # a choice's dev LAS is the run's it took, where that run was trained here (a base's own dev is no target's)
        scored = next((r for r in ran if r["stage"] == run["chosen"] and r["seed"] in (run["seed"], None)), run) \
            if "chosen" in run else run
        row = {"treebank": treebank, "stage": "zero-shot" if run["stage"] == "base" else run["stage"], "seed": run["seed"],
               "run": key, **({"chosen": run["chosen"]} if "chosen" in run else {}),
               **({"dev_las": round(run["dev"][MONITOR], 2)} if scored["command"] and MONITOR in run["dev"] else {}),
               **({"cpu_minutes": run["cpu_minutes"], "peak_rss_mib": run["peak_rss_mib"]} if run["command"] else {}),
               **(trained if run["command"] else recording),
               **({"dev_trees": k} if (k := run.get("dev_trees") or dev_trees(run["command"])) else {}),
               "test_uas": round(run["test"]["uas"], 2), "test_las": round(run["test"]["las"], 2)}
        row = portable(row)  # a given run's command names its machine's paths
        append_row(results, row)
        rows.append(row)
    return rows


def report(results: Path) -> str:
    """A table per treebank (and per number of dev trees its runs were chosen on): each stage's test
    LAS (mean ± sd over seeds), dev LAS and cost."""
    rows = read_rows(results)
    out = []
    for treebank, chosen_on in sorted({(r["treebank"], r.get("dev_trees") or 0) for r in rows}):
        mine = [r for r in rows if r["treebank"] == treebank and (r.get("dev_trees") or 0) == chosen_on]
        table = []
        for stage in sorted({r["stage"] for r in mine}, key=lambda s: STAGES.index(s) if s in STAGES else len(STAGES)):
            group = [r for r in mine if r["stage"] == stage]

            def stat(key: str, digits: int = 2, group: list[dict] = group) -> str:
                return mean_sd([r[key] for r in group if r.get(key) is not None], digits)

            table.append([stage, len(group), stat("test_las"), stat("test_uas"), stat("dev_las"), stat("cpu_minutes", 1),
                          stat("peak_rss_mib", 0)])
        header = ["stage", "seeds", "test LAS", "test UAS", "dev LAS", "CPU min", "peak RSS MiB"]
        title = f"### {treebank}" + (f", chosen on the first {chosen_on} dev trees" if chosen_on else "")
        out += [title, "", markdown_table(header, table, "lrrrrrr"), ""]
    return "\n".join(out)


def final_stage(rows: list[dict]) -> str:
    """The recipe's last stage among ``rows``: the better of its two students (``better_student``),
    the one student in rows recorded before the second round (``--until student``)."""
    return FINAL if any(r["stage"] == FINAL for r in rows) else "student"


def with_choices(rows: list[dict]) -> list[dict]:
    """``rows`` and, for each treebank, seed and dev trees whose student and second round were
    recorded before the pipeline wrote its choice's row, that choice (the pipeline's own rule:
    the higher dev LAS, the second round on a tie)."""
    chosen = {(r["treebank"], r.get("seed"), r.get("dev_trees")) for r in rows if r["stage"] == FINAL}
    made = []
    for key in sorted({(r["treebank"], r.get("seed"), r.get("dev_trees")) for r in rows if r["stage"] == "round2"} - chosen,
                      key=str):
        runs = {r["stage"]: r for r in rows if (r["treebank"], r.get("seed"), r.get("dev_trees")) == key}
        if "student" in runs:
            better = max(("round2", "student"), key=lambda stage: runs[stage]["dev_las"])
            made.append({"treebank": key[0], "stage": FINAL, "seed": key[1], "chosen": better,
                         "dev_las": runs[better]["dev_las"], "test_las": runs[better]["test_las"],
                         **({"dev_trees": key[2]} if key[2] else {})})
    return rows + made


def recipe_runs(files: list[list[dict]], treebank: str, chosen_on: int) -> tuple[str, list[dict]]:
    """The recipe's final stage for ``treebank`` chosen on the first ``chosen_on`` dev trees (0: on
    every one; :func:`final_stage` over ``files``) and the runs, of every file, of the seeds that ran
    to it. Each file holds runs of its own: a seed in two files is two runs."""
    mine = [[r for r in rows if r["treebank"] == treebank and (r.get("dev_trees") or 0) == chosen_on] for rows in files]
    final = FINAL if any(final_stage(rows) == FINAL for rows in mine) else "student"
    kept = []
    for rows in mine:
        finished = {run_seed(r) for r in rows if r["stage"] == final}
        kept += [r for r in rows if run_seed(r) in finished]
    return final, kept


def zero_shot(results: list[Path]) -> dict[str, list[float]]:
    """Per treebank, the test LAS of each base the runs in ``results`` start from, parsing it as it is
    (its ``zero-shot`` rows, one per base however many files name it)."""
    found = {(r["treebank"], r["run"]): r["test_las"] for path in results for r in read_rows(path)
             if r["stage"] == "zero-shot"}
    per_treebank = {}
    for (treebank, _), las in found.items():
        per_treebank.setdefault(treebank, []).append(las)
    return per_treebank


def shipped(results: list[Path], trees: int = 100) -> dict[str, list[float]]:
    """Per target of ``TARGETS`` whose runs in ``results`` reached the recipe's final choice
    (``better_student``, :func:`with_choices`) on the first ``trees`` dev trees: its test LAS, one per run."""
    files = [with_choices(read_rows(path)) for path in results]
    found = {}
    for treebank in TARGETS:
        final, kept = recipe_runs(files, treebank, trees)
        if final == FINAL:
            found[treebank] = [r["test_las"] for r in kept if r["stage"] == final]
    return found


def protocols(results: list[Path]) -> str:
    """Markdown, a line per target and selection rule: the fine-tuned base, its student and the
    recipe's final parser (test LAS, mean ± sd over the seeds that ran to the final; :func:`with_choices`)
    chosen on every dev tree or on the first K (``dev_trees``: as many as labeled trees, the honest
    protocol), and the CPU minutes of the recipe's trainings per seed (:func:`recipe_runs`)."""
    files = [with_choices(read_rows(path)) for path in results]
    table = []
    for treebank in targets_of(*files):
        for chosen_on in sorted({r.get("dev_trees") or 0 for rows in files for r in rows if r["treebank"] == treebank}):
            final, kept = recipe_runs(files, treebank, chosen_on)
            las = {stage: [r["test_las"] for r in kept if r["stage"] == stage] for stage in ("finetuned", "student", FINAL)}
            seeds = len(las[final])
            if not seeds:
                continue
            minutes = [r["cpu_minutes"] for r in kept if r["stage"] in TRAININGS and r.get("cpu_minutes") is not None]
            table.append([treebank.removeprefix("UD_"), f"first {chosen_on}" if chosen_on else "all",
                          *(mean_sd(seeds_las, 2, "-", single=" (1 seed)") for seeds_las in las.values()), seeds,
                          f"{sum(minutes) / seeds:.1f}" if minutes else "-"])
    return markdown_table(["target", "dev trees", "fine-tuned base", "+ self-training", "better of two rounds", "seeds",
                           "CPU min (trainings)"], table, "llrrrrr")


def targets_of(*files: list[dict]) -> list[str]:
    """The treebanks of ``files``' rows: those of ``TARGETS`` first, in its order, then any other
    (a target beyond the six, confirming a recipe) by name."""
    found = {r["treebank"] for rows in files for r in rows}
    return [t for t in TARGETS if t in found] + sorted(found - set(TARGETS))


def run_seed(row: dict) -> int | None:
    """A row's seed: its own, else (a stage given to the pipeline) its command's ``--seed_everything``."""
    return row["seed"] if row.get("seed") is not None else option(row.get("command"), "--seed_everything")


def recipes(files: list[Path], trees: int = 100) -> str:
    """Markdown, a line per target: each recipe's (a results file's) fine-tuned base and final parser
    (:func:`final_stage`) chosen on the first ``trees`` dev trees (test LAS, mean ± sd over the seeds
    every file has), the last file's final parser minus the first's, and each recipe's CPU minutes
    of its trainings per seed."""
    found = {path: [r for r in with_choices(read_rows(path)) if r.get("dev_trees") == trees] for path in files}
    finals = {path: final_stage(rows) for path, rows in found.items()}
    table = []
    for treebank in targets_of(*found.values()):
        mine = {path: [r for r in rows if r["treebank"] == treebank] for path, rows in found.items()}
        seeds = set.intersection(*({run_seed(r) for r in rows if r["stage"] == finals[path]}
                                   for path, rows in mine.items()))
        if not seeds:
            continue
        cells, last = [], []
        for path, rows in mine.items():
            kept = [r for r in rows if run_seed(r) in seeds]
            las = {stage: [r["test_las"] for r in kept if r["stage"] == stage] for stage in ("finetuned", finals[path])}
            minutes = sum(r["cpu_minutes"] for r in kept
                          if r["stage"] in TRAININGS and r.get("cpu_minutes") is not None) / len(seeds)
            cells += [mean_sd(las["finetuned"], 2, "-"), mean_sd(las[finals[path]], 2, "-"), f"{minutes:.1f}"]
            last.append(statistics.mean(las[finals[path]]))
        table.append([treebank.removeprefix("UD_"), len(seeds), *cells, f"{last[-1] - last[0]:+.2f}"])
    header = ["target", "seeds"]
    for path in files:
        header += [f"{path.stem}: fine-tuned", f"{path.stem}: {finals[path]}", f"{path.stem}: CPU min"]
    return markdown_table([*header, "difference"], table, "lr" + "r" * (len(header) - 1))


def stages(files: list[Path], trees: int = 100) -> str:
    """Markdown, a line per target and stage of the recipe (:data:`TRAININGS` and its final choice,
    :func:`with_choices`) that two recipes (results files) both ran, chosen on the first ``trees``
    dev trees: dev and test LAS of each (mean over the seeds both have) and the second's minus the first's."""
    first, second = ([r for r in with_choices(read_rows(path)) if r.get("dev_trees") == trees] for path in files)
    table = []
    for treebank in targets_of(first, second):
        for stage in (*TRAININGS, FINAL):
            runs = [{run_seed(r): r for r in rows if r["treebank"] == treebank and r["stage"] == stage}
                    for rows in (first, second)]
            seeds = sorted(runs[0].keys() & runs[1].keys())
            if not seeds:
                continue
            cells = []
            for score in ("dev_las", "test_las"):
                means = [statistics.mean(mine[seed][score] for seed in seeds) for mine in runs]
                cells += [f"{means[0]:.2f}", f"{means[1]:.2f}", f"{means[1] - means[0]:+.2f}"]
            table.append([treebank.removeprefix("UD_"), stage, len(seeds), *cells])
    a, b = (path.stem for path in files)
    return markdown_table(["target", "stage", "seeds", f"{a}: dev", f"{b}: dev", "dev difference", f"{a}: test",
                           f"{b}: test", "test difference"], table, "llrrrrrrr")


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
    cli.add_argument("action", choices=["record", "report", "summary", "protocols", "recipes", "stages"])
    cli.add_argument("--treebank")
    cli.add_argument("--output", type=Path, help="the transfer pipeline's --output folder")
    cli.add_argument("--results", type=Path, nargs="+", default=[RESULTS],
                     help="the results file (protocols: the results files, their rows read as one)")
    cli.add_argument("--recipes", type=Path, nargs="+", default=[RESULTS, RELATIVES],
                     help="recipes: the recipes' results files, the first the one the others are compared with "
                          "(stages: two of them)")
    cli.add_argument("--figure", type=Path, default=FIGURE, help="summary: where to draw its figure")
    args = cli.parse_args(argv)
    if len(args.results) > 1 and args.action != "protocols":
        cli.error(f"{args.action} reads one --results file; protocols reads several")
    if args.action == "report":
        print(report(args.results[0]))
        return
    if args.action == "protocols":
        print(protocols(args.results))
        return
    if args.action == "recipes":
        print(recipes(args.recipes))
        return
    if args.action == "stages":
        if len(args.recipes) != 2:
            cli.error("stages compares two --recipes files")
        print(stages(args.recipes))
        return
    if args.action == "summary":
        found = targets(args.results[0])
        print(f"{summary(found)}\nfigure: {figure(found, args.figure)}")
        return
    if not args.treebank or not args.output:
        cli.error("record needs --treebank and --output")
    rows = run_reporting_errors(lambda: record(args.treebank, args.output, args.results[0]))
    for row in rows:
        print(f"{row['treebank']} {row['stage']} seed {row['seed']}: test LAS {row['test_las']:.2f}")


if __name__ == "__main__":
    main()
