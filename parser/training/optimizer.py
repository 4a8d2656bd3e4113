"""AdamW with a linear warm-up then a linear decay to 0, stepped every optimiser step."""

from __future__ import annotations

from functools import partial

import torch

from objectives.schedule import Schedule

FUSED_DEVICES = ("cpu", "cuda")  # where torch has a fused AdamW kernel (benchmarks.optimizer: against foreach)


def adamw_linear(groups: list[dict], betas: tuple[float, float], weight_decay: float, warmup_steps: int,
                 total_steps: int, device: torch.device, fuse: bool = True) -> dict:
    """Lightning's ``configure_optimizers`` answer: AdamW over the parameter ``groups``
    (each with its ``lr``), fused where the device has the kernel (and ``fuse``), and each
    learning rate ramped up over ``warmup_steps`` (at most half the run) then down to 0 at
    ``total_steps``."""
    optimizer = torch.optim.AdamW(groups, betas=betas, weight_decay=weight_decay,
                                  fused=fuse and torch.device(device).type in FUSED_DEVICES)
    factor = Schedule(1.0, min(warmup_steps, total_steps // 2), "linear")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(factor, total_steps=total_steps))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
