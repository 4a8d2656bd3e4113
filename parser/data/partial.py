"""A partially annotated training file made from a treebank: the first K trees whole, and of the
other sentences a random share of the arcs (HEAD, DEPREL and DEPS ``_`` elsewhere), what
``--data.partial true`` trains on (docs/usage.md#partial-annotation).

    treeexp partial TRAIN.conllu --whole 100 --keep 0.3 --output train.partial.conllu [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from parser.cli import run_reporting_errors
from parser.data.sentences import conllu_text, read_conllu


def write_partial_train(source: Path, whole: int, share: float, seed: int, output: Path) -> int:
    """Write ``source``'s first ``whole`` sentences whole and the others with each arc kept
    with probability ``share`` (seeded; HEAD, DEPREL and DEPS ``_`` where dropped) to
    ``output``; returns the number of arcs kept beyond the first ``whole`` sentences."""
    generator, kept = random.Random(seed), 0
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as file:
        for i, sentence in enumerate(read_conllu(source)):
            tokens = sentence.tokenlist
            if i >= whole:
                for token in tokens:
                    if isinstance(token["id"], int) and generator.random() >= share:
                        token.update(head=None, deprel="_", deps="_")
                kept += sum(isinstance(token["id"], int) and token["head"] is not None for token in tokens)
            file.write(conllu_text(sentence))
    return kept


def _share(value: str) -> float:
    share = float(value)
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError(f"a share in [0, 1], not {value}")
    return share


def main(argv: Sequence[str] | None = None) -> None:
    cli = argparse.ArgumentParser(prog="treeexp partial", description=__doc__.split("\n\n")[0])
    cli.add_argument("source", type=Path, help="a CoNLL-U file of whole trees")
    cli.add_argument("--whole", type=int, default=0, help="the first K sentences kept whole")
    cli.add_argument("--keep", type=_share, required=True, help="the share of the other sentences' arcs kept")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--output", type=Path, required=True)
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(sys.argv[1:] if argv is None else argv)

    def run() -> None:
        kept = write_partial_train(args.source, args.whole, args.keep, args.seed, args.output)
        print(f"{args.output}: {args.whole} whole trees, {kept} arcs kept of the other sentences")

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
