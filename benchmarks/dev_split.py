"""A root of UD treebanks where a target whose release has no dev split has one: its train file's
last N trees, the rest its train file; every other treebank linked as it is.

    python -m benchmarks.dev_split --treebank UD_Manx-Cadhan --dev 300 --output runs/ud_manx

then run a recipe on it with ``--root runs/ud_manx`` (the pipeline's relatives are ranked among the
other treebanks of that root, so the target's release is not among them twice). Eight treebanks of
the many-language set and most of UD's small ones have no dev file; the recipes select on the
first K dev trees. Nothing is copied but the target's train file, cut; ``OUTPUT/split.json`` says
where from.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.common import add_root_option
from objectives.conventions import ConfigurationError
from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_file
from parser.data.sentences import conllu_blocks

SPLIT = "split.json"  # OUTPUT/split.json: the target, its train file and the trees each part took


def split_root(treebank: str, dev: int, root: Path, output: Path) -> dict:
    """``output``: a folder per treebank of ``root``, linked, but ``treebank``'s own: its train file's last
    ``dev`` trees as ``*-ud-dev.conllu``, the others as ``*-ud-train.conllu``, its other files linked.
    ConfigurationError where it has a dev file already or fewer than ``dev`` + 1 trees."""
    train = treebank_file(treebank, "train", root)
    if list((root / treebank).glob("*-ud-dev.conllu")):
        raise ConfigurationError(f"{treebank} has a dev file under {root}: nothing to split")
    sentences = conllu_blocks(train)  # cut as written, byte for byte
    if not 0 < dev < len(sentences):
        raise ConfigurationError(f"--dev {dev}: {train} has {len(sentences)} trees, the dev part must leave some")
    output.mkdir(parents=True, exist_ok=False)
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != treebank):
        (output / folder.name).symlink_to(folder.resolve(), target_is_directory=True)
    target = output / treebank
    target.mkdir()
    for path in sorted((root / treebank).iterdir()):
        if path != train:
            (target / path.name).symlink_to(path.resolve())
    for part, name in ((sentences[:-dev], train.name), (sentences[-dev:], train.name.replace("-ud-train.", "-ud-dev."))):
        (target / name).write_text("".join(block + "\n\n" for block in part), encoding="utf-8")
    record = {"treebank": treebank, "from": os.path.relpath(train.resolve(), root.resolve()),
              "train_trees": len(sentences) - dev, "dev_trees": dev, "dev": "the train file's last trees"}
    (output / SPLIT).write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--treebank", required=True, help="the target, a folder under --root with no dev file")
    cli.add_argument("--dev", type=int, required=True, help="its train file's last N trees become its dev file")
    cli.add_argument("--output", type=Path, required=True, help="the new root (must not exist)")
    add_root_option(cli)
    args = cli.parse_args(argv)
    record = split_root(args.treebank, args.dev, Path(args.root), args.output)
    print(f"{args.output}: {record['treebank']} train {record['train_trees']} trees, dev {record['dev_trees']} "
          f"(the last of {record['from']}); every other treebank of {args.root} linked")


if __name__ == "__main__":
    run_reporting_errors(main)
