"""The treebanks nearest each transfer target, ranked by ``treeexp nearness``, and whether the ranking
predicts what a treebank adds to the target's fine-tuning.

    OMP_NUM_THREADS=1 python -m benchmarks.nearness rank [--root $UD_DIR] [--output docs/results/nearness.jsonl]
    OMP_NUM_THREADS=1 python -m benchmarks.nearness gain --target UD_Welsh-CCG --candidate UD_Irish-IDT [UD_Y ...] \\
        --base runs/base/multilingual_base/version_0/checkpoints/best.ckpt [--seed 1]
    OMP_NUM_THREADS=1 python -m benchmarks.nearness gradients --base runs/base/multilingual_base/version_0/checkpoints/best.ckpt
    python -m benchmarks.nearness correlation --chosen UD_Welsh-CCG [--on dev|test]

``rank``: for each target of :mod:`benchmarks.transfer`, its first 100 train trees, the rest of its
train file as raw text (the command's default), and as candidates the base parser's treebanks
(``configs/multilingual_base.yaml``) and the relatives set of ``$UD_DIR/MANIFEST.md``, the target
itself left out. One row per target and candidate: its measures and rank, the commit, and the
command as run (``$UD_DIR`` for the treebanks' folder).

``gain``: a candidate's single-source gain for a target. The base fine-tuned on the target's first
100 trees as ``configs/transfer.yaml`` does (400 steps, chosen on the first 100 dev trees), once
alone and once with the candidate's trees beside them, drawn at half of every epoch
(``--data.relatives``); the gain is the difference of their dev LAS (what a user with 100 trees can
measure) and of their test LAS. Runs in ``--output``/TARGET/CANDIDATE/seedS (the alone run:
``alone``), reused once finished; a row per candidate in ``docs/results/nearness_gains.jsonl``.

``gradients``: a measure that needs the base, for each measured target and candidate: the cosine of
the base's gradients of the tree likelihood (arcs and labels, eval mode, float32, the parameters the
fine-tuning trains) on the target's first 100 trees and on as many words of the candidate (read as
``treeexp nearness`` reads it): how far one step on the candidate is a step on the target, to first
order. A row per pair in ``docs/results/nearness_gradients.jsonl``.

``correlation``: the measured gains beside each candidate's rank; per target with gains, the Spearman correlation between each measure's ranking
(and the mean rank) and the candidates' dev gains (``--on test``: test gains), then their mean over the
``--chosen`` targets (where a measure is chosen) and over the others (where it is confirmed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml

from benchmarks.common import ROOT, ROWS, TARGETS, add_root_option, markdown_table, portable, provenance, read_rows
from benchmarks.features import TREES, fine_tuned, record_gain
from objectives import Likelihood
from parser.data.batch import collate
from parser.data.datamodule import treebank_file
from parser.data.sentences import Sentence, read_conllu
from parser.model import Parser
from parser.nearness import CANDIDATE_WORDS, MEASURES, SIMILARITIES, candidate_files, mean_ranks, sample

SHARE = 0.5  # of every epoch, the candidate's
RANKS = ROWS / "nearness.jsonl"
GAINS = ROWS / "nearness_gains.jsonl"
GRADIENTS = ROWS / "nearness_gradients.jsonl"
GRADIENT_MEASURE = "gradient_alignment"  # higher is nearer
GRADIENT_BATCH = 16  # sentences
REPORTED = (*MEASURES, "mean_rank", GRADIENT_MEASURE)  # the correlations' columns, where measured
NEARER_HIGHER = {*SIMILARITIES, GRADIENT_MEASURE}
RELATIVES = ("UD_Bambara-CRB", "UD_Yoruba-YTB", "UD_Naija-NSC", "UD_Kyrgyz-KTMU", "UD_Uzbek-UT", "UD_Tatar-NMCTT",
             "UD_Irish-IDT", "UD_Scottish_Gaelic-ARCOSG", "UD_Manx-Cadhan", "UD_Breton-KEB", "UD_Chinese-GSDSimp",
             "UD_Cantonese-HK", "UD_Thai-PUD", "UD_Indonesian-GSD")  # MANIFEST.md, "Relatives set"


def candidates(target: str) -> list[str]:
    """The base parser's training treebanks and the relatives set, ``target`` left out."""
    base = yaml.safe_load((ROOT / "configs" / "multilingual_base.yaml").read_text())["data"]["treebank"]
    return [name for name in (*base, *RELATIVES) if name != target]


def rank(root: Path, output: Path) -> None:
    """The rows of every target's ranking into ``output`` (rewritten)."""
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
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(rows)} rows -> {output}")


def gain(target: str, names: list[str], base: str, seed: int, root: Path, output: Path,
         results: Path = GAINS) -> list[dict]:
    """A row per candidate, appended to ``results``: its fine-tuning's dev and test LAS beside the
    target alone's, their gains."""
    alone = fine_tuned(target, "alone", [], base, seed, root, output)
    print(f"{target} alone: dev {alone['dev_las']:.2f} test {alone['test_las']:.2f}", flush=True)
    rows = []
    for name in names:
        mixed = fine_tuned(target, name, ["--data.relatives", json.dumps({name: SHARE})], base, seed, root, output)
        rows.append(record_gain({"target": target, "candidate": name, "trees": TREES, "share": SHARE, "seed": seed},
                                mixed, alone, "alone", root, results, f"{target} + {name}"))
    return rows


def likelihood_gradient(parser: Parser, sentences: list[Sentence]) -> torch.Tensor:
    """``(P,)`` the gradient of the tree likelihood per word of ``sentences`` over the parser's trainable
    parameters (batches of :data:`GRADIENT_BATCH` sentences, each weighted by its words)."""
    parameters = [p for p in parser.network.parameters() if p.requires_grad]
    likelihood, words = Likelihood(), sum(len(s) for s in sentences)
    for parameter in parameters:
        parameter.grad = None
    for start in range(0, len(sentences), GRADIENT_BATCH):
        chunk = sentences[start:start + GRADIENT_BATCH]
        batch = collate(chunk, parser.network.upos_vocab, parser.network.label_vocab)
        (likelihood(parser(batch.words), batch) * (sum(len(s) for s in chunk) / words)).backward()
    return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), device=p.device) for p in parameters])


def gradients(base: str, gains: list[dict], root: Path, output: Path) -> None:
    """The rows of the base's gradient alignment for every target and candidate with a gain, into
    ``output`` (rewritten)."""
    made = provenance(["-m", "benchmarks.nearness", "gradients", "--base", base, "--root", str(root)])
    torch.manual_seed(0)
    parser = Parser.load(base)
    pairs = defaultdict(list)
    for row in gains:
        if row["candidate"] not in pairs[row["target"]]:
            pairs[row["target"]].append(row["candidate"])
    rows = []
    for target, names in pairs.items():
        trees = read_conllu(treebank_file(target, "train", root), first=TREES)
        words = sum(len(s) for s in trees)
        toward = likelihood_gradient(parser, trees)
        for name in names:
            other = likelihood_gradient(parser, list(sample(candidate_files(name, root), words)))
            alignment = float(torch.nn.functional.cosine_similarity(toward, other, dim=0))
            rows.append(portable({"target": target, "candidate": name, GRADIENT_MEASURE: round(alignment, 4),
                                  "words": words, **made}, {str(root): "$UD_DIR"}))
            print(f"{target} {name}: {alignment:+.3f}", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def with_gradients(ranks: list[dict], aligned: list[dict]) -> list[dict]:
    """The ranking rows, each with its pair's gradient alignment where it was measured."""
    found = {(r["target"], r["candidate"]): r[GRADIENT_MEASURE] for r in aligned}
    return [{**r, GRADIENT_MEASURE: found[r["target"], r["candidate"]]} if (r["target"], r["candidate"]) in found else r
            for r in ranks]


def spearman(first: np.ndarray, second: np.ndarray) -> float:
    """Spearman's correlation of two ``(n,)`` arrays: Pearson's of their ranks, ties sharing their mean rank."""
    ranks = [mean_ranks(values[:, None], [False]) for values in (first, second)]
    return float(np.corrcoef(*ranks)[0, 1])


def correlations(ranks: list[dict], gains: list[dict], on: str = "dev") -> dict[str, dict[str, float]]:
    """Per target with gains of at least three candidates: per measure (and ``mean_rank``) the Spearman
    correlation of the candidates' nearness (higher nearer) with their mean gain over seeds on ``on``
    (``"dev"``: the 100 dev trees a user has; ``"test"``: the whole test file, less noisy)."""
    measured = defaultdict(lambda: defaultdict(list))
    for row in gains:
        measured[row["target"]][row["candidate"]].append(row[f"{on}_gain"])
    found = {}
    for target, by_candidate in measured.items():
        known = {r["candidate"]: r for r in ranks if r["target"] == target and r["candidate"] in by_candidate}
        if len(known) < 3:
            continue
        names = sorted(known)
        gained = np.array([np.mean(by_candidate[name]) for name in names])
        found[target] = {measure: spearman(np.array([known[n][measure] * (1 if measure in NEARER_HIGHER else -1)
                                                     for n in names]), gained)
                         for measure in REPORTED if all(measure in known[n] for n in names)}
        found[target]["candidates"] = len(names)
    return found


def gains_table(ranks: list[dict], gains: list[dict]) -> str:
    """Each target's measured candidates by their nearness rank: the mean dev and test gains over seeds."""
    measured = defaultdict(list)
    for row in gains:
        measured[row["target"], row["candidate"]].append(row)
    rank = {(r["target"], r["candidate"]): r["rank"] for r in ranks}
    table = [[target, candidate, rank.get((target, candidate), ""), len(rows),
              *(f"{np.mean([row[f'{on}_gain'] for row in rows]):+.2f}" for on in ("dev", "test"))]
             for (target, candidate), rows in sorted(measured.items(), key=lambda item: (item[0][0], rank.get(item[0], 0)))]
    return markdown_table(["target", "candidate", "rank", "seeds", "dev gain", "test gain"], table, "llrrrr")


def correlation_report(found: dict[str, dict[str, float]], chosen: list[str]) -> str:
    """The correlations per target, then their means over the chosen targets and over the others."""
    measures = [m for m in REPORTED if any(m in values for values in found.values())]
    table = [[target, "chosen" if target in chosen else "confirming", int(values["candidates"]),
              *(f"{values[m]:+.2f}" if m in values else "-" for m in measures)] for target, values in sorted(found.items())]
    for label, group in (("mean, chosen on", [t for t in found if t in chosen]),
                         ("mean, confirmed on", [t for t in found if t not in chosen])):
        if group:
            table.append([label, ", ".join(group), "", *(
                f"{np.mean([found[t][m] for t in group if m in found[t]]):+.2f}"
                if any(m in found[t] for t in group) else "-" for m in measures)])
    return markdown_table(["target", "role", "candidates", *measures], table)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("command", choices=("rank", "gain", "gradients", "correlation"))
    add_root_option(cli)
    cli.add_argument("--output", type=Path, help="rank: the rows' file (default docs/results/nearness.jsonl); "
                                                 "gain: the runs' folder (default runs/nearness); "
                                                 "gradients: the rows' file (default docs/results/nearness_gradients.jsonl)")
    cli.add_argument("--target", help="gain: the target treebank")
    cli.add_argument("--candidate", nargs="+", help="gain: the treebanks each trained beside the target")
    cli.add_argument("--base", help="gain, gradients: the multilingual base's checkpoint")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--chosen", nargs="*", default=[], help="correlation: the targets the measure is chosen on")
    cli.add_argument("--results", type=Path, default=GAINS, help="gain, correlation: the gains' rows")
    cli.add_argument("--on", choices=("dev", "test"), default="dev", help="correlation: the gains on dev or on test")
    args = cli.parse_args(argv)
    if args.command == "rank":
        rank(args.root.resolve(), args.output or RANKS)
    elif args.command == "gain":
        if not (args.target and args.candidate and args.base):
            cli.error("gain needs --target, --candidate and --base")
        gain(args.target, args.candidate, args.base, args.seed, args.root.resolve(), args.output or Path("runs/nearness"),
             args.results)
    elif args.command == "gradients":
        if not args.base:
            cli.error("gradients needs --base")
        gradients(args.base, read_rows(args.results), args.root.resolve(), args.output or GRADIENTS)
    else:
        ranks, gains = with_gradients(read_rows(RANKS), read_rows(GRADIENTS)), read_rows(args.results)
        print(gains_table(ranks, gains) + "\n")
        print(correlation_report(correlations(ranks, gains, args.on), args.chosen))


if __name__ == "__main__":
    main()
