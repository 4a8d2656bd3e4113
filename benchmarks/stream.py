"""Unlabeled data as a stream, training on several CPU processes (through train.py), and a
corpus parsed as a stream (through ``treeexp parse``).

    python -m benchmarks.stream make [--dir /tmp/treeexp-stream]   # EWT train sentences repeated:
                                                                  #   10k.txt, 1m.txt, 1m.txt.gz
    python -m benchmarks.stream corpora [--dir ...] [--steps 8]    # time to the first step, peak RSS,
                                                                  #   sentences/s, per corpus
    python -m benchmarks.stream processes [--steps 16]             # training sentences/s, 1 and 2 processes
    python -m benchmarks.stream parse --checkpoint CKPT [--dir ...] [--repeats 3]
                                                                  # parsing 10k.txt and 1m.txt: peak RSS,
                                                                  #   sentences/s

``parse`` runs ``treeexp parse CKPT CORPUS -`` (output discarded) in a fresh one-thread process
per run, its peak RSS that process's own: 10k.txt with the default window and, as the
baseline, with one window holding the whole file (what parsing did before it streamed),
interleaved ``--repeats`` times (medians), then 1m.txt once with the default window.

Every run is ``python train.py fit`` in a fresh process (the entropy recipe with
``--data.unlabeled CORPUS``, or the likelihood recipe), with ``Timing`` among its callbacks:
it writes, from process 0, the seconds from the launch to the first training step, the
process's peak RSS, and the sentences per second (labeled + unlabeled, all processes) of
the steps after the first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

import torch
from lightning.pytorch import Callback

from benchmarks.common import ROOT, markdown_table, peak_rss_mib
from parser.data.datamodule import DependencyDataModule

LAUNCHED = "TREEEXP_BENCH_LAUNCHED"  # time.time() when the driver started the run


class Timing(Callback):
    """Writes ``{"first_step_s", "peak_rss_mib", "sentences_per_s"}`` to ``output`` (JSON)."""

    def __init__(self, output: str):
        self.output = output
        self.sentences = 0
        self.first_step_s = self.started = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.first_step_s is None:
            self.first_step_s = time.time() - float(os.environ[LAUNCHED])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.started is None:  # the first step warms up; time the others
            self.started = time.perf_counter()
            return
        batches = batch.values() if isinstance(batch, dict) else [batch]
        self.sentences += sum(len(b.words) for b in batches)

    def on_train_end(self, trainer, pl_module) -> None:
        seconds = time.perf_counter() - self.started
        sentences = trainer.strategy.reduce(torch.tensor(float(self.sentences)), reduce_op="sum")
        if trainer.is_global_zero:
            Path(self.output).write_text(json.dumps({
                "first_step_s": round(self.first_step_s, 2),
                "peak_rss_mib": peak_rss_mib(),
                "sentences_per_s": round(float(sentences) / seconds, 2),
            }))


def make(directory: Path) -> None:
    """10k.txt, 1m.txt and 1m.txt.gz: EWT train sentences, one per line, repeated."""
    directory.mkdir(parents=True, exist_ok=True)
    data = DependencyDataModule()
    data.setup("fit")
    lines = [" ".join(s.words) + "\n" for s in data.train_sentences]
    for name, count in (("10k.txt", 10_000), ("1m.txt", 1_000_000)):
        with open(directory / name, "w", encoding="utf-8") as file:
            file.writelines(islice(cycle(lines), count))
    with open(directory / "1m.txt", "rb") as source, gzip.open(directory / "1m.txt.gz", "wb") as target:
        while chunk := source.read(1 << 20):
            target.write(chunk)


def train(args: list[str], processes: int = 1) -> dict:
    """Run ``train.py fit ARGS`` with Timing on ``processes`` CPU processes; its numbers."""
    with tempfile.TemporaryDirectory() as root:
        output = Path(root) / "timing.json"
        command = [sys.executable, str(ROOT / "train.py"), "fit", *args,
                   "--trainer.callbacks+=benchmarks.stream.Timing", "--trainer.callbacks.output", str(output),
                   "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
                   "--trainer.default_root_dir", root, "--trainer.accelerator", "cpu",
                   "--trainer.devices", str(processes)]
        if processes > 1:
            command += ["--trainer.strategy", "ddp"]
        env = {**os.environ, LAUNCHED: str(time.time()), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
        return json.loads(output.read_text())


def parse(checkpoint: str, corpus: Path, window: int | None = None) -> dict:
    """``treeexp parse CHECKPOINT CORPUS -`` (output discarded) in a fresh one-thread process:
    its seconds, sentences/s and peak RSS (its own, from ``wait4``)."""
    command = [sys.executable, "-m", "parser.main", "parse", checkpoint, str(corpus), "-", "--no-progress",
               *(["--window", str(window)] if window else [])]
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{shlex.join(command)} failed: {child.stderr.read().decode()[-2000:]}")
    with open(corpus, "rb") as lines:
        sentences = sum(1 for _ in lines)
    return {"seconds": seconds, "sentences_per_s": sentences / seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def parse_report(checkpoint: str, directory: Path, repeats: int) -> str:
    """:func:`parse` of 10k.txt by window (the default, and the whole file: the baseline),
    interleaved, medians; then 1m.txt with the default window; a markdown table."""
    runs: dict[str, list[dict]] = {"default": [], "whole file": []}
    for _ in range(repeats):
        runs["default"].append(parse(checkpoint, directory / "10k.txt"))
        runs["whole file"].append(parse(checkpoint, directory / "10k.txt", window=10_000))
    rows = [[f"10k.txt ({repeats} runs, medians)", name, *(statistics.median(r[key] for r in measured)
                                                           for key in ("sentences_per_s", "peak_rss_mib"))]
            for name, measured in runs.items()]
    large = parse(checkpoint, directory / "1m.txt")
    rows.append(["1m.txt (1 run)", "default", large["sentences_per_s"], large["peak_rss_mib"]])
    return markdown_table(["corpus", "window", "sentences/s", "peak RSS (MiB)"],
                          [[corpus, window, f"{speed:.0f}", f"{rss:.0f}"] for corpus, window, speed, rss in rows])


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("what", choices=["make", "corpora", "processes", "parse"])
    cli.add_argument("--dir", type=Path, default=Path("/tmp/treeexp-stream"))
    cli.add_argument("--steps", type=int, default=None)
    cli.add_argument("--checkpoint", help="parse: a saved parser (a checkpoint or a directory)")
    cli.add_argument("--repeats", type=int, default=3, help="parse: runs of each 10k.txt variant")
    args = cli.parse_args(argv)
    if args.what == "make":
        make(args.dir)
        return
    if args.what == "parse":
        if not args.checkpoint:
            cli.error("parse needs --checkpoint")
        print(parse_report(args.checkpoint, args.dir, args.repeats))
        return
    if args.what == "corpora":
        print("| corpus | time to first step (s) | peak RSS (MiB) | sentences/s |\n|---|---|---|---|")
        for name in ("10k.txt", "1m.txt", "1m.txt.gz"):
            result = train(["--config", str(ROOT / "configs/entropy.yaml"), "--data.unlabeled", str(args.dir / name),
                            "--data.batch_tokens", "1000", "--trainer.max_steps", str(args.steps or 8)])
            print(f"| {name} | {result['first_step_s']} | {result['peak_rss_mib']} | {result['sentences_per_s']} |",
                  flush=True)
        return
    print("| processes | time to first step (s) | peak RSS per process (MiB) | sentences/s |\n|---|---|---|---|")
    for processes in (1, 2):
        result = train(["--config", str(ROOT / "configs/likelihood.yaml"), "--data.batch_tokens", "1000",
                        "--trainer.max_steps", str(args.steps or 16)], processes)
        print(f"| {processes} | {result['first_step_s']} | {result['peak_rss_mib']} | {result['sentences_per_s']} |",
              flush=True)


if __name__ == "__main__":
    main()
