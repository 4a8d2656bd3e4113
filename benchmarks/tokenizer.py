"""The learned tokenizer (``treeexp tokenizer``, UDPipe 1's) on raw text: trained on the first
N trees (or the whole training file) of each target, scored on its test file's raw text with
the official CoNLL 2018 scorer's tokens, sentences and words F1.

    python -m benchmarks.tokenizer --sentences 100            # the six targets, one at a time
    python -m benchmarks.tokenizer --sentences 0 --epochs 5   # whole training files
    python -m benchmarks.tokenizer --report                   # the rows as docs/results.md's table

The raw text is the test file's ``# text`` lines, a paragraph's sentences joined by a space,
paragraphs (``# newpar``, where the file has them) by a blank line. Training and tokenising run
the product's commands (``python -m parser.main tokenizer train|run``), their logs under
``--output``; one row per run is appended to ``--results`` with the commit and the command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common import (TARGETS, add_root_option, append_row, markdown_table, official, portable, product, provenance,
                               raw_text, read_rows)
from parser.data.datamodule import treebank_file
from parser.data.sentences import read_conllu, write_conllu
from parser.data.tokenizer import EPOCHS

RESULTS = Path("docs/results/tokenizer.jsonl")


def official_f1(gold: Path, system: Path) -> dict[str, float]:
    """Tokens, sentences and words F1 (percent) of the CoNLL 2018 scorer; ``system`` has no
    trees, so each sentence gets a flat one first (the scorer reads HEAD as an integer; these
    three scores do not look at it)."""
    sentences = read_conllu(system, trees=False)
    write_conllu(sentences, system, heads=[[0] + [1] * (len(s) - 1) for s in sentences])
    return {f"{name}_f1": value for name, value in official(gold, system, ("Tokens", "Sentences", "Words")).items()}


def run(ud: Path, treebank: str, sentences: int, epochs: int, output: Path) -> dict:
    """Train on ``treebank``'s first ``sentences`` trees (0: all), tokenise its test text, score."""
    train, gold = treebank_file(treebank, "train", ud), treebank_file(treebank, "test", ud)
    folder = output / treebank
    folder.mkdir(parents=True, exist_ok=True)
    raw = folder / "test.txt"
    raw.write_text(raw_text(gold), encoding="utf-8")
    name = f"{sentences or 'all'}-e{epochs}"
    model, system = folder / f"{name}.udpipe", folder / f"{name}.conllu"
    limit = ["--sentences", str(sentences)] if sentences else []
    seconds = product("tokenizer", "train", str(train), str(model), *limit, "--epochs", str(epochs),
                      log=folder / f"{name}.train.log")
    product("tokenizer", "run", str(model), str(raw), str(system), log=folder / f"{name}.run.log")
    trees = sentences or len(read_conllu(train, trees=False))
    return {"treebank": treebank, "train_sentences": trees, "epochs": epochs, **official_f1(gold, system),
            "train_seconds": round(seconds, 1)}


def report(results: Path) -> str:
    """The rows of ``results`` as a markdown table, the last row of each treebank, size and epochs."""
    rows = {(r["treebank"], r["train_sentences"], r["epochs"]): r for r in read_rows(results)}
    return markdown_table(["treebank", "trained on (trees)", "epochs", "tokens F1", "sentences F1", "words F1",
                           "training (s)", "commit"],
                          [[r["treebank"], r["train_sentences"], r["epochs"], f"{r['tokens_f1']:.2f}",
                            f"{r['sentences_f1']:.2f}", f"{r['words_f1']:.2f}", r["train_seconds"], r["commit"][:7]]
                           for r in sorted(rows.values(), key=lambda r: (r["train_sentences"] > 100, r["treebank"]))])


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--treebanks", nargs="+", default=list(TARGETS))
    cli.add_argument("--sentences", type=int, default=100, help="train on the first N trees (0: the whole file)")
    cli.add_argument("--epochs", type=int, default=EPOCHS)
    add_root_option(cli)
    cli.add_argument("--output", type=Path, default=Path("runs/tokenizer"))
    cli.add_argument("--results", type=Path, default=RESULTS)
    cli.add_argument("--report", action="store_true", help="print the rows of --results as a table, run nothing")
    args = cli.parse_args(argv)
    if args.report:
        print(report(args.results))
        return
    origin = provenance(["-m", "benchmarks.tokenizer", *(sys.argv[1:] if argv is None else argv)])
    for treebank in args.treebanks:
        row = portable({**run(args.root, treebank, args.sentences, args.epochs, args.output), **origin})
        print(json.dumps(row, ensure_ascii=False), flush=True)
        append_row(args.results, row)


if __name__ == "__main__":
    main()
