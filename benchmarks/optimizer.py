"""The optimiser step on the parser's parameters: fused AdamW (what training uses where torch
has the kernel) against the foreach implementation, interleaved, medians and their ratio.

    OMP_NUM_THREADS=1 python -m benchmarks.optimizer [--encoder all-MiniLM-L6-v2] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.common import interleaved
from parser.model import Parser

IMPLEMENTATIONS = {"foreach (baseline)": {"foreach": True}, "fused (shipped)": {"fused": True}}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--encoder", default="all-MiniLM-L6-v2")
    cli.add_argument("--labels", type=int, default=50, help="label vocabulary size (EWT has 50)")
    cli.add_argument("--repeats", type=int, default=20)
    cli.add_argument("--device", default="cpu")
    args = cli.parse_args()
    torch.manual_seed(0)
    model = Parser(encoder=args.encoder, labels=[f"label{i}" for i in range(args.labels)]).to(args.device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizers = {}
    for name, options in IMPLEMENTATIONS.items():
        copies = [p.detach().clone().requires_grad_() for p in params]
        for copy in copies:
            copy.grad = torch.randn_like(copy)
        optimizers[name] = torch.optim.AdamW(copies, lr=1e-5, betas=Parser.ADAMW_BETAS, weight_decay=0.01, **options)
    seconds = interleaved({name: optimizer.step for name, optimizer in optimizers.items()}, args.repeats, warmup=2)
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    base = medians["foreach (baseline)"]
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} thread(s), {args.encoder}: "
          f"{sum(p.numel() for p in params):,} parameters, median of {args.repeats} steps")
    print("| AdamW step | ms | speed-up |\n|---|---:|---:|")
    for name, median in medians.items():
        print(f"| {name} | {1000 * median:.1f} | {base / median:.2f}x |")


if __name__ == "__main__":
    main()
