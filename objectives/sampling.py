"""Exact samples from the distribution over spanning trees, batched, on the scores' device.

:func:`sample_trees` draws each word's head in turn from its marginal given the heads
already drawn: ``p(d) = prod_m p(d_m | d_1..d_{m-1})``, and each factor is a column of
the marginals (matrix-tree theorem) of the scores with the drawn columns pinned to their
arc. Exact for both tree sets (the engine handles the single-root constraint), every
sample of every sentence advances in lockstep (`N` batched factorisations, O(N^4) work per
sample), and the random numbers come from one ``torch.Generator``. Wilson's random walks
(with the root constraint of Zmigrod, Vieira & Cotterell 2021) cost less per sample but
run a data-dependent number of steps per sentence, which does not batch in lockstep.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .conventions import arc_mask, word_mask
from .mtt import marginals

__all__ = ["sample_trees"]


def sample_trees(scores: Tensor, lengths: Tensor, n: int, multiroot: bool = False,
                 generator: torch.Generator | None = None) -> Tensor:
    """``n`` independent trees per sentence, heads ``(n, B, N+1)`` (0 at position 0 and on
    padding), drawn with probability proportional to ``exp`` of their arc ``scores``
    ``(B, N+1, N+1)``. Every sentence must have a tree of finite score."""
    batch, size = scores.shape[0], scores.shape[-1]
    lengths = lengths.to(scores.device)
    arcs = arc_mask(lengths, size - 1)
    pinned = scores.detach().masked_fill(~arcs, float("-inf")).repeat(n, 1, 1)  # (n*B, N+1, N+1)
    repeated = lengths.repeat(n)
    words = word_mask(repeated, size - 1)
    heads = torch.zeros(n * batch, size, dtype=torch.long, device=scores.device)
    for word in range(1, size):
        column = marginals(pinned, repeated, multiroot, validate=False)[:, :, word].clamp_min(0.0)
        column[:, 0] += ~words[:, word]  # padding: "head" 0, never used
        heads[:, word] = torch.multinomial(column, 1, generator=generator).squeeze(-1)
        keep = torch.nn.functional.one_hot(heads[:, word], size).bool()
        pinned[:, :, word] = pinned[:, :, word].masked_fill(~keep, float("-inf"))
    return heads.masked_fill(~words, 0).view(n, batch, size)
