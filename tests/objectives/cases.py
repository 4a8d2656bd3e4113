"""Shared cases of the engine tests: tree sets, dtypes with their tolerances, padded batches."""

import torch

from objectives import baselines as bl

TREE_SETS = [False, True]
DTYPES = [torch.float64, torch.float32]
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-10}, torch.float32: {"rtol": 1e-4, "atol": 1e-5}}
# (n, labels): unlabeled up to 6 words, labeled (3 labels) up to 4 words
SHAPES = [(n, None) for n in range(1, 7)] + [(n, 3) for n in range(1, 5)]


def batch(n, num_labels=None, dtype=torch.float64, seed=0, scale=2.0):
    """Mixed lengths with n the longest; large garbage on padding and non-arcs."""
    generator = torch.Generator().manual_seed(seed)
    return bl.random_batch([n, 1, (n + 1) // 2, n], num_labels, scale=scale, dtype=dtype, generator=generator)


def check(got, expected, dtype):
    """``got`` has ``dtype`` and matches the float64 oracle ``expected`` within ``TOL[dtype]``."""
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), expected, **TOL[dtype])
