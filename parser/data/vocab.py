"""Vocabularies: strings <-> indices for UPOS tags and dependency labels.

Label vocabulary choice: it holds the full DEPRELs (e.g. ``nmod:poss``) of the labeled
training sentences (and, for a parser started from another, every label that one knows) and
has no ``<unk>`` entry. A DEPREL it lacks maps to a label of the same universal part
(``amod:att`` -> ``amod``), which LAS compares as the CoNLL 2018 scorer does; one whose universal
part it lacks too maps to -100, the ignore index, so the loss skips it and
``parser.training.metrics.AttachmentScore`` counts it as a LAS error.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from torch import Tensor

from objectives.conventions import IGNORE_INDEX, UPOS_TAGS

from parser.data.sentences import Sentence


class Vocab:
    """Strings <-> indices. ``index`` of an unknown string is the index of ``unk``, or
    -100 (the ignore index) for a vocabulary without ``unk``.

    Plain lists inside, so it pickles; ``state_dict``/``from_state_dict`` give a
    JSON/YAML-friendly form for checkpoints and hyperparameters.
    """

    def __init__(self, itos: Iterable[str], unk: str | None = None):
        self.itos = list(itos)
        self.unk = unk
        self._stoi = {s: i for i, s in enumerate(self.itos)}
        if len(self._stoi) != len(self.itos):
            raise ValueError("vocabulary entries must be unique")
        self.unk_index = IGNORE_INDEX if unk is None else self._stoi[unk]

    @classmethod
    def from_iterable(cls, items: Iterable[str], specials: Sequence[str] = (),
                      unk: str | None = None) -> Vocab:
        """``specials`` first (in order), then the other distinct items sorted."""
        return cls([*specials, *sorted(set(items) - set(specials))], unk)

    def index(self, s: str) -> int:
        return self._stoi.get(s, self.unk_index)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, s: object) -> bool:
        return s in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and (self.itos, self.unk) == (other.itos, other.unk)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} entries, unk={self.unk!r})"

    def state_dict(self) -> dict:
        return {"itos": list(self.itos), "unk": self.unk}

    @classmethod
    def from_state_dict(cls, state: dict) -> Vocab:
        return cls(state["itos"], state["unk"])


class LabelVocab(Vocab):
    """DEPRELs <-> indices; a DEPREL the vocabulary lacks gets the index of its universal part
    (``amod`` for ``amod:att``), else of the first label with that universal part
    (``nmod:poss`` for ``nmod:att``), else -100."""

    def __init__(self, itos: Iterable[str], unk: str | None = None):
        super().__init__(itos, unk)
        self._universal: dict[str, int] = {}
        for i, label in enumerate(self.itos):
            self._universal.setdefault(universal_deprel(label), i)
        for i, label in enumerate(self.itos):
            if ":" not in label:
                self._universal[label] = i  # the universal label itself, where the vocabulary has it

    def index(self, s: str) -> int:
        return self._stoi.get(s, self._universal.get(universal_deprel(s), self.unk_index))


def build_upos_vocab() -> Vocab:
    """The 17 UD UPOS tags after ``<pad>`` = 0 and ``<unk>`` = 1 (used for ``_`` too)."""
    return Vocab(["<pad>", "<unk>", *UPOS_TAGS], unk="<unk>")


def build_label_vocab(sentences: Iterable[Sentence], known: Iterable[str] = ()) -> LabelVocab:
    """The full DEPRELs of the sentences and the ``known`` labels (another parser's), sorted,
    but ``_`` (unknown); no ``<unk>`` (see :class:`LabelVocab`)."""
    return LabelVocab.from_iterable([*known, *(d for s in sentences for d in s.deprels if d != "_")])


def universal_deprel(deprel: str) -> str:
    """The universal part of a DEPREL, before any ``:subtype`` (``nmod:poss`` -> ``nmod``),
    which LAS and CLAS compare (CoNLL 2018 definitions)."""
    return deprel.split(":")[0]


def reindex_labels(scores: Tensor, source: Sequence[str], target: Sequence[str]) -> Tensor | None:
    """Label scores ``(..., len(source))`` in the order of another label vocabulary:
    ``(..., len(target))``, matched by name; a label ``source`` lacks gets ``-inf`` (no
    mass), one only ``source`` has is left out. ``scores`` itself when the vocabularies are
    equal, None when they share no label."""
    if list(source) == list(target):
        return scores
    into, taken = _shared_labels(tuple(source), tuple(target))
    if not into:
        return None
    out = scores.new_full((*scores.shape[:-1], len(target)), float("-inf"))
    out[..., into] = scores[..., taken]
    return out


@functools.lru_cache(maxsize=8)
def _shared_labels(source: tuple[str, ...], target: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Positions in ``target`` and in ``source`` of the labels both have (once per pair)."""
    position = {name: i for i, name in enumerate(source)}
    shared = [(j, position[name]) for j, name in enumerate(target) if name in position]
    return [j for j, _ in shared], [i for _, i in shared]
