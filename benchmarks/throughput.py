"""Parser throughput on this machine: training and parsing sentences/s, and where the time goes.

    python -m benchmarks.throughput --checkpoint runs/.../best.ckpt [--treebank UD_English-EWT] [--sentences 500] [--repeats 3]

Parsing: ``Parser.parse`` over the first ``--sentences`` sentences of the treebank's test file,
split into encoder + scorer time and decoding (MST) time. Training: optimiser steps on
length-bucketed train batches of the same treebank, split into the forward/backward of the whole step and
the forward/backward of the MTT likelihood alone (measured on the same scores, detached).
Repeats are interleaved; medians are reported. ``--device cuda`` runs it on a GPU (every
timer waits for the GPU's queue).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from benchmarks.common import add_root_option, seconds, wait_for_device
from objectives.likelihood import Likelihood
from parser.data.datamodule import DependencyDataModule, treebank_file
from parser.data.sentences import read_conllu
from parser.model import Parser
from parser.training.optimizer import adamw_linear


def _clock() -> float:
    """``time.perf_counter()`` once the GPU's queued work (if any) is done."""
    wait_for_device()
    return time.perf_counter()


def parse_split(model: Parser, sentences: list[list[str]], batch_size: int) -> tuple[float, float]:
    """Seconds spent (encoding + scoring, decoding) parsing ``sentences`` in length-sorted batches."""
    order = sorted(sentences, key=len)
    score_time = decode_time = 0.0
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            words = order[start : start + batch_size]
            lengths = torch.tensor([len(w) for w in words], device=model.device)
            t0 = _clock()
            scores = model(words)
            t1 = _clock()
            model.decoding(scores.arcs, scores.labels, lengths)
            t2 = _clock()
            score_time, decode_time = score_time + t1 - t0, decode_time + t2 - t1
    return score_time, decode_time


def train_split(model: Parser, batches: list, objective: Likelihood) -> tuple[float, float]:
    """Seconds for full training steps, and for the MTT likelihood's forward + backward alone."""
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": 1e-5}]
    optimizer = adamw_linear(groups, Parser.ADAMW_BETAS, 0.01, 0, len(batches), model.device)["optimizer"]  # as training
    model.train()
    step_time = objective_time = 0.0
    for batch in batches:
        t0 = _clock()
        scores = model(batch.words)
        loss = objective(scores, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step_time += _clock() - t0
        detached = type(scores)(scores.arcs.detach().requires_grad_(), scores.labels.detach().requires_grad_())
        objective_time += seconds(lambda: objective(detached, batch).backward())
    return step_time, objective_time


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--checkpoint", help="trained parser (default: an untrained MiniLM parser)")
    add_root_option(cli)
    cli.add_argument("--treebank", default="UD_English-EWT", help="a UD_<Treebank> folder under --root")
    cli.add_argument("--sentences", type=int, default=500)
    cli.add_argument("--train-batches", type=int, default=4)
    cli.add_argument("--batch-size", type=int, default=32)
    cli.add_argument("--repeats", type=int, default=3)
    cli.add_argument("--device", default="cpu", help="cpu or cuda")
    args = cli.parse_args()

    data = DependencyDataModule(treebank=args.treebank, root=args.root)
    data.setup("fit")
    model = Parser.load(args.checkpoint) if args.checkpoint else Parser(labels=data.label_vocab.itos)
    if args.checkpoint:
        data.label_vocab = model.network.label_vocab
    model = model.to(args.device)
    test = read_conllu(treebank_file(args.treebank, "test", args.root))
    sentences = [s.words for s in test[: args.sentences]]
    loader = iter(data.train_dataloader())
    batches = [move_data_to_device(next(loader), args.device) for _ in range(args.train_batches)]
    train_sentences = sum(len(b.words) for b in batches)

    parse_runs, train_runs = [], []
    for _ in range(args.repeats):  # interleaved: parse, train, parse, train, ...
        model.eval()
        parse_runs.append(parse_split(model, sentences, args.batch_size))
        train_runs.append(train_split(model, batches, Likelihood()))

    score = statistics.median(r[0] for r in parse_runs)
    decode = statistics.median(r[1] for r in parse_runs)
    step = statistics.median(r[0] for r in train_runs)
    mtt = statistics.median(r[1] for r in train_runs)
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, {args.treebank}: {len(sentences)} test sentences, "
          f"{train_sentences} training sentences in {len(batches)} batches, median of {args.repeats}")
    print("| measure | value |\n|---|---:|")
    print(f"| parsing, sentences/s (decoding included) | {len(sentences) / (score + decode):.1f} |")
    print(f"| decoding share of parsing time | {100 * decode / (score + decode):.1f}% |")
    print(f"| decoding, ms per sentence | {1000 * decode / len(sentences):.3f} |")
    print(f"| training, sentences/s | {train_sentences / step:.1f} |")
    print(f"| MTT likelihood (forward + backward) share of a training step | {100 * mtt / step:.1f}% |")


if __name__ == "__main__":
    main()
