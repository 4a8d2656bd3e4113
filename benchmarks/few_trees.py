"""A language with no treebank or a few trees, from the multilingual base: one run of a recipe
on a target, its test scores as a row of ``docs/results/few_trees.jsonl``, and their table.

    python -m benchmarks.few_trees run --treebank UD_Wolof-WTB --trees 0 --recipe ge_facts --seed 1 \
        --base runs/base/multilingual_base/version_0/checkpoints/best.ckpt
    python -m benchmarks.few_trees report [--plot docs/figures/few_trees.png]
    python -m benchmarks.few_trees variants --results docs/results/ge_oracle.jsonl
    python -m benchmarks.few_trees record --treebank UD_Welsh-CCG --output runs/nt_rel/UD_Welsh-CCG \
        --recipe relatives=zero_shot --recipe ge=ge_facts --variant relatives --results FILE

Recipes (each a shipped pipeline's stage, ``configs/pipelines/few_trees.yaml`` or without a tree
``no_treebank.yaml``, run by :func:`parser.pipeline.run` in ``runs/few/<treebank>/<trees>/<recipe>/seed<S>``):

- ``zero_shot``: the base as it is (no training);
- ``ge_facts`` (0 trees): ``configs/no_treebank.yaml`` with GE toward the target's facts file
  (``configs/facts/<language>.yaml``, written from WALS, never from the treebank);
- ``ge_oracle`` (0 trees): the same toward the whole training file's statistics (``treeexp
  statistics count``: an oracle no user has, reported as such);
- ``self_training``: the same without GE, the KL to the base alone on the raw text (the
  control: what GE adds over training on the text at all); with K trees,
  ``configs/few_trees.yaml`` without GE after ``finetuned`` or the base, whichever parses the
  first K dev trees better (the K trees' likelihood beside a KL to that parser, which starts it);
- ``finetuned`` (K trees): ``configs/transfer.yaml`` on the first K trees, from the base;
- ``ge_counts`` (K trees): ``configs/few_trees.yaml`` after that choice with GE toward the
  statistics counted on the first K trees (``treeexp statistics count --trees K``, bootstrap
  tolerances): the few_trees pipeline.

With K trees every run is selected on the first K dev trees (the protocol of Effland &
Collins 2023: no more dev than labeled trees).

A row: treebank, trees, recipe, seed, test UAS/LAS (CoNLL 2018 definitions), the selection
step, CPU minutes and peak RSS of the training, and the commit and command that trained it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks.common import ROOT, append_row, portable, provenance, read_rows
from objectives.conventions import ConfigurationError
from parser import pipeline
from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_file
from parser.runs import Run, config_path

RESULTS = ROOT / "docs" / "results" / "few_trees.jsonl"
RUNS = ROOT / "runs" / "few"
RECIPES = ("zero_shot", "finetuned", "self_training", "ge_facts", "ge_counts", "ge_oracle")
NO_TREE = ("ge_facts", "ge_oracle")  # recipes for no tree
SOME_TREES = ("finetuned", "ge_counts")  # recipes for K > 0 trees
SHIPPED_COLUMNS = (("zero_shot", None), ("self_training", None))  # every variants table's first columns
KL = "{objective: {class_path: objectives.Distillation, init_args: {labeled: true}}, data: unlabeled}"
TREES = "{objective: objectives.Likelihood}, {objective: objectives.TagLikelihood}"


def language(treebank: str) -> str:
    """The facts file's name of a treebank's language: ``UD_Wolof-WTB`` -> ``wolof``."""
    return treebank.removeprefix("UD_").split("-")[0].lower()


def train(treebank: str, trees: int, recipe: str, seed: int, base: Path, root: str | None, output: Path) -> Run:
    """Train one recipe's parser (reused when it finished before) in ``output`` (``RUNS/<treebank>/<trees>``) as
    the shipped pipeline of its trees runs it, the base given (``configs/pipelines/few_trees.yaml``: the
    fine-tuned parser or the base, the better on the first K dev trees, starts and teaches; without a tree
    ``no_treebank.yaml``): ``finetuned`` its stage of that name, every other recipe its last stage, named after the
    recipe, with GE's constraints the recipe's (``self_training``: no GE term)."""
    chain = pipeline.read_pipeline("few_trees" if trees else "no_treebank", "finetuned" if recipe == "finetuned" else None,
                                   seed)
    statistics = None
    if recipe != "finetuned":
        terms = ["--model.terms", f"[{TREES + ', ' if trees else ''}{KL}]"] if recipe == "self_training" else []
        last = replace(chain.stages[-1], name=recipe, args=(*chain.stages[-1].args, *terms))
        chain = pipeline.Pipeline([*chain.stages[:-1], last], recipe)
        train_file = treebank_file(treebank, "train", root)
        if recipe == "ge_facts":
            statistics = str(config_path(f"configs/facts/{language(treebank)}.yaml"))
        elif recipe == "ge_counts":  # the first K trees' statistics, as the few_trees pipeline counts them
            statistics = pipeline.counted_statistics(train_file, trees, output, False, print)
        elif recipe == "ge_oracle":  # the whole file's, 20 bootstrap resamplings
            from parser.statistics import count_once

            statistics = str(count_once(train_file, None, output / "oracle_statistics.yaml", resamples=20))
    output.mkdir(parents=True, exist_ok=True)
    runs = pipeline.run(chain, treebank, output, root, given={"base": str(base)}, statistics=statistics,
                        trees=trees or None)
    return runs[chain.final][0]


def run(treebank: str, trees: int, recipe: str, seed: int, base: Path, root: str | None, results: Path,
        arguments: list[str]) -> dict:
    """One row: the recipe's parser (the base for ``zero_shot``, the row's command then this
    module's ``arguments``) scored on the target's test file."""
    if recipe in NO_TREE and trees or recipe in SOME_TREES and not trees:
        raise ValueError(f"{recipe} is a recipe for {'no tree' if recipe in NO_TREE else 'K > 0 trees'}")
    folder = RUNS / treebank / str(trees) / recipe / f"seed{seed}"
    row = {"treebank": treebank, "trees": trees, "recipe": recipe, "seed": seed}
    if recipe == "zero_shot":
        checkpoint = base
        row.update(provenance(["-m", "benchmarks.few_trees", *arguments]))
    else:
        parser = train(treebank, trees, recipe, seed, base, root, folder.parents[1])
        checkpoint = parser.best  # no tree: no dev, the last step
        usage = parser.usage()
        row.update({"step": parser.dev().get("step", parser.steps()),
                    "cpu_minutes": round(usage.get("cpu_seconds", float("nan")) / 60, 1),
                    "peak_rss_mib": round(usage.get("peak_rss_bytes", float("nan")) / 2**20), **parser.provenance()})
    test = treebank_file(treebank, "test", root)
    scores = pipeline.test_scores(checkpoint, test, folder / "test.conllu")
    row.update({"test_uas": round(scores["uas"], 2), "test_las": round(scores["las"], 2)})
    row = portable(row)
    append_row(results, row)
    return row


def record(treebank: str, output: Path, recipes: dict[str, str], variant: str | None, results: Path) -> list[dict]:
    """Rows of the runs of a pipeline at no tree (``treeexp pipeline no_treebank_relatives ...
    --test``) in ``output``, each stage named in ``recipes`` (stage -> recipe) as that recipe
    (with ``variant``), a row per run (each seed's), read from its ``runs.jsonl``; a run's command is
    its ``train.py`` command (an average's, its ``treeexp average``)."""
    ran = [run for run in pipeline.read_rows(output) if run["stage"] in recipes]
    if missing := [stage for stage in recipes if stage not in {run["stage"] for run in ran}]:
        raise ConfigurationError(f"{output / pipeline.RESULTS}: no run of stage {missing[0]} has ended")
    if untested := [run["stage"] for run in ran if "test" not in run]:
        raise ConfigurationError(f"{output / pipeline.RESULTS}: its {untested[0]} run has no test scores: run the "
                                 "pipeline again with --test (its runs are reused)")
    rows = []
    for run in ran:
        stage = run["stage"]
        row = portable({"treebank": treebank, "trees": 0, "recipe": recipes[stage], **({"variant": variant} if variant else {}),
                        "seed": run["seed"], "stage": stage, "cpu_minutes": run["cpu_minutes"],
                        "peak_rss_mib": run["peak_rss_mib"], "commit": run["commit"], "command": run["command"],
                        "date": run["date"], "test_uas": round(run["test"]["uas"], 2),
                        "test_las": round(run["test"]["las"], 2)})
        append_row(results, row)
        rows.append(row)
    return rows


def figure(results: Path, output: Path) -> Path:
    """The learning curves: test LAS against trees (mean over seeds, each seed a dot), a line per
    recipe, a panel per target; the zero-shot base a dashed line across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(results)
    treebanks = list(dict.fromkeys(r["treebank"] for r in rows))
    columns = min(3, len(treebanks))
    figure_, axes = plt.subplots((len(treebanks) + columns - 1) // columns, columns, squeeze=False,
                                 figsize=(4 * columns, 3.2 * ((len(treebanks) + columns - 1) // columns)))
    for axis, treebank in zip(axes.flat, treebanks):
        mine = [r for r in rows if r["treebank"] == treebank]
        for i, recipe in enumerate(RECIPES):
            found = [r for r in mine if r["recipe"] == recipe]
            if not found:
                continue
            if recipe == "zero_shot":
                axis.axhline(statistics.mean(r["test_las"] for r in found), color="grey", ls="--", label=recipe)
                continue
            points = sorted({r["trees"] for r in found})
            means = [statistics.mean(r["test_las"] for r in found if r["trees"] == k) for k in points]
            axis.plot(points, means, marker="o", color=f"C{i}", label=recipe)
            axis.scatter([r["trees"] for r in found], [r["test_las"] for r in found], color=f"C{i}", s=8, alpha=0.5)
        axis.set_xticks(sorted({r["trees"] for r in rows}))
        axis.set_title(treebank.removeprefix("UD_"))
        axis.set_xlabel("trees")
        axis.set_ylabel("test LAS")
    for axis in list(axes.flat)[len(treebanks):]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    figure_.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure_.savefig(output, dpi=110)
    plt.close(figure_)
    return output


def report(results: Path) -> str:
    """Mean test LAS (UAS) over seeds of each recipe, a row per treebank and number of trees; and
    GE's gain: the best recipe with GE (``ge_...``) less the best without, the treebank's
    zero-shot base among those (a pipeline can keep the base as it is), on the means and, where
    every recipe ran the same seeds (two or more), seed by seed."""
    rows = read_rows(results)
    cells: dict[tuple[str, int], dict[str, list[dict]]] = {}
    for row in rows:
        cells.setdefault((row["treebank"], row["trees"]), {}).setdefault(row["recipe"], []).append(row)
    recipes = [r for r in RECIPES if any(r in cell for cell in cells.values())]
    lines = ["| treebank | trees | " + " | ".join(recipes) + " | GE over the best without |",
             "|---|---:|" + "---:|" * (len(recipes) + 1)]
    for (treebank, trees), cell in sorted(cells.items()):
        zero_shot = cells.get((treebank, 0), {}).get("zero_shot", [])
        gain = ge_gain({recipe: {r["seed"]: r["test_las"] for r in found} for recipe, found in cell.items()
                        if recipe != "zero_shot"},
                       statistics.mean(r["test_las"] for r in zero_shot) if zero_shot else None)
        lines.append(f"| {treebank} | {trees} | " + " | ".join(scores(cell.get(r, [])) for r in recipes) + f" | {gain} |")
    return "\n".join(lines)


def ge_gain(las: dict[str, dict[int, float]], zero_shot: float | None) -> str:
    """GE's gain in a cell of :func:`report` from each recipe's test LAS by seed (``las``: recipe ->
    seed -> LAS): the best mean with GE less the best without (``zero_shot`` among those), then,
    where every recipe ran the same two or more seeds, the same seed by seed."""
    def gain(values: dict[str, float]) -> float | None:
        with_ge = [v for recipe, v in values.items() if recipe.startswith("ge_")]
        without = [v for recipe, v in values.items() if not recipe.startswith("ge_")]
        without += [zero_shot] if zero_shot is not None else []
        return max(with_ge) - max(without) if with_ge and without else None

    if (mean := gain({recipe: statistics.mean(found.values()) for recipe, found in las.items()})) is None:
        return ""
    seeds = {tuple(sorted(found)) for found in las.values()}
    if len(seeds) > 1 or len(shared := seeds.pop()) < 2:
        return f"{mean:+.2f}"
    by_seed = (gain({recipe: found[seed] for recipe, found in las.items()}) for seed in shared)
    return f"{mean:+.2f} (" + ", ".join(f"{g:+.2f}" for g in by_seed) + " by seed)"


def scores(rows: list[dict], against: list[dict] | None = None) -> str:
    """A cell: mean test LAS (UAS) of ``rows`` over seeds (``n=`` where more than one), with its
    LAS difference from the mean of ``against`` where given; empty without rows."""
    if not rows:
        return ""
    las, uas = (statistics.mean(r[key] for r in rows) for key in ("test_las", "test_uas"))
    gain = f" {las - statistics.mean(r['test_las'] for r in against):+.2f}" if against else ""
    return f"{las:.2f} ({uas:.2f}){gain}{f' n={len(rows)}' if len(rows) > 1 else ''}"


def variants(results: Path, shipped: Path) -> str:
    """The rows of recipes run with a term changed (each row's ``variant``, e.g. the GE term's
    tolerance or reduction), a column per recipe and variant, beside the shipped recipes'
    ``zero_shot`` and ``self_training`` of the same treebank and trees (``shipped``); each
    variant's cell adds its LAS difference from the zero-shot base."""
    rows, reference = read_rows(results), read_rows(shipped)
    columns = [column for column in dict.fromkeys((r["recipe"], r.get("variant")) for r in rows)
               if column not in SHIPPED_COLUMNS]  # a file of its own base's rows holds those too
    header = ["zero_shot", "self_training", *(f"{recipe}: {variant}" if variant else recipe for recipe, variant in columns)]
    lines = ["| treebank | trees | " + " | ".join(header) + " |", "|---|---:|" + "---:|" * len(header)]
    gains: dict[tuple[str, str | None], list[float]] = {column: [] for column in columns}
    for treebank, trees in sorted({(r["treebank"], r["trees"]) for r in rows if (r["recipe"], r.get("variant")) in columns}):
        def of(found: list[dict], recipe: str, variant: str | None = None) -> list[dict]:
            return [r for r in found if (r["treebank"], r["trees"], r["recipe"], r.get("variant"))
                    == (treebank, trees, recipe, variant)]
        base = of(reference, "zero_shot")
        for column in columns:
            if (found := of(rows, *column)) and base:
                gains[column].append(statistics.mean(r["test_las"] for r in found)
                                     - statistics.mean(r["test_las"] for r in base))
        cells = [scores(base), scores(of(reference, "self_training")), *(scores(of(rows, *column), base) for column in columns)]
        lines.append(f"| {treebank} | {trees} | " + " | ".join(cells) + " |")
    means = [f"{statistics.mean(g):+.2f} ({len(g)})" if g else "" for g in gains.values()]
    lines.append("| mean LAS gain over the zero-shot base (treebanks) | | | | " + " | ".join(means) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run", help="train (or take) one recipe's parser on a target and record its row")
    one.add_argument("--treebank", required=True)
    one.add_argument("--trees", type=int, required=True)
    one.add_argument("--recipe", choices=RECIPES, required=True)
    one.add_argument("--seed", type=int, default=1)
    one.add_argument("--base", type=Path, required=True, help="the multilingual base's checkpoint")
    one.add_argument("--root", help="the folder of UD treebanks (default: $UD_DIR, else data/ud)")
    one.add_argument("--results", type=Path, default=RESULTS)
    taken = commands.add_parser("record", help="rows of a no-tree pipeline's runs (treeexp pipeline ... --test)")
    taken.add_argument("--treebank", required=True)
    taken.add_argument("--output", type=Path, required=True, help="the pipeline's --output folder")
    taken.add_argument("--recipe", action="append", required=True, metavar="STAGE=RECIPE",
                       help="a stage's runs as rows of a recipe, e.g. relatives=zero_shot ge=ge_facts")
    taken.add_argument("--variant", help="the rows' variant, e.g. relatives")
    taken.add_argument("--results", type=Path, required=True)
    table = commands.add_parser("report", help="the table of the recorded rows")
    table.add_argument("--results", type=Path, default=RESULTS)
    table.add_argument("--plot", type=Path, help="also draw the learning curves into this PNG")
    changed = commands.add_parser("variants", help="the table of recipes run with a term changed (rows with a variant)")
    changed.add_argument("--results", type=Path, required=True, help="rows with a variant, e.g. docs/results/ge_oracle.jsonl")
    changed.add_argument("--shipped", type=Path, default=RESULTS, help="the shipped recipes' rows (zero-shot, self-training)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.command == "variants":
        print(variants(args.results, args.shipped))
        return
    if args.command == "record":
        if malformed := [item for item in args.recipe if "=" not in item]:
            parser.error(f"--recipe takes STAGE=RECIPE, not {malformed[0]}")
        recipes = dict(item.split("=", 1) for item in args.recipe)
        for row in run_reporting_errors(lambda: record(args.treebank, args.output, recipes, args.variant, args.results)):
            print(json.dumps(row))
        return
    if args.command == "report":
        print(report(args.results))
        if args.plot:
            print(f"figure: {figure(args.results, args.plot)}")
        return
    row = run_reporting_errors(lambda: run(args.treebank, args.trees, args.recipe, args.seed, args.base,
                                           args.root, args.results, argv))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
