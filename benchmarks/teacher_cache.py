"""A file teacher's scores with its sentence cache (``--model.teacher.cache_mib``, shipped on)
against without it (the baseline), interleaved batch by batch over several epochs of the same
unlabeled sentences, beside the student's own forward and backward pass on those batches:
medians per epoch, and what a training step costs with each.

    OMP_NUM_THREADS=1 python -m benchmarks.teacher_cache --root $UD_DIR \\
        [--treebank UD_Wolof-WTB] [--encoder multilingual-e5-small] [--teachers 3] [--sentences 300] [--epochs 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

import torch

from benchmarks.common import add_root_option, seconds
from parser.data.datamodule import treebank_file
from parser.data.sentences import read_conllu
from parser.network import EncoderOptions, Heads
from parser.network.network import Network
from parser.training.teacher import Teacher


def batches(sentences: list[list[str]], tokens: int, rng: random.Random) -> list[list[list[str]]]:
    """One shuffled epoch of ``sentences`` in batches of about ``tokens`` words."""
    order = sentences[:]
    rng.shuffle(order)
    out, batch, size = [], [], 0
    for sentence in order:
        if batch and size + len(sentence) > tokens:
            out.append(batch)
            batch, size = [], 0
        batch.append(sentence)
        size += len(sentence)
    return out + ([batch] if batch else [])


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_root_option(cli)
    cli.add_argument("--treebank", default="UD_Wolof-WTB")
    cli.add_argument("--encoder", default="multilingual-e5-small")
    cli.add_argument("--teachers", type=int, default=3, help="networks in the teacher (an ensemble's mean)")
    cli.add_argument("--sentences", type=int, default=300, help="unlabeled sentences read every epoch")
    cli.add_argument("--epochs", type=int, default=3)
    cli.add_argument("--batch-tokens", type=int, default=500)
    args = cli.parse_args()
    files = [treebank_file(args.treebank, "train", args.root)]
    sentences = [list(s.words) for s in read_conllu(files[0])][100 : 100 + args.sentences]
    labels = sorted({label for s in read_conllu(files[0]) for label in s.deprels})
    options = EncoderOptions(pooling="mean", layer_mix=True, dropout=0.1, freeze="embeddings")
    torch.manual_seed(0)
    networks = [Network(args.encoder, options, Heads(), labels) for _ in range(args.teachers)]
    student = Network(args.encoder, options, Heads(), labels).train()
    teachers = {"no cache (baseline)": Teacher(networks), "cache (shipped)": Teacher(networks, cache_mib=1024)}
    cpu, rng = torch.device("cpu"), random.Random(0)
    spent = {name: [[] for _ in range(args.epochs)] for name in [*teachers, "student"]}  # seconds per batch, by epoch
    for epoch in range(args.epochs):
        for batch in batches(sentences, args.batch_tokens, rng):
            for name, teacher in teachers.items():
                spent[name][epoch].append(seconds(lambda: teacher.scores(batch, labels, cpu)))
            spent["student"][epoch].append(seconds(lambda: student(batch).arcs.logsumexp(-1).sum().backward()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {Path(args.encoder).name}, "
          f"{args.teachers} teacher network(s), {len(sentences)} {args.treebank} sentences, "
          f"{args.batch_tokens}-word batches, {args.epochs} epochs; median seconds per batch")
    print("| epoch | student forward + backward | teacher, no cache (baseline) | teacher, cache | teacher speed-up |"
          "\n|---:|---:|---:|---:|---:|")
    for epoch in range(args.epochs):
        student_s, base, cached = (statistics.median(spent[name][epoch]) for name in ["student", *teachers])
        print(f"| {epoch + 1} | {student_s:.3f} | {base:.3f} | {cached:.3f} | {base / cached:.1f}x |")
    total = {name: sum(map(sum, times)) for name, times in spent.items()}
    base, cached = (total["student"] + total[name] for name in teachers)
    print(f"student + teacher over the {args.epochs} epochs: {base:.1f} s without the cache, {cached:.1f} s with it "
          f"({base / cached:.2f}x); the cache holds {len(teachers['cache (shipped)'].cache)} sentences, "
          f"{teachers['cache (shipped)'].cache.size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
