"""How well a parser's tree distribution is calibrated on the text a student distils from.

    python -m benchmarks.calibration --run NAME CKPT[,CKPT...] UD_TREEBANK [--run ...] [--labeled 100] [--sentences 1000]
        [--split unlabeled|dev|test] [--bins 10] [--temperatures 0.5 0.75 1 1.5 2] [--results FILE.jsonl]

A self-distilled student learns the teacher's arc marginals on the unlabeled sentences, so
what it can take from them depends on how much they say beyond the teacher's 1-best tree.
Per run (``NAME``: the row's name; ``CKPT``: a checkpoint, or several joined by commas: their
ensemble, the mean of their scores, as ``--model.teacher [A, B]`` teaches; the treebank's training file):
the gold trees of the sentences after the first ``--labeled`` (``--split unlabeled``, the
text of ``--data.labeled_size``; ``dev``/``test`` for those files), ``--sentences`` of them
evenly spread over the file, scored by the network and normalised by the matrix-tree theorem
in the checkpoint's tree set. For every word ``m`` its head marginals ``mu[:, m]`` (summing
to 1) give:

- tree UAS: the checkpoint's decoded trees (as ``parser.predict`` parses);
- expected UAS ``mean mu[gold(m), m]``: the attachment score the distribution itself
  assigns to the gold tree, the target a student is pulled toward;
- confidence ``max_h mu[h, m]`` against whether that head is gold: their means, the
  expected calibration error over ``--bins`` equal-width bins (ECE), and the gap
  confidence - accuracy (positive: over-confident);
- gold-head negative log-likelihood ``-mean log mu[gold(m), m]`` and head entropy (nats);
- the temperature ``T`` of ``--temperatures`` whose distribution ``p(d) ~ exp(s(d) / T)``
  gives the lowest gold-head NLL, and that NLL and ECE (``T > 1``: the tree distribution is
  too sharp; ``T < 1``: too flat).

Nothing is trained; one thread, about a minute per 1000 sentences on a CPU. ``--results``
appends one JSON row per run (its scores, the commit and the exact command).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch
from torch import Tensor

from benchmarks.common import add_root_option, append_row, machine, markdown_table, provenance, setup
from objectives.mtt import marginals
from parser.data.batch import collate
from parser.data.datamodule import treebank_file
from parser.data.sentences import Sentence, read_conllu
from parser.model import Parser
from parser.training.teacher import Teacher

TINY = 1e-12  # floor of a marginal before its log: a gold arc the model rules out costs log(1e12)


@dataclass
class Words:
    """One run's words, flattened over sentences: ``marginals[t]`` ``(W, N+1)`` the head
    marginals of each word at temperature ``temperatures[t]``, ``gold`` ``(W,)`` its gold
    head, ``decoded`` ``(W,)`` its head in the decoded tree."""

    temperatures: list[float]
    marginals: list[Tensor]
    gold: Tensor
    decoded: Tensor


def sample(sentences: list[Sentence], count: int) -> list[Sentence]:
    """``count`` sentences evenly spread over ``sentences`` (all of them when fewer): the
    training files are ordered (EWT by genre), so the first ones are not a fair sample."""
    if count >= len(sentences):
        return sentences
    return [sentences[i * len(sentences) // count] for i in range(count)]


@torch.no_grad()
def head_marginals(parsers: list[Parser], sentences: list[Sentence], temperatures: list[float],
                   batch_size: int = 32) -> Words:
    """Score ``sentences`` with the parsers' networks (several: the mean of their scores) and
    collect every word's head marginals at each temperature, its gold head and its decoded
    head (the first parser's decoding), in input order."""
    network, decoding = parsers[0].network, parsers[0].decoding
    teacher = Teacher([parser.network for parser in parsers])
    longest = max(len(s) for s in sentences) + 1
    columns: list[list[Tensor]] = [[] for _ in temperatures]
    gold, decoded = [], []
    for start in range(0, len(sentences), batch_size):
        batch = collate(sentences[start : start + batch_size], network.upos_vocab, None)
        scores = teacher.scores(batch.words, network.label_vocab.itos, parsers[0].device)
        lengths = batch.lengths.to(scores.arcs.device)
        heads, _ = decoding(scores.arcs, scores.labels, lengths)
        arcs = scores.arcs.double()
        for t, temperature in enumerate(temperatures):
            mu = marginals(arcs / temperature, lengths, decoding.multiroot).cpu()
            for b, n in enumerate(batch.lengths.tolist()):
                column = torch.zeros(n, longest, dtype=mu.dtype)
                column[:, : n + 1] = mu[b, : n + 1, 1 : n + 1].T  # (dependent, head)
                columns[t].append(column)
        for b, n in enumerate(batch.lengths.tolist()):
            gold.append(batch.heads[b, 1 : n + 1])
            decoded.append(heads[b, 1 : n + 1].cpu())
    return Words(temperatures, [torch.cat(c) for c in columns], torch.cat(gold), torch.cat(decoded))


def expected_calibration_error(confidence: Tensor, correct: Tensor, bins: int) -> float:
    """``sum_b |B_b| / W * |mean confidence - accuracy|`` over ``bins`` equal-width bins of
    ``confidence`` in [0, 1] (a confidence of 1 falls in the last bin)."""
    index = (confidence * bins).long().clamp(max=bins - 1)
    sums = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, confidence.double())
    hits = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, correct.double())
    return float((sums - hits).abs().sum() / len(confidence))


def scores(mu: Tensor, gold: Tensor, bins: int) -> dict[str, float]:
    """Calibration of head marginals ``mu`` ``(W, N+1)`` against gold heads ``(W,)``."""
    confidence, best = mu.max(dim=1)
    correct = best == gold
    gold_mass = mu.gather(1, gold[:, None]).squeeze(1)
    entropy = -(mu * mu.clamp_min(TINY).log()).sum(dim=1)
    return {"expected_uas": 100 * float(gold_mass.mean()), "accuracy": 100 * float(correct.double().mean()),
            "confidence": 100 * float(confidence.mean()), "ece": 100 * expected_calibration_error(confidence, correct, bins),
            "nll": float(-gold_mass.clamp_min(TINY).log().mean()), "entropy": float(entropy.mean())}


def report(words: Words, bins: int) -> dict[str, float]:
    """A run's row: its scores at temperature 1 and at the temperature of lowest NLL."""
    by_temperature = {t: scores(mu, words.gold, bins) for t, mu in zip(words.temperatures, words.marginals)}
    at_one = by_temperature[1.0]
    best = min(by_temperature, key=lambda t: by_temperature[t]["nll"])
    return {"words": len(words.gold), "tree_uas": 100 * float((words.decoded == words.gold).double().mean()), **at_one,
            "over_confidence": at_one["confidence"] - at_one["accuracy"], "best_temperature": best,
            "best_nll": by_temperature[best]["nll"], "best_ece": by_temperature[best]["ece"]}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--run", nargs=3, action="append", required=True, metavar=("NAME", "CKPT", "TREEBANK"))
    cli.add_argument("--split", choices=("unlabeled", "dev", "test"), default="unlabeled")
    cli.add_argument("--labeled", type=int, default=100, help="--split unlabeled: the labeled sentences skipped")
    cli.add_argument("--sentences", type=int, default=1000)
    cli.add_argument("--bins", type=int, default=10)
    cli.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0])
    add_root_option(cli)
    cli.add_argument("--results", help="a JSON-lines file to append each run's row to")
    args = cli.parse_args()
    setup()
    recorded = provenance(["-m", "benchmarks.calibration", *sys.argv[1:]])
    temperatures = sorted(set(args.temperatures) | {1.0})
    rows = []
    for name, checkpoint, treebank in args.run:
        text = read_conllu(treebank_file(treebank, "train" if args.split == "unlabeled" else args.split, args.root))
        text = sample(text[args.labeled:] if args.split == "unlabeled" else text, args.sentences)
        parsers = [Parser.load(path) for path in checkpoint.split(",")]
        row = report(head_marginals(parsers, text, temperatures), args.bins)
        if args.results:
            append_row(args.results, {"run": name, "checkpoint": checkpoint, "treebank": treebank, "split": args.split,
                                      **{k: round(v, 6) for k, v in row.items()}, **recorded})
        rows.append([name, treebank.removeprefix("UD_"), f"{row['words']:,}", f"{row['tree_uas']:.2f}",
                     f"{row['expected_uas']:.2f}", f"{row['accuracy']:.2f}", f"{row['confidence']:.2f}",
                     f"{row['over_confidence']:+.2f}", f"{row['ece']:.2f}", f"{row['nll']:.3f}", f"{row['entropy']:.3f}",
                     f"{row['best_temperature']:g}", f"{row['best_nll']:.3f}", f"{row['best_ece']:.2f}"])
        print(" | ".join(rows[-1]), flush=True)
    print(f"\n{machine()}; {args.split} sentences of each treebank (after the first {args.labeled} for unlabeled), "
          f"{args.sentences} at most, {args.bins} bins\n")
    print(markdown_table(["run", "treebank", "words", "tree UAS", "expected UAS", "marginal-argmax UAS", "confidence",
                          "confidence - accuracy", "ECE", "gold-head NLL", "head entropy", "best T", "NLL at T",
                          "ECE at T"], rows))


if __name__ == "__main__":
    main()
