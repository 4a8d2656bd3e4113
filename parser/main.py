"""``treeexp COMMAND [ARGS]``: every tool of the project behind one command (installed by
``pip install``), as SuPar and hopsparser ship theirs; ``treeexp COMMAND --help`` for each."""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {  # name: (module, what it does)
    "train": ("train", "train, validate, test or predict with a config (python train.py)"),
    "pipeline": ("parser.pipeline", "a recipe of several training runs as one command"),
    "parse": ("parser.predict", "parse a CoNLL-U, tokenised or raw text file with a saved parser"),
    "tokenizer": ("parser.data.tokenizer", "learn sentence splitting and tokenisation from CoNLL-U; tokenise raw text"),
    "evaluate": ("parser.evaluate", "score a parsed file against the gold one (CoNLL 2018 definitions)"),
    "show": ("parser.show", "draw a parsed sentence and its arc marginals"),
    "plot": ("parser.plot", "plot a run's training curves"),
    "partial": ("parser.data.partial", "write a partially annotated training file: K whole trees, a share of the other arcs"),
    "statistics": ("parser.statistics", "write a language's statistics for GE from trees or a facts file"),
    "adapt": ("parser.adapt", "adapt the encoder to raw text (masked language modelling)"),
    "margin": ("parser.crossing_margin", "choose the crossing margin of decoding on dev"),
    "fetch": ("parser.fetch", "download a UD treebank"),
    "nearness": ("parser.nearness", "rank treebanks by their nearness to a new language's trees and text"),
    "average": ("parser.averaging", "average saved parsers weight by weight (a fine-tuned parser pulled back toward its start)"),
    "vectors": ("parser.vectors", "learn word vectors from a language's raw text (for --model.encoder_options.word_vectors)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    return "usage: treeexp COMMAND [ARGS]\n\n" + "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())


def main() -> None:
    try:
        run_command()
    except BrokenPipeError:  # the reader of stdout went away (treeexp parse MODEL TEXT - | head): stop as Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # do, and let Python's last flush succeed
        raise SystemExit(1) from None


def run_command() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(usage())
        return
    name = sys.argv[1]
    if name not in COMMANDS:
        print(f"error: no command {name!r}; the commands: {', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    module = importlib.import_module(COMMANDS[name][0])
    if name == "train":
        module.command_line(first=2)  # the processes Lightning starts rerun sys.argv as it is
    else:
        module.main(sys.argv[2:])


if __name__ == "__main__":
    main()
