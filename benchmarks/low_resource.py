"""Low-resource UD experiment: supervised-only vs + entropy vs + GE vs + KL distillation.

Each cell trains ``train.py`` with K labeled sentences of the training file (the rest of it
unlabeled), parses the test file with the best checkpoint (``parser.predict``) and scores it
with ``parser.evaluate``. One JSON line per run goes to ``--results``; ``--report`` prints
the markdown table (mean and spread over seeds) from that file and draws it to ``--figure``
(test LAS by recipe and labeled size, every seed a point).

    python -m benchmarks.low_resource --sizes 100 --seeds 1 2 3 --teacher runs/ewt/best.ckpt
    python -m benchmarks.low_resource --report
    python -m benchmarks.low_resource --report --results docs/results/low_resource.jsonl --figure docs/figures/low_resource.png
"""

from __future__ import annotations

import argparse
import json
import shlex
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from parser.drawing import new_figure, save
from parser.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"supervised": "likelihood", "entropy": "entropy", "ge": "ge", "kl": "kl"}


def run_cell(objective: str, size: int, seed: int, args: argparse.Namespace) -> dict:
    """Train one cell, parse the test set with its best checkpoint, return its scores."""
    variant = "".join(c if c.isalnum() or c in "._" else "_" for c in args.train_args)
    out = Path(args.output) / f"{objective}-k{size}-s{seed}{variant}"
    command = [
        sys.executable, str(ROOT / "train.py"), "--objective", CONFIGS[objective],
        "--seed_everything", str(seed), "--data.seed", str(seed),
        "--data.treebank", args.treebank, "--data.labeled_size", str(size),
        "--data.batch_tokens", str(args.batch_tokens),
        "--model.encoder_lr", str(args.encoder_lr), "--model.warmup_steps", str(args.warmup_steps),
        "--trainer.max_steps", str(args.max_steps), "--trainer.max_epochs", "-1",
        "--trainer.val_check_interval", str(args.val_every), "--trainer.check_val_every_n_epoch", "null",
        "--trainer.limit_val_batches", str(args.val_fraction),
        "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false",
    ]
    if objective == "kl":
        command += ["--model.teacher", args.teacher]
    command += shlex.split(args.train_args)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    train_seconds = time.perf_counter() - start
    best = sorted(out.glob("tensorboard/version_*/checkpoints/best*.ckpt"))[-1]
    test = sorted((Path(args.data_root) / args.treebank).glob("*-ud-test.conllu"))[0]
    predicted = out / "test.pred.conllu"
    subprocess.run([sys.executable, "-m", "parser.predict", str(best), str(test), str(predicted)], check=True, cwd=ROOT)
    scores = evaluate(test, predicted)
    return {"objective": objective, "variant": args.train_args, "labeled": size, "seed": seed, "train_seconds": round(train_seconds),
            "max_steps": args.max_steps, **{k: round(v, 2) for k, v in scores.items()}}


def _short(overrides: str) -> str:
    """Overrides as the table shows them: ``--model.unsupervised.init_args.penalty kl`` -> ``penalty kl``."""
    return overrides.replace("--model.unsupervised.init_args.", "").replace("--model.", "")


def _cells(results: Path) -> dict[tuple[int, str, str], list[dict]]:
    """The runs of ``results`` grouped by (labeled size, objective, variant)."""
    runs = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    cells: dict[tuple[int, str, str], list[dict]] = {}
    for run in runs:
        cells.setdefault((run["labeled"], run["objective"], run.get("variant", "")), []).append(run)
    return cells


def _order(recipe: tuple[str, str]) -> tuple[int, str]:
    """Recipes as the table lists them: by objective, then by overrides."""
    return list(CONFIGS).index(recipe[0]), recipe[1]


def report(results: Path) -> str:
    """Markdown table: test UAS/LAS mean +- sd over seeds, wall-clock per run."""
    cells = _cells(results)
    lines = ["| labeled | objective | overrides | seeds | test UAS | test LAS | minutes per run |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for (size, objective, variant), group in sorted(cells.items(), key=lambda c: (c[0][0], *_order(c[0][1:]))):
        def stat(key: str) -> str:
            values = [g[key] for g in group]
            spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
            return f"{statistics.mean(values):.2f}{spread}"
        minutes = statistics.mean(g["train_seconds"] for g in group) / 60
        lines.append(f"| {size} | {objective} | {_short(variant) or '-'} | {len(group)} | {stat('uas')} | {stat('las')} | {minutes:.0f} |")
    return "\n".join(lines)


# How the figure names overrides (``key value`` of _short); others keep that form.
_NAMES = {"constraints tag_pairs": "tag pairs", "targets_from labeled": "targets from labeled",
          "unsupervised_schedule linear_decay": "decaying λ", "penalty kl": "KL penalty", "weighting count": "count weighting"}
_COLORS = {"supervised": "0.35", "entropy": "C0", "ge": "C2", "kl": "C4"}


def _recipe(objective: str, variant: str) -> str:
    """A figure label: ``ge (tag pairs, targets from labeled, λ 0.1, decaying λ)``."""
    words = _short(variant).split()
    pairs = [" ".join(words[i : i + 2]) for i in range(0, len(words), 2)]
    names = [_NAMES.get(pair, pair.replace("unsupervised_weight ", "λ ")) for pair in pairs]
    if objective == "ge" and not any(pair.startswith("constraints") for pair in pairs):
        names.insert(0, "shipped rules")  # configs/ge.yaml's constraints
    return objective + (f" ({', '.join(names)})" if names else "")


def figure(results: Path, output: Path) -> Path:
    """Draw test LAS by recipe (rows) and labeled size (panels, as wide as their range):
    each seed a circle, the mean a diamond with its value and +- sd, the supervised-only
    mean a dashed line."""
    cells = _cells(results)
    sizes = sorted({size for size, _, _ in cells})
    recipes = sorted({(objective, variant) for _, objective, variant in cells}, key=_order)
    las = [[run["las"] for (k, _, _), group in cells.items() if k == size for run in group] for size in sizes]
    ranges = [max(scores) - min(scores) for scores in las]  # LAS points
    fig = new_figure(3.2 + sum(2.0 + 0.13 * r for r in ranges), 0.9 + 0.34 * len(recipes), layout="constrained")
    axes = fig.subplots(1, len(sizes), sharey=True, squeeze=False, width_ratios=[16 + r for r in ranges])[0]
    for ax, size in zip(axes, sizes):
        for row, (objective, variant) in enumerate(recipes):
            scores = [run["las"] for run in cells.get((size, objective, variant), [])]
            if not scores:
                continue
            color, mean = _COLORS.get(objective, "C1"), statistics.mean(scores)
            text = f"{mean:.1f}"
            if len(scores) > 1:
                sd = statistics.stdev(scores)
                ax.errorbar(mean, row, xerr=sd, color=color, capsize=3, linewidth=1.2)
                text += f" ± {sd:.1f}"
            ax.scatter([mean], [row], s=30, marker="D", color=color, zorder=4)
            ax.scatter(scores, [row] * len(scores), s=26, facecolors="white", edgecolors=color, linewidths=1, zorder=5)
            ax.annotate(text, (max(scores), row), xytext=(7, 0), textcoords="offset points", va="center",
                        fontsize=8, color=color)
            if (objective, variant) == ("supervised", ""):
                ax.axvline(mean, color=color, linestyle="--", linewidth=0.8, zorder=1)
        ax.set_title(f"{size} labeled sentences", fontsize=10)
        ax.set_xlabel("test LAS", fontsize=9)
        ax.margins(x=0.1)
        low, high = ax.get_xlim()
        ax.set_xlim(low, high + 0.2 * (high - low))  # room for the values
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(range(len(recipes)), [_recipe(*recipe) for recipe in recipes], fontsize=8)
    axes[0].invert_yaxis()  # the table's order, top to bottom
    fig.suptitle("Low-resource UD English-EWT, 400 steps: test LAS of each seed (circles), mean (diamond) ± sd",
                 fontsize=10)
    output.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, output)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--objectives", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    cli.add_argument("--sizes", nargs="+", type=int, default=[100, 1000])
    cli.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    cli.add_argument("--treebank", default="UD_English-EWT")
    cli.add_argument("--data-root", default=os.environ.get("UD_DIR", "data/ud"))
    cli.add_argument("--teacher", help="checkpoint of a parser trained on all of train (for kl)")
    cli.add_argument("--max-steps", type=int, default=400)
    cli.add_argument("--val-every", type=int, default=100)
    cli.add_argument("--val-fraction", type=float, default=0.25, help="share of dev used for model selection")
    cli.add_argument("--batch-tokens", type=int, default=500)
    # the recipe of every cell, whatever configs/likelihood.yaml uses for full-data training
    cli.add_argument("--encoder-lr", type=float, default=5e-5)
    cli.add_argument("--warmup-steps", type=int, default=200)
    cli.add_argument("--train-args", default="", help="extra train.py overrides, e.g. '--model.unsupervised_weight 0.1'")
    cli.add_argument("--output", default="runs/low_resource")
    cli.add_argument("--results", default="runs/low_resource/results.jsonl")
    cli.add_argument("--figure", help="where --report draws the results (.png, .svg or .html; default: "
                     "--results with .png)")
    cli.add_argument("--report", action="store_true", help="only print the table of --results and draw --figure")
    args = cli.parse_args()
    results = Path(args.results)
    if not args.report:
        if "kl" in args.objectives and not args.teacher:
            cli.error("--teacher is required for the kl objective")
        results.parent.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            for seed in args.seeds:
                for objective in args.objectives:
                    row = run_cell(objective, size, seed, args)
                    with results.open("a") as file:
                        file.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    print(report(results))
    print(f"figure: {figure(results, Path(args.figure) if args.figure else results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
