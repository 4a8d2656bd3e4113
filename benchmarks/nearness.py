"""The treebanks nearest each transfer target, ranked by ``treeexp nearness`` and kept as result rows.

    OMP_NUM_THREADS=1 python -m benchmarks.nearness [--root $UD_DIR] [--output docs/results/nearness.jsonl]

For each target of :mod:`benchmarks.transfer`: its first 100 train trees, the rest of its train
file as raw text (the command's default), and as candidates the base parser's treebanks
(``configs/multilingual_base.yaml``) and the relatives set of ``$UD_DIR/MANIFEST.md``, the target
itself left out. One row per target and candidate: its measures and rank, the commit, and the
command as run (``$UD_DIR`` for the treebanks' folder).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from benchmarks.common import ROOT, TARGETS, add_root_option, portable, provenance
from parser.data.datamodule import treebank_file
from parser.nearness import CANDIDATE_WORDS

TREES = 100
RELATIVES = ("UD_Bambara-CRB", "UD_Yoruba-YTB", "UD_Naija-NSC", "UD_Kyrgyz-KTMU", "UD_Uzbek-UT", "UD_Tatar-NMCTT",
             "UD_Irish-IDT", "UD_Scottish_Gaelic-ARCOSG", "UD_Manx-Cadhan", "UD_Breton-KEB", "UD_Chinese-GSDSimp",
             "UD_Cantonese-HK", "UD_Thai-PUD", "UD_Indonesian-GSD")  # MANIFEST.md, "Relatives set"


def candidates(target: str) -> list[str]:
    """The base parser's training treebanks and the relatives set, ``target`` left out."""
    base = yaml.safe_load((ROOT / "configs" / "multilingual_base.yaml").read_text())["data"]["treebank"]
    return [name for name in (*base, *RELATIVES) if name != target]


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_root_option(cli)
    cli.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "nearness.jsonl")
    args = cli.parse_args()
    root = args.root.resolve()
    rows = []
    for target in TARGETS:
        train = treebank_file(target, "train", root)
        arguments = ["-m", "parser.main", "nearness", "--target", str(train), "--trees", str(TREES),
                     "--root", str(root), "--candidates", *candidates(target), "--json"]
        made = provenance(arguments)
        ranked = json.loads(subprocess.run([sys.executable, *arguments], cwd=ROOT, check=True, capture_output=True,
                                           text=True).stdout)
        rows += [portable({"target": target, "trees": TREES, "candidate_words": CANDIDATE_WORDS,
                           **{("candidate" if key == "treebank" else key): value for key, value in row.items()},
                           **made}, {str(root): "$UD_DIR"}) for row in ranked]
        print(target, "->", ", ".join(row["treebank"] for row in ranked[:5]), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(rows)} rows -> {args.output}")


if __name__ == "__main__":
    main()
