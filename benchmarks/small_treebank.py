"""The small-treebank recipe and its ablations (docs/notebook/experiments.md, section 3).

    python -m benchmarks.small_treebank [--treebank UD_Wolof-WTB] [--ablate layer_mix word_dropout tagger]
    python -m benchmarks.small_treebank --train-args "--trainer.max_epochs 8"   # a recipe variant

Each run trains ``train.py fit --config configs/small_treebank.yaml`` (``parser.runs.fit``)
with only the treebank, the output folder and the run's overrides added (the recipe as
shipped; each ``--ablate NAME`` also runs it without one ingredient, ``ABLATIONS``), counting
the CPU minutes of the training process. With its ``best.ckpt`` it then chooses the crossing
margin on dev (the best dev LAS, :func:`parser.crossing_margin.best`), parses dev and test
three ways (``mst``, ``eisner``, ``margin``) with ``parser.predict`` and scores them with
``parser.evaluate``: LAS and friends, the share of non-projective predicted trees beside
gold's, and the head accuracy of words on predicted crossing arcs. One JSON line per run and
decoder goes to ``--results`` (with the commit and the exact commands); a run whose
treebank, recipe and ``variant`` are already there is skipped, so a stopped grid resumes
(and a run that finished but was not scored is scored without training again).
Runs write under ``--output``/TREEBANK/VARIANT.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from pathlib import Path

import yaml

from benchmarks.common import UDPIPE2, add_root_option, append_row, folder_name, markdown_table, portable, read_rows
from parser.crossing_margin import best, sweep
from parser.data.datamodule import treebank_file
from parser.evaluate import crossings, score_checkpoint
from parser.model import Parser
from parser.network import EncoderOptions
from parser.data.sentences import read_conllu
from parser.runs import RECIPES, config_path, fit
from parser.training.terms import trains_tagger

RECIPE = f"configs/{RECIPES['small_treebank']}"
# an ingredient of the recipe -> the overrides that remove it
ABLATIONS = {
    "layer_mix": ["--model.encoder_options.layer_mix", "false"],
    "characters": ["--model.encoder_options.characters", "0"],
    "word_dropout": ["--model.encoder_options.word_dropout", "0.0"],
    "tagger": ['--model.terms=[{"objective": "objectives.Likelihood"}]'],
    "lstm": ["--model.encoder_options.lstm_layers", "0"],
}
DECODERS = ("mst", "eisner", "margin")


@dataclasses.dataclass(frozen=True)
class Setting:
    """What every run of a grid shares: the treebank (in the folder of treebanks ``root``), the
    recipe and the folder its runs train in (``output``/TREEBANK/VARIANT)."""

    treebank: str
    root: Path
    config: str
    output: Path


def train(setting: Setting, overrides: list[str]) -> dict:
    """Train one run of the recipe with ``overrides`` (or reuse the one that finished in its
    folder); its checkpoint, config and costs, and what trained it."""
    out = setting.output / setting.treebank / (folder_name(overrides) or "recipe")  # never another treebank's run
    run = fit(config_path(setting.config),
              ["--data.treebank", setting.treebank, "--data.root", str(setting.root), *overrides], out)
    usage = run.usage()
    return {"best": run.best, "config": run.config(), "steps": run.steps(),
            "cpu_minutes": round(usage["cpu_seconds"] / 60, 1), "wall_minutes": round(usage["seconds"] / 60, 1),
            "peak_rss_mib": round(usage["peak_rss_bytes"] / 2**20), **run.provenance()}


def decoder_options(decoder: str, margin: float) -> tuple[dict, str]:
    """``parser.predict``'s keyword arguments of a decoder, and the same as its command-line flags."""
    return {"mst": ({"projective": False}, "--no-projective"), "eisner": ({"projective": True}, "--projective"),
            "margin": ({"crossing_margin": margin}, f"--crossing-margin {margin:.4f}")}[decoder]


def score_run(setting: Setting, ablation: str, variant: str, trained: dict) -> list[dict]:
    """The run's rows, one per decoder: dev and test scores and crossing diagnostics."""
    best_ckpt = trained["best"]
    gold = {split: treebank_file(setting.treebank, split, setting.root) for split in ("dev", "test")}
    margin = best(sweep(Parser.load(best_ckpt), read_conllu(gold["dev"]))).margin
    tagged = trains_tagger(trained["config"]["model"])
    rows = []
    for decoder in DECODERS:
        options, flags = decoder_options(decoder, margin)
        row = {"treebank": setting.treebank, "recipe": setting.config, "ablation": ablation, "variant": variant,
               "encoder": trained["config"]["model"]["encoder"], "steps": trained["steps"],
               "cpu_minutes": trained["cpu_minutes"], "wall_minutes": trained["wall_minutes"],
               "peak_rss_mib": trained["peak_rss_mib"], "date": trained["date"],
               "commit": trained["commit"], "command": trained["command"], "decoder": decoder,
               "crossing_margin": round(margin, 4) if decoder == "margin" else None,
               "predict": f"python -m parser.predict BEST.ckpt SPLIT.conllu OUT.conllu "
                          f"{'--overwrite-upos ' if tagged else ''}{flags}"}
        shares = {}
        for split, path in gold.items():
            predicted = best_ckpt.parent.parent / f"{split}.{decoder}.conllu"
            scores = score_checkpoint(best_ckpt, path, predicted, overwrite_upos=tagged, **options)
            found = crossings(path, predicted)
            row.update({f"{split}_{k}": round(v, 2) for k, v in scores.items()})
            row[f"{split}_nonprojective_trees"] = round(100 * found.predicted_trees / found.sentences, 1)
            row[f"{split}_crossing_head_accuracy"] = (
                round(100 * found.predicted_arcs_correct / found.predicted_arcs, 1) if found.predicted_arcs else None)
            shares[split] = round(100 * found.gold_trees / found.sentences, 1)
        row["gold_nonprojective_trees"] = shares
        rows.append(row)
    return rows


def recorded_variants(results: Path, treebank: str, config: str) -> set[str]:
    """The variants of ``treebank`` and the recipe ``config`` that ``results`` holds rows of."""
    rows = read_rows(results)
    return {row.get("variant", "") for row in rows if row["treebank"] == treebank and row["recipe"] == config}


def _run_name(row: dict) -> str:
    """How the report names a run: ``without X`` for an ablation, else its overrides (or
    ``recipe``), with the commit that ran it."""
    ablation = row.get("ablation") or ""
    overrides = row.get("variant", "")
    if ablation:
        overrides = overrides.replace(shlex.join(ABLATIONS[ablation]), "", 1).strip()
    name = f"without {ablation}" if ablation else "recipe"
    return f"{name}{f' + `{overrides}`' if overrides else ''} ({row['commit'][:7]})"


def report(results: Path) -> str:
    """Markdown: one table per treebank (headed by its name), a line per run and decoder in
    the order of ``results``: dev LAS, test UAS/LAS/CLAS/UPOS, predicted non-projective
    trees on dev and test beside gold's, head accuracy on crossing arcs (dev), steps and
    CPU minutes."""
    treebanks: dict[str, list[dict]] = {}
    for row in read_rows(results):
        treebanks.setdefault(row["treebank"], []).append(row)
    header = ["run", "decoder", "dev LAS", "test UAS", "test LAS", "test CLAS", "test UPOS", "non-projective dev / test",
              "crossing-arc heads (dev)", "steps", "CPU min"]
    tables = []
    for treebank, rows in treebanks.items():
        reference, gold = UDPIPE2.get(treebank), rows[0]["gold_nonprojective_trees"]
        udpipe = f"; UDPipe 2, UD 2.17, gold tokens: test UAS {reference[0]:.2f}, LAS {reference[1]:.2f}" if reference else ""
        table = []
        for row in rows:
            margin, heads = row.get("crossing_margin"), row.get("dev_crossing_head_accuracy")
            table.append([_run_name(row), row["decoder"] + ("" if margin is None else f" {margin}"),
                          *(f"{row[key]:.2f}" for key in ("dev_las", "test_uas", "test_las", "test_clas")),
                          row.get("test_upos", "-"), f"{row['dev_nonprojective_trees']}% / {row['test_nonprojective_trees']}%",
                          "-" if heads is None else f"{heads}%", row["steps"], row["cpu_minutes"]])
        tables.append(f"**{treebank}** (gold non-projective trees: dev {gold['dev']}%, test {gold['test']}%{udpipe})\n\n"
                      + markdown_table(header, table, "llrrrrrrrrr"))
    return "\n\n".join(tables)


def absent_ingredients(config: str, names: list[str]) -> list[str]:
    """The ingredients among ``names`` that the recipe ``config`` does not use: no tagging
    term, or encoder options (where the config is silent, their defaults) at the override's value."""
    model = yaml.safe_load(config_path(config).read_text(encoding="utf-8")).get("model", {})
    options = {**dataclasses.asdict(EncoderOptions()), **(model.get("encoder_options") or {})}
    absent = []
    for name in names:
        if name == "tagger":
            absent += [] if trains_tagger(model) else [name]
            continue
        flag, value = ABLATIONS[name]
        if options[flag.removeprefix("--model.encoder_options.")] == yaml.safe_load(value):
            absent.append(name)
    return absent


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--treebank", default="UD_Wolof-WTB")
    add_root_option(cli)
    cli.add_argument("--config", default=RECIPE, help="the recipe (a train.py config)")
    cli.add_argument("--ablate", nargs="*", default=[], choices=sorted(ABLATIONS),
                     help="also run the recipe without each of these ingredients")
    cli.add_argument("--no-recipe", action="store_true", help="run only the ablations, not the recipe itself")
    cli.add_argument("--train-args", type=shlex.split, default=[],
                     help="train.py overrides added to every run, one string (recorded in its variant)")
    cli.add_argument("--output", default="runs/small_treebank")
    cli.add_argument("--results", default="runs/small_treebank/results.jsonl")
    cli.add_argument("--report", action="store_true", help="only print the table of --results")
    args = cli.parse_args(argv)
    results = Path(args.results)
    if args.report:
        print(report(results))
        return
    absent = absent_ingredients(args.config, args.ablate)
    if absent:
        cli.error(f"{args.config} has no {', '.join(absent)} to remove (already "
                  f"{', '.join(shlex.join(ABLATIONS[name]) for name in absent)})")
    runs = ([] if args.no_recipe else [("", [])]) + [(name, ABLATIONS[name]) for name in args.ablate]
    done = recorded_variants(results, args.treebank, args.config)
    setting = Setting(args.treebank, args.root, args.config, Path(args.output))
    for ablation, override in runs:
        overrides = [*override, *args.train_args]
        variant = shlex.join(overrides)
        if portable(variant) in done:
            print(f"skipping {variant or 'the recipe'}: already in {results}", flush=True)
            continue
        for row in score_run(setting, ablation, variant, train(setting, overrides)):
            row = portable(row)  # the repository's and $UD_DIR's paths by name
            append_row(results, row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
