"""Raw text to trees, scored by the official CoNLL 2018 scorer: a saved parser with its learned
tokenizer beside UDPipe 1's tagger and parser trained on the same trees, on the same tokens of
each target's test text (:func:`benchmarks.common.raw_text`).

    python -m benchmarks.raw_text run --treebank UD_X --parser runs/full/UD_X/parser [--sentences 100]
    python -m benchmarks.raw_text report
    python -m benchmarks.raw_text gains --treebank UD_X --gold runs/k100/UD_X/gold --raw runs/k100/UD_X/raw
    python -m benchmarks.raw_text gains-report

The parser's directory gets its tokenizer first where it has none (``treeexp tokenizer train
TRAIN DIR``, the first ``--sentences`` trees; 0: the whole file); it is UDPipe 1's own trainable
tokenizer (20 epochs; ``benchmarks.tokenizer --epochs 100`` measures UDPipe's default count), so
both systems read its tokens: ``treeexp parse DIR test.txt --input-format raw`` and
``benchmarks.peer_drivers udpipe1-train`` (UDPipe's default tagger and parser, early stopping on
dev, both cut to the first ``--sentences`` trees) then ``udpipe1-parse`` of ``treeexp tokenizer
run``'s output. Each system also parses the gold tokens of the test file, the score tokenisation
costs. Two rows per run in ``--results`` (tokens, sentences, words, UPOS, UAS, LAS F1 on raw
text; UAS and LAS on gold tokens), with the commit and the command.

``gains``: what the semi-supervised stage of a pipeline (``treeexp pipeline ... --test``) gains when
its unlabeled text is the target's raw text split and tokenised by the tokenizer the pipeline
learned (``--raw``), beside the same pipeline reading the rest of the training file's gold tokens:
one row per pipeline output in ``docs/results/learned_tokens.jsonl`` (the test LAS of the parser
the final stage started from and of the final parser, from each output's ``runs.jsonl``, with
the final stage's command and commit).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from benchmarks.common import (add_root_option, append_row, markdown_table, mean_sd, official, portable, product, provenance,
                               raw_text, read_rows)
from parser.data.datamodule import treebank_file
from parser.data.sentences import read_conllu
from parser.data.tokenizer import TOKENIZER_FILE
from parser.pipeline import first_trees

RESULTS = Path("docs/results/raw_text.jsonl")
SCORES = ("Tokens", "Sentences", "Words", "UPOS", "UAS", "LAS")
# UDPipe 2's published raw-text LAS (whole training files, UD 2.17 models), as the issue quotes them
UDPIPE2_RAW_LAS = {"UD_Wolof-WTB": 78.02, "UD_Vietnamese-VTB": 49.57, "UD_Uyghur-UDT": 64.94, "UD_Turkish-IMST": 69.18}


def inputs(root: Path, treebank: str, sentences: int, folder: Path) -> tuple[Path, Path, Path, Path]:
    """(train, dev, gold test, raw test text) of ``treebank``; train and dev cut to their first
    ``sentences`` trees (0: whole) in ``folder``, as a user with that many trees has them."""
    train, dev, gold = (treebank_file(treebank, split, root) for split in ("train", "dev", "test"))
    folder.mkdir(parents=True, exist_ok=True)
    if sentences:
        train = first_trees(train, sentences, folder / f"train{sentences}.conllu")
        dev = first_trees(dev, sentences, folder / f"dev{sentences}.conllu")
    raw = folder / "test.txt"
    raw.write_text(raw_text(gold), encoding="utf-8")
    return train, dev, gold, raw


def run(root: Path, treebank: str, sentences: int, parser: Path, output: Path) -> list[dict]:
    """The rows of both systems: the parser's tokenizer trained where its directory has none,
    the raw text tokenised once by it; the parser on the raw text (the product's path), UDPipe 1
    trained on the same trees on the same tokens; each also on the gold tokens."""
    folder = output / treebank / f"{sentences or 'all'}"
    train, dev, gold, raw = inputs(root, treebank, sentences, folder)
    tokenizer_seconds = None
    if not (parser / TOKENIZER_FILE).is_file():
        limit = ["--sentences", str(sentences)] if sentences else []
        tokenizer_seconds = round(product("tokenizer", "train", str(train), str(parser), *limit,
                                          log=folder / "tokenizer.log"), 1)
    tokens = folder / "tokens.conllu"
    product("tokenizer", "run", str(parser), str(raw), str(tokens), log=folder / "tokens.log")
    ours, udpipe = folder / "treeexp", folder / "udpipe1"
    ours.mkdir(exist_ok=True)
    udpipe.mkdir(exist_ok=True)
    seconds = product("parse", str(parser), str(raw), str(ours / "raw.conllu"), "--input-format", "raw",
                      "--precision", "auto", log=ours / "raw.log")
    product("parse", str(parser), str(gold), str(ours / "gold.conllu"), "--precision", "auto", log=ours / "gold.log")
    model = udpipe / "model.udpipe"
    peer = "benchmarks.peer_drivers"
    train_seconds = product("udpipe1-train", str(train), str(dev), str(model), log=udpipe / "train.log", module=peer)
    product("udpipe1-parse", str(model), str(tokens), str(udpipe / "raw.conllu"), log=udpipe / "raw.log", module=peer)
    product("udpipe1-parse", str(model), str(gold), str(udpipe / "gold.conllu"), log=udpipe / "gold.log", module=peer)
    shared = {"tokenizer": str(parser / TOKENIZER_FILE), "tokenizer_train_seconds": tokenizer_seconds}
    return [{"system": "treeexp", "parser": str(parser), **shared, "parse_seconds": round(seconds, 1),
             **scored(gold, ours)},
            {"system": "udpipe1", **shared, "train_seconds": round(train_seconds, 1), **scored(gold, udpipe)}]


def scored(gold: Path, folder: Path) -> dict[str, float]:
    """The raw-text scores of ``folder/raw.conllu`` and the gold-token UAS and LAS of ``folder/gold.conllu``."""
    on_gold = official(gold, folder / "gold.conllu", ("UAS", "LAS"))
    return {**official(gold, folder / "raw.conllu", SCORES), "gold_tokens_uas": on_gold["uas"], "gold_tokens_las": on_gold["las"]}


def report(rows: list[dict]) -> str:
    """The last row of each (treebank, trees, system) as a markdown table, UDPipe 2's raw LAS beside."""
    last = {(r["treebank"], r["train_sentences"], r["system"]): r for r in rows}
    return markdown_table(
        ["treebank", "trees", "system", "tokens", "sentences", "words", "UPOS", "UAS", "LAS", "LAS on gold tokens",
         "UDPipe 2 raw LAS", "commit"],
        [[r["treebank"], r["train_sentences"], r["system"], *(f"{r[name.lower()]:.2f}" for name in SCORES),
          f"{r['gold_tokens_las']:.2f}", f"{UDPIPE2_RAW_LAS[r['treebank']]:.2f}" if r["train_sentences"] > 100
          and r["treebank"] in UDPIPE2_RAW_LAS else "", r["commit"][:7]]
         for r in sorted(last.values(), key=lambda r: (r["train_sentences"] > 100, r["treebank"], r["system"]))])


GAINS = Path("docs/results/learned_tokens.jsonl")


def gain_row(treebank: str, output: Path, unlabeled: str, seed: int | None = None) -> dict:
    """A pipeline output's row: the final parser's test LAS (its last run, of ``seed`` where given)
    beside that of the parser its stage started from."""
    rows = read_rows(output / "runs.jsonl")
    final = [r for r in rows if seed is None or r["seed"] == seed][-1]
    words = shlex.split(final["command"])
    first = next(r for r in rows if r["checkpoint"] == words[words.index("--model.init") + 1])
    return {"treebank": treebank, "unlabeled": unlabeled, "stage": final["stage"], "seed": final["seed"],
            "start": first["stage"], "start_test_las": round(first["test"]["las"], 2),
            "final_test_las": round(final["test"]["las"], 2),
            "gain": round(final["test"]["las"] - first["test"]["las"], 2), "final_command": final["command"],
            "final_commit": final["commit"], "cpu_minutes": final["cpu_minutes"]}


def gains_report(rows: list[dict]) -> str:
    """Per treebank and seed: the gain with gold tokens, with learned ones, and their difference;
    a treebank of several seeds then their mean (± the standard deviation over seeds)."""
    last = {(r["treebank"], r["seed"], r["unlabeled"]): r for r in rows}
    table = []
    for treebank in sorted({treebank for treebank, _, _ in last}):
        pairs = [(last[treebank, seed, "gold tokens"], last[treebank, seed, "raw text"])
                 for seed in sorted({s for t, s, _ in last if t == treebank})
                 if (treebank, seed, "gold tokens") in last and (treebank, seed, "raw text") in last]
        for gold, raw in pairs:
            table.append([treebank, gold["seed"], f"{gold['start_test_las']:.2f}", f"{gold['final_test_las']:.2f}",
                          f"{gold['gain']:+.2f}", f"{raw['final_test_las']:.2f}", f"{raw['gain']:+.2f}",
                          f"{raw['gain'] - gold['gain']:+.2f}"])
        if len(pairs) > 1:
            golds, raws = [g for g, _ in pairs], [r for _, r in pairs]
            table.append([treebank, f"mean of {len(pairs)}"] + [
                mean_sd([r[key] for r in group]) for group, key in ((golds, "start_test_las"), (golds, "final_test_las"),
                                                                    (golds, "gain"), (raws, "final_test_las"), (raws, "gain"))]
                + [mean_sd([r["gain"] - g["gain"] for g, r in pairs])])
    return markdown_table(["treebank", "seed", "start", "final, gold tokens", "gain", "final, learned tokens", "gain",
                           "difference"], table)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("command", choices=("run", "report", "gains", "gains-report"))
    cli.add_argument("--gold", type=Path, help="gains: the pipeline output whose unlabeled text was gold tokens")
    cli.add_argument("--raw", type=Path, help="gains: the pipeline output that read raw text (--raw)")
    cli.add_argument("--treebank")
    cli.add_argument("--seed", type=int, help="gains: the final parser of this seed (default: the last run)")
    cli.add_argument("--sentences", type=int, default=0, help="the first N training and dev trees (0: the whole files)")
    cli.add_argument("--parser", type=Path, help="a saved parser's directory (treeexp pipeline's OUTPUT/parser)")
    add_root_option(cli)
    cli.add_argument("--output", type=Path, default=Path("runs/raw_text"))
    cli.add_argument("--results", type=Path, default=RESULTS)
    args = cli.parse_args(argv)
    if args.command == "report":
        print(report(read_rows(args.results)))
        return
    if args.command == "gains-report":
        print(gains_report(read_rows(GAINS)))
        return
    if args.command == "gains":
        if not (args.treebank and args.gold and args.raw):
            cli.error("gains needs --treebank, --gold and --raw")
        origin = provenance(["-m", "benchmarks.raw_text", *argv])
        for output, unlabeled in ((args.gold, "gold tokens"), (args.raw, "raw text")):
            row = portable({**gain_row(args.treebank, output, unlabeled, args.seed), "output": str(output), **origin})
            print(json.dumps(row, ensure_ascii=False), flush=True)
            append_row(GAINS, row)
        print(gains_report(read_rows(GAINS)))
        return
    if not args.treebank or not args.parser:
        cli.error("run needs --treebank and --parser")
    origin = provenance(["-m", "benchmarks.raw_text", *argv])
    trees = args.sentences or len(read_conllu(treebank_file(args.treebank, "train", args.root), trees=False))
    for row in run(args.root, args.treebank, args.sentences, args.parser, args.output):
        row = portable({"treebank": args.treebank, "train_sentences": trees, **row, **origin})
        print(json.dumps(row, ensure_ascii=False), flush=True)
        append_row(args.results, row)


if __name__ == "__main__":
    main()
