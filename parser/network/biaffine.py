"""Biaffine arc and label scorers (Dozat & Manning 2017)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from objectives.objective import Scores


class MLP(nn.Sequential):
    """Linear -> LeakyReLU(0.1) -> dropout: the projections of Dozat & Manning."""

    def __init__(self, n_in: int, n_out: int, dropout: float):
        super().__init__(nn.Linear(n_in, n_out), nn.LeakyReLU(0.1), nn.Dropout(dropout))


class Biaffine(nn.Module):
    """``s[b, h, m, o] = [head_h; 1]^T U_o [dep_m; 1]``, optionally without some bias terms.

    Args: ``heads`` ``(B, N+1, D)``, ``deps`` ``(B, N+1, D)``. Returns ``(B, N+1, N+1, O)``
    (``O`` = ``n_out``), or ``(B, N+1, N+1)`` when ``n_out == 1``.
    """

    def __init__(self, n_in: int, n_out: int = 1, head_bias: bool = True, dep_bias: bool = True):
        super().__init__()
        self.head_bias, self.dep_bias, self.n_out = head_bias, dep_bias, n_out
        self.weight = nn.Parameter(torch.zeros(n_out, n_in + head_bias, n_in + dep_bias))

    def forward(self, heads: Tensor, deps: Tensor) -> Tensor:
        if self.head_bias:
            heads = torch.cat([heads, heads.new_ones(heads.shape[:-1] + (1,))], -1)
        if self.dep_bias:
            deps = torch.cat([deps, deps.new_ones(deps.shape[:-1] + (1,))], -1)
        scores = torch.einsum("bhi,oij,bmj->bhmo", heads, self.weight, deps)
        return scores.squeeze(-1) if self.n_out == 1 else scores


class BiaffineScorer(nn.Module):
    """Word vectors -> arc scores ``(B, N+1, N+1)`` and label scores ``(B, N+1, N+1, L)``.

    The arc scorer has a head bias but no dependent bias (a term constant per dependent
    cancels in every tree distribution); the label scorer has both.
    """

    def __init__(self, n_in: int, n_labels: int, arc_size: int = 500, label_size: int = 100, dropout: float = 0.33):
        super().__init__()
        self.arc_head, self.arc_dep = MLP(n_in, arc_size, dropout), MLP(n_in, arc_size, dropout)
        self.label_head, self.label_dep = MLP(n_in, label_size, dropout), MLP(n_in, label_size, dropout)
        self.arc = Biaffine(arc_size, 1, head_bias=True, dep_bias=False)
        self.label = Biaffine(label_size, n_labels, head_bias=True, dep_bias=True)

    def forward(self, words: Tensor) -> Scores:
        """``words``: ``(B, N+1, H)`` with the root at position 0. Runs in float32 even
        under autocast: tree probabilities are exponentials of score differences, and bf16
        scores (3 significant digits) would turn the gradients of every objective noisy."""
        with torch.autocast(words.device.type, enabled=False):
            words = words.float()
            arcs = self.arc(self.arc_head(words), self.arc_dep(words))
            labels = self.label(self.label_head(words), self.label_dep(words))
        return Scores(arcs=arcs, labels=labels)
