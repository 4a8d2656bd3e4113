"""Peak memory of training steps on the default EWT recipe's worst batches.

    python -m benchmarks.memory [--worst 3] [--config configs/likelihood.yaml]

Cuts EWT train into the batches of the shipped recipe (``configs/likelihood.yaml``:
``batch_tokens``, MiniLM), picks the ``--worst`` batches with the most padded transformer
positions (windows x longest window) and takes one optimiser step on each, in a fresh
process per variant: the encoder as shipped (windows run in chunks of similar length) and,
as the baseline, every window padded to the longest (one chunk). Reports peak RSS and the
seconds of those steps; the peak of a whole run is the peak of its worst batch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import yaml

from benchmarks.common import fresh_process, peak_rss_mib
from objectives.likelihood import Likelihood
from parser.data.datamodule import DependencyDataModule
from parser.model import Parser


def worst_batches(data: DependencyDataModule, model: Parser, k: int) -> list:
    """The ``k`` training batches with the most padded transformer positions."""
    sized = []
    for batch in data.train_dataloader():
        sub = model.network.encoder.subwords(batch.words)
        sized.append((sub.input_ids.numel(), int(sub.attention_mask.sum()), batch))
    sized.sort(key=lambda item: -item[0])
    return sized[:k]


def measure(config: str, worst: int, chunked: bool) -> dict:
    recipe = yaml.safe_load(open(config))
    data = DependencyDataModule(treebank=recipe["data"]["treebank"], batch_tokens=recipe["data"]["batch_tokens"])
    data.setup("fit")
    torch.manual_seed(0)
    model = Parser(encoder=recipe["model"]["encoder"], labels=data.label_vocab.itos)
    likelihood = Likelihood()
    if not chunked:
        model.network.encoder.PADDED_SUBWORDS_PER_CHUNK = sys.maxsize
    batches = worst_batches(data, model, worst)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    start = time.perf_counter()
    for _, _, batch in batches:
        loss = likelihood(model(batch.words), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {
        "variant": "chunked (shipped)" if chunked else "padded (baseline)",
        "peak_rss_mib": peak_rss_mib(),
        "seconds": time.perf_counter() - start,
        "padded_positions": [p for p, _, _ in batches],
        "real_subwords": [r for _, r, _ in batches],
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--config", default="configs/likelihood.yaml")
    cli.add_argument("--worst", type=int, default=3)
    cli.add_argument("--variant", choices=["chunked", "padded"], help="(internal) measure one variant in this process")
    args = cli.parse_args()
    if args.variant:
        print(json.dumps(measure(args.config, args.worst, args.variant == "chunked")))
        return
    print(f"torch {torch.__version__}, {os.environ.get('OMP_NUM_THREADS', 'default')} threads, "
          f"{args.worst} worst batches of {args.config}, one process per variant")
    print("| variant | peak RSS (MiB) | seconds | padded positions / real subwords |\n|---|---:|---:|---|")
    for variant in ("chunked", "padded"):
        row = fresh_process("benchmarks.memory", ["--config", args.config, "--worst", str(args.worst), "--variant", variant])
        sizes = ", ".join(f"{p}/{r}" for p, r in zip(row["padded_positions"], row["real_subwords"]))
        print(f"| {row['variant']} | {row['peak_rss_mib']} | {row['seconds']:.1f} | {sizes} |")


if __name__ == "__main__":
    main()
