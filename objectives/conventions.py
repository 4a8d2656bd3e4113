"""Conventions shared by the whole project (docs/architecture.md): the ignore index of
gold labels, the UD tag set, which entries of a padded score tensor are arcs, and the
error a run's settings raise when they cannot work.

Position 0 is the root, words are ``1..lengths[b]``, ``N`` is the longest sentence.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


class ConfigurationError(ValueError):
    """Settings that cannot work, alone or with the data and model they are given (a bad
    option value, an objective that needs tags, a teacher or data the run lacks). The
    command-line tools report it in one ``error:`` line (``parser.cli``)."""

__all__ = ["IGNORE_INDEX", "UPOS_TAGS", "UD_RELATIONS", "arc_mask", "word_mask", "masks"]

IGNORE_INDEX = -100
"""Gold label of position 0, padding and labels unseen in training (``F.cross_entropy``'s default)."""

UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)  # fmt: skip
"""The 17 universal POS tags of UD v2."""

UD_RELATIONS = (
    "acl", "advcl", "advmod", "amod", "appos", "aux", "case", "cc", "ccomp", "clf", "compound",
    "conj", "cop", "csubj", "dep", "det", "discourse", "dislocated", "expl", "fixed", "flat",
    "goeswith", "iobj", "list", "mark", "nmod", "nsubj", "nummod", "obj", "obl", "orphan",
    "parataxis", "punct", "reparandum", "root", "vocative", "xcomp",
)  # fmt: skip
"""The 37 universal dependency relations of UD v2 (a label is one of them, or one with a
``:subtype``)."""


@functools.lru_cache(maxsize=256)
def _constants(n: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Cached per (N, device), never written to: positions ``(N+1,)``, positions > 0
    ``(N+1,)`` and the ``(N+1, N+1)`` mask of h != m and m != 0."""
    positions = torch.arange(n + 1, device=device)
    static = ~torch.eye(n + 1, dtype=torch.bool, device=device)
    static[:, 0] = False
    return positions, positions > 0, static


def masks(lengths: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """:func:`arc_mask` ``(B, N+1, N+1)`` and the padded words ``(B, N)`` (word m + 1 is
    padding: ``m + 1 > lengths[b]``), from one comparison."""
    positions, _, static = _constants(n, lengths.device)
    inside = positions <= lengths.unsqueeze(-1)  # (B, N+1): the root and the words
    arcs = torch.logical_and(static, inside.unsqueeze(-1)).logical_and_(inside.unsqueeze(-2))
    return arcs, inside[:, 1:].logical_not()


def word_mask(lengths: Tensor, n: int) -> Tensor:
    """Real words: ``(B,)`` lengths -> ``(B, N+1)`` bool, ``1 <= i <= lengths[b]``."""
    positions, not_root, _ = _constants(n, lengths.device)
    return (positions <= lengths.unsqueeze(-1)).logical_and_(not_root)


def arc_mask(lengths: Tensor, n: int) -> Tensor:
    """Possible arcs h -> m: ``(B,)`` lengths -> ``(B, N+1, N+1)`` bool, h in 0..len,
    m in 1..len, h != m. The same for both tree sets (single-root trees are a subset)."""
    return masks(lengths, n)[0]
