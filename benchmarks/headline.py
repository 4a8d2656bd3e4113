"""The README's headline: per language, test LAS of the supervised parser of 100 trees, the
shipped new-language recipe on those 100 trees, a parser of the full training file, and
UDPipe 2's published score; a small figure and a markdown table, from the recorded rows.

    python -m benchmarks.headline                          # docs/figures/headline.png and the table
    python -m benchmarks.headline --figure /tmp/h.png      # elsewhere

Where each number comes from (nothing is typed in here):
- supervised, 100 trees: :func:`benchmarks.recorded.baseline` of the recipe's row, the
  supervised runs that the report measures the recipe against (every recorded seed);
- recipe, 100 trees: the rows of ``configs/pipelines/new_language.yaml``'s last stage, round 2
  of self-distillation taught by the ensemble of seeds 1-3, word dropout 0.15, 400 steps
  (:func:`benchmarks.recorded.languages`);
- full training file: :func:`benchmarks.recorded.ceiling`, the report's own (EWT: its
  full-data rows of the same 400 steps; the small treebanks: ``configs/small_treebank.yaml``,
  whose rows are in ``docs/results/small_treebanks.jsonl``);
- UDPipe 2: ``benchmarks.common.UDPIPE2``, its published test LAS with gold tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import LOW_RESOURCE, ROOT, grouped_bars, markdown_table, mean_sd
from benchmarks.recorded import Language, languages
from parser.drawing import report_errors

FIGURE = ROOT / "docs" / "figures" / "headline.png"
BARS = (("supervised", "supervised, 100 trees", "0.6"), ("recipe", "new-language recipe, 100 trees", "C1"),
        ("full", "full training file", "C0"), ("udpipe", "UDPipe 2 (published)", "0.85"))


def table(found: list[Language]) -> str:
    """Markdown: a line per language, test LAS mean ± sd over seeds."""
    rows = [[language.name, mean_sd(language.supervised, 1, single=" (1 seed)"),
             f"**{mean_sd(language.recipe, 1, single=' (1 seed)')}**",
             "-" if language.full is None else f"{language.full:.1f}",
             "-" if language.udpipe is None else f"{language.udpipe:.1f}"] for language in found]
    return markdown_table(["treebank", "supervised, 100 trees", "recipe, 100 trees", "full training file", "UDPipe 2"],
                          rows, "lrrrr")


def figure(found: list[Language], output: Path) -> Path:
    """Grouped bars, one group per language (:func:`benchmarks.common.grouped_bars`)."""
    names = [language.name + ("\n(recipe: 1 seed)" if len(language.recipe) == 1 else "") for language in found]
    series = [(label, color, [getattr(language, key) for language in found]) for key, label, color in BARS]
    return grouped_bars(names, series, output)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--results", type=Path, default=LOW_RESOURCE, help="the low-resource rows")
    cli.add_argument("--figure", type=Path, default=FIGURE, help="where to draw it (.png, .svg or .html)")
    args = cli.parse_args(argv)
    found = report_errors(lambda: languages(args.results))
    print(table(found))
    for language in found:
        print(f"\n{language.name}, full training file: {language.full_source}", end="")
    print(f"\nfigure: {report_errors(lambda: figure(found, args.figure))}")


if __name__ == "__main__":
    main()
