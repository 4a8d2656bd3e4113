"""Whether bfloat16 autocast pays on this machine: only where the processor does bf16
arithmetic (a GPU that supports it; a CPU with AVX512-BF16 or AMX). Elsewhere autocast
emulates it, and on a CPU without those instructions it measured 5.5x slower than float32
(docs/notebook/benchmarks.md), so ``auto`` means float32 there."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 arithmetic


def cpu_field(name: str, cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The value of the processor's first ``name`` line in ``cpuinfo`` (Linux); None where there is none."""
    try:
        with open(cpuinfo) as lines:
            return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == name), None)
    except OSError:
        return None


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The processor's feature flags (Linux); empty where they cannot be read."""
    return set((cpu_field("flags", cpuinfo) or "").split())


def processor(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """This machine's processor in one line, what a run's CPU minutes depend on: its model, its
    cores and its bf16 arithmetic (``AMD EPYC, 2 cores, avx512_bf16``)."""
    native = sorted(set(BF16_CPU_FLAGS) & cpu_flags(cpuinfo))
    return (f"{cpu_field('model name', cpuinfo) or platform.processor() or 'cpu'}, {os.cpu_count()} cores, "
            f"{' '.join(native) or 'no bf16 arithmetic'}")


def bf16_pays(device: str = "cpu", cpuinfo: str | Path = "/proc/cpuinfo") -> tuple[bool, str]:
    """Whether bf16 autocast is faster than float32 on ``device`` (``cpu`` or ``cuda``), and why."""
    if device == "cuda":
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return supported, f"{'a' if supported else 'no'} GPU with bf16 arithmetic"
    native = sorted(set(BF16_CPU_FLAGS) & cpu_flags(cpuinfo))
    if native:
        return True, f"this CPU does bf16 arithmetic ({', '.join(native)})"
    return False, f"this CPU has no bf16 arithmetic ({' or '.join(BF16_CPU_FLAGS)}): bf16 would be emulated, slower"


def resolve_precision(precision: str | None, device: str) -> tuple[str | None, str | None]:
    """``precision`` as given, or for ``auto`` bf16-mixed where it pays and 32-true elsewhere,
    with the line that says which and why (None when nothing was decided)."""
    if precision != "auto":
        return precision, None
    pays, why = bf16_pays(device)
    chosen = "bf16-mixed" if pays else "32-true"
    return chosen, f"precision auto: {chosen}, {why}"
