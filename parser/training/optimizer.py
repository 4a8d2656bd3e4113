"""The optimiser: AdamW over the network's parameter groups with a linear warm-up then a
linear decay to 0, stepped every optimiser step, the clipping of its gradients and the check that they are finite."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import torch

from objectives.schedule import Schedule

from parser.cli import Failure
from parser.network import Network

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


def parameter_groups(network: Network, lr: float, encoder_lr: float) -> list[dict]:
    """The trainable parameters of ``network`` as AdamW's groups: the pretrained transformer's
    at ``encoder_lr``, those that start from scratch (scorer, tagger, layer mix, character
    encoder, LSTM) at ``lr``."""
    transformer = [p for p in network.encoder.model.parameters() if p.requires_grad]
    rest = [p for n, p in network.named_parameters() if p.requires_grad and not n.startswith("encoder.model.")]
    return [{"params": rest, "lr": lr}, {"params": transformer, "lr": encoder_lr}]


def clip_gradients(optimizer: torch.optim.Optimizer, value: float | None, algorithm: str | None = None) -> None:
    """Clip the gradients of ``optimizer``'s parameters as Lightning does without mixed
    precision: their global 2-norm to ``value``, or each to ``[-value, value]`` (``algorithm``
    ``"value"``); nothing when ``value`` is unset or 0."""
    if not value:
        return
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(parameters, value)
    else:
        torch.nn.utils.clip_grad_norm_(parameters, value)


def check_finite_gradients(parameters: list[torch.nn.Parameter], step: int, terms: Mapping[str, torch.Tensor]) -> None:
    """Stop a run whose gradient holds a NaN or an infinity before the optimiser spreads it into
    every weight (the checkpoints written so far stay sound): one line naming the step and each
    term's value at it. One host sync a step, as torch's gradient scaler makes for the same check
    under 16-mixed, where the scaler skips such steps itself and the caller leaves them to it."""
    gradients = [p.grad for p in parameters if p.grad is not None]
    if gradients and not torch.nn.utils.get_total_norm(gradients).isfinite():
        values = ", ".join(f"{name} {float(value):.4g}" for name, value in terms.items())
        raise Failure(f"step {step}: the gradient is not finite (NaN or inf) with the terms at {values}: the run stops "
                      "before the weights are spoiled; resume from the last checkpoint with a lower learning rate or "
                      "term weight (--debug: the traceback)")
