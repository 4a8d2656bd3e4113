"""The README's headline: per target language, test LAS of the best shipped recipe from 100
trees (``configs/pipelines/transfer.yaml``) beside the language-alone recipe of the same trees,
the base as it is, the whole training file and UDPipe 2's published score; a small figure and a
markdown table, from the recorded rows (:func:`benchmarks.recorded.targets`, :func:`benchmarks.transfer.shipped`).

    python -m benchmarks.headline                          # docs/figures/headline.png and the table
    python -m benchmarks.headline --figure /tmp/h.png      # elsewhere

Where each number comes from (nothing is typed in here):
- zero-shot: the multilingual base the transfer recipe starts from, parsing the target as it is
  (:func:`benchmarks.transfer.zero_shot` of its rows; else ``docs/results/transfer.jsonl``);
- language alone, supervised and recipe: the target's own 100 trees, the supervised parser and
  ``configs/pipelines/new_language.yaml``'s second round (the low-resource grid's rows, else
  ``docs/results/new_language.jsonl``);
- transfer recipe: the final parser of ``transfer.yaml`` as it ships, on the base as it ships (the
  better of its two rounds of self-training, chosen on 100 dev trees: :func:`benchmarks.transfer.shipped`
  of ``benchmarks.transfer.SHIPPED``), every seed;
- whole training file: the base fine-tuned on it (``configs/pipelines/transfer_full.yaml``);
- UDPipe 2: ``benchmarks.common.UDPIPE2``, its published test LAS with gold tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import ROOT, TRANSFER, grouped_bars, markdown_table, mean_sd
from benchmarks.recorded import Target, targets
from benchmarks.transfer import SHIPPED, shipped, zero_shot
from parser.drawing import report_errors

FIGURE = ROOT / "docs" / "figures" / "headline.png"
SEEDS = 3  # a trained column's seeds per target; a cell of fewer says how many
# (label, color, a target's seeds given the shipped recipe's per target)
BARS = (("language alone: supervised, 100 trees", "0.6", lambda t, recipe: t.supervised),
        ("language alone: recipe, 100 trees", "C1", lambda t, recipe: t.best_own),
        ("transfer recipe, 100 trees", "C3", lambda t, recipe: recipe.get(t.treebank, [])),
        ("whole training file", "C0", lambda t, recipe: t.stages["full"]),
        ("UDPipe 2 (published)", "0.85", lambda t, recipe: t.udpipe))


def seeds_cell(values: list[float]) -> str:
    """Test LAS over seeds, mean ± sd to one place, the seeds counted where fewer than ``SEEDS``."""
    count = f" ({len(values)} seed{'s' if len(values) > 1 else ''})" if 0 < len(values) < SEEDS else ""
    return mean_sd(values, 1, "-") + count


def table(found: list[Target], recipe: dict[str, list[float]], bases: dict[str, list[float]] | None = None) -> str:
    """Markdown: a line per target, test LAS mean ± sd over seeds, the transfer recipe (``recipe``:
    its runs per target, :func:`benchmarks.transfer.shipped`) in bold, zero-shot the base it starts
    from (``bases``: :func:`benchmarks.transfer.zero_shot` of its rows) where its rows have one."""
    rows = [[target.name, mean_sd((bases or {}).get(target.treebank) or target.stages["zero-shot"], 1, "-"),
             *(seeds_cell(target.supervised if i == 0 else target.best_own) for i in (0, 1)),
             f"**{seeds_cell(recipe.get(target.treebank, []))}**",
             mean_sd(target.stages["full"], 1, "-"), mean_sd(target.udpipe, 1, "-")] for target in found]
    return markdown_table(["treebank", "zero-shot", "language alone: supervised, 100 trees",
                           "language alone: recipe, 100 trees", "transfer recipe, 100 trees", "whole training file",
                           "UDPipe 2"], rows, "lrrrrrr")


def figure(found: list[Target], recipe: dict[str, list[float]], output: Path) -> Path:
    """Grouped bars, one group per target (:func:`benchmarks.common.grouped_bars`)."""
    series = [(label, color, [seeds(target, recipe) for target in found]) for label, color, seeds in BARS]
    return grouped_bars([target.name for target in found], series, output)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--results", type=Path, default=TRANSFER, help="the transfer rows (whole file; zero-shot where the shipped rows have none)")
    cli.add_argument("--shipped", type=Path, nargs="+", default=list(SHIPPED), help="the shipped recipe's rows")
    cli.add_argument("--figure", type=Path, default=FIGURE, help="where to draw it (.png, .svg or .html)")
    args = cli.parse_args(argv)
    found = report_errors(lambda: targets(args.results))
    recipe = report_errors(lambda: shipped(args.shipped))
    print(table(found, recipe, report_errors(lambda: zero_shot(args.shipped))))
    print(f"figure: {report_errors(lambda: figure(found, recipe, args.figure))}")


if __name__ == "__main__":
    main()
