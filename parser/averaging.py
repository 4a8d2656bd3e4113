"""Saved parsers averaged weight by weight: a parser fine-tuned away from the one it started from,
pulled back toward it (WiSE-FT, Wortsman et al. 2022, "Robust fine-tuning of zero-shot models";
model soups). A multilingual base fine-tuned on a new language's relatives parses the relatives
and forgets some of what it knew; their average keeps most of both (docs/results.md).

    treeexp average BASE.ckpt TUNED.ckpt --weights 0.5 0.5 --output runs/averaged

The parsers share an encoder and a network's settings (one started from the other with
``--model.init``); the average has the last one's settings and every label and treebank vector
of any of them, each row of those averaged over the parsers that have it (by name, or by its
fallback: a label's universal part, as ``--model.init`` matches them; :mod:`parser.training.warm_start`).
"""

from __future__ import annotations

import argparse
import copy
import math
import shutil
from collections.abc import Sequence
from pathlib import Path


from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.vocab import build_label_vocab
from parser.model import Parser
from parser.training import checkpoint as checkpoint_files
from parser.training.warm_start import start_from

OPTION = "treeexp average"  # what errors name as the source of a parser


def average(paths: Sequence[str | Path], weights: Sequence[float] | None = None) -> Parser:
    """The weighted mean of the saved parsers ``paths`` (``weights``: positive, summing to 1;
    default equal), in eval mode; a ConfigurationError names a parser that does not fit."""
    if len(paths) < 2:
        raise ConfigurationError(f"{OPTION}: give two or more parsers, not {len(paths)}")
    weights = [1 / len(paths)] * len(paths) if weights is None else [float(w) for w in weights]
    if len(weights) != len(paths):
        raise ConfigurationError(f"{OPTION}: {len(weights)} weights for {len(paths)} parsers")
    if any(w <= 0 for w in weights) or not math.isclose(sum(weights), 1, abs_tol=1e-3):
        raise ConfigurationError(f"{OPTION}: weights {', '.join(f'{w:g}' for w in weights)} must be positive and sum to 1")
    saved = [checkpoint_files.read(path) for path in paths]
    labels = build_label_vocab((), [label for s in saved for label in s.hparams.get("labels") or []]).itos
    treebanks = list(dict.fromkeys(name for s in saved for name in s.hparams.get("treebanks") or []))
    parser = Parser.unweighted(saved[-1], labels, treebanks)
    encoder = parser.hparams.encoder
    for one, path in zip(saved, paths):  # every row filled from a parser that has it (the last listed wins)
        start_from(parser.network, encoder, one, path, OPTION)
    aligned = []
    for one, path in zip(saved, paths):  # each parser's weights in the average's rows; a row it lacks: the filled one
        network = copy.deepcopy(parser.network)
        start_from(network, encoder, one, path, OPTION)
        aligned.append(network.state_dict())
    state = {key: sum(w * one[key] for w, one in zip(weights, aligned)) if value.is_floating_point() else value
             for key, value in parser.network.state_dict().items()}
    parser.network.load_state_dict(state)
    return parser.eval()


def save_average(paths: Sequence[str | Path], weights: Sequence[float] | None, output: str | Path) -> Path:
    """:func:`average` written to the parser directory ``output`` whole (a directory beside it,
    renamed: a killed run leaves no half parser)."""
    output = Path(output)
    partial = output.with_name(output.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    average(paths, weights).save(partial)
    shutil.rmtree(output, ignore_errors=True)
    partial.rename(output)
    return output


def main(argv: Sequence[str] | None = None) -> None:
    cli = argparse.ArgumentParser(prog="treeexp average", description=__doc__.split("\n\n")[0])
    cli.add_argument("parsers", nargs="+", help="saved parsers (.ckpt or directories); the average has the last one's settings")
    cli.add_argument("--weights", nargs="+", type=float, help="one per parser, summing to 1 (default: equal)")
    cli.add_argument("--output", required=True, type=Path, help="the parser directory to write")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def run() -> None:
        path = save_average(args.parsers, args.weights, args.output)
        weights = args.weights or [1 / len(args.parsers)] * len(args.parsers)
        print(f"{' + '.join(f'{w:g} x {p}' for w, p in zip(weights, args.parsers))} -> {path}")

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
