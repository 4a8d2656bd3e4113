"""Sentences in and out: CoNLL-U and one-sentence-per-line text files <-> :class:`Sentence`.

Reading keeps every column, comment, multiword token and empty node, so that
``read_conllu`` then ``write_conllu`` reproduces a UD file byte for byte; malformed input
raises :class:`ConlluError` naming file and line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal, TextIO

import conllu
from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_id_value, parse_int_value

log = logging.getLogger(__name__)

FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
# Keep comments without " = value" (conllu drops them by default) so output reproduces them.
_KEEP_ALL_COMMENTS = {"__fallback__": lambda key, value: (key, value)}


class ConlluError(ValueError):
    """Malformed CoNLL-U or text input; the message starts with ``path:line:``."""


@dataclass
class Sentence:
    """One sentence of syntactic words (multiword-token lines and empty nodes excluded).

    ``heads``/``deprels`` are None when the input has no (used) trees. ``tokenlist`` is
    the whole sentence as read, every column kept as its original string except ID
    (int, or a tuple for ``3-4`` / ``5.1``) and HEAD (int, None for ``_``), so that
    ``write_conllu`` reproduces the input exactly. ``source`` is ``"path:LINE"``.
    """

    words: list[str]
    upos: list[str]
    heads: list[int] | None
    deprels: list[str] | None
    tokenlist: conllu.TokenList
    source: str

    def __len__(self) -> int:
        return len(self.words)


def read_conllu(path: str | os.PathLike, trees: bool = True,
                on_invalid: Literal["raise", "skip"] = "raise") -> list[Sentence]:
    """Read a CoNLL-U file with gold tokenisation.

    With ``trees`` every word needs an integer HEAD and the heads must form a tree
    (one word attached to the root, no cycle); otherwise HEAD and DEPREL are ignored
    (they may be ``_``, a given HEAD must still be in range) and ``heads``/``deprels``
    are None. An invalid tree raises, or
    with ``on_invalid="skip"`` the sentence is dropped and the count logged as a
    warning. Any other malformed input raises ``ConlluError`` naming file and line.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', not {on_invalid!r}")
    sentences, skipped = [], 0
    for start, lines in _blocks(path):
        sentence = _parse_block(path, start, lines, trees)
        problem = _tree_problem(sentence.heads) if trees else None
        if problem is None:
            sentences.append(sentence)
        elif on_invalid == "skip":
            skipped += 1
        else:
            raise ConlluError(f"{sentence.source}: invalid tree: {problem}")
    if not sentences and not skipped:
        raise ConlluError(f"{path}:1: empty file, no sentences")
    if skipped:
        log.warning("%s: skipped %d sentences with invalid trees", path, skipped)
    return sentences


def _blocks(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield (1-based number of the first line, lines) for each blank-line-separated block."""
    block: list[str] = []
    start = 0
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n")
            if line.strip():
                if not block:
                    start = number
                block.append(line)
            elif block:
                yield start, block
                block = []
    if block:
        yield start, block


def _parse_block(path: str | os.PathLike, start: int, lines: list[str], trees: bool) -> Sentence:
    """Parse and check one sentence block; ``start`` is the line number of ``lines[0]``."""
    metadata = conllu.Metadata()
    tokens: list[conllu.Token] = []
    words: list[tuple[int, conllu.Token]] = []  # (line number, token) of syntactic words
    for number, line in enumerate(lines, start):
        where = f"{path}:{number}"
        if line.startswith("#"):
            if tokens:
                raise ConlluError(f"{where}: comment line after the first token line")
            metadata.update(parse_comment_line(line, _KEEP_ALL_COMMENTS))
            continue
        columns = line.split("\t")
        if len(columns) != len(FIELDS):
            raise ConlluError(f"{where}: expected 10 tab-separated columns, found {len(columns)}")
        token = conllu.Token(zip(FIELDS, columns))
        try:
            token["id"] = parse_id_value(columns[0])
        except ParseException:
            token["id"] = None
        if token["id"] is None:
            raise ConlluError(f"{where}: invalid ID {columns[0]!r}")
        try:
            token["head"] = parse_int_value(columns[6])
        except ParseException:
            raise ConlluError(f"{where}: HEAD {columns[6]!r} is not an integer") from None
        tokens.append(token)
        if isinstance(token["id"], int):
            if token["id"] != len(words) + 1:
                expected = len(words) + 1
                raise ConlluError(f"{where}: word ID {columns[0]} where {expected} was expected")
            words.append((number, token))
    if not words:
        raise ConlluError(f"{path}:{start}: sentence without word lines")

    for number, token in words:
        head = token["head"]
        if head is None and trees:
            raise ConlluError(f"{path}:{number}: missing HEAD")
        if head is not None and not 0 <= head <= len(words):
            raise ConlluError(f"{path}:{number}: HEAD {head} outside 0..{len(words)}")
    return Sentence(
        words=[token["form"] for _, token in words],
        upos=[token["upos"] for _, token in words],
        heads=[token["head"] for _, token in words] if trees else None,
        deprels=[token["deprel"] for _, token in words] if trees else None,
        tokenlist=conllu.TokenList(tokens, metadata),
        source=f"{path}:{start}",
    )


def _tree_problem(heads: list[int]) -> str | None:
    """Why ``heads`` (head of word m at ``heads[m-1]``) is not a tree, or None."""
    roots = heads.count(0)
    if roots > 1:
        return f"{roots} words attached to the root"
    reaches_root = {0}
    for word in range(1, len(heads) + 1):
        path: list[int] = []
        while word not in reaches_root:
            if word in path:
                return f"cycle through word {word}"
            path.append(word)
            word = heads[word - 1]
        reaches_root.update(path)
    return None


def read_text(path: str | os.PathLike) -> list[Sentence]:
    """Read one pre-tokenised sentence per line (whitespace-separated words).

    Words get UPOS ``_`` and no trees; each sentence gets a TokenList (with a
    ``# text`` comment) so predictions can be written as CoNLL-U. A blank line raises.
    """
    with open(path, encoding="utf-8") as file:
        lines = file.read().split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise ConlluError(f"{path}:1: empty file, no sentences")
    sentences = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            raise ConlluError(f"{path}:{number}: blank line (expected one sentence per line)")
        tokens = [conllu.Token(zip(FIELDS, (i, word, "_", "_", "_", "_", None, "_", "_", "_")))
                  for i, word in enumerate(words, 1)]
        metadata = conllu.Metadata(text=" ".join(words))
        sentences.append(Sentence(words, ["_"] * len(words), None, None,
                                  conllu.TokenList(tokens, metadata), f"{path}:{number}"))
    return sentences


def read_sentences(path: str | os.PathLike) -> list[Sentence]:
    """Sentences to parse or to learn from without trees: ``.txt`` as text, else CoNLL-U."""
    return read_text(path) if str(path).endswith(".txt") else read_conllu(path, trees=False)


def has_upos(sentences: Sequence[Sentence]) -> bool:
    """Whether there are sentences and all their words carry a UPOS tag (not ``_``)."""
    return bool(sentences) and all("_" not in s.upos for s in sentences)


def write_conllu(sentences: Sequence[Sentence], path_or_file: str | os.PathLike | TextIO,
                 heads: Sequence[Sequence[int]] | None = None,
                 deprels: Sequence[Sequence[str]] | None = None) -> None:
    """Write sentences as CoNLL-U, HEAD and DEPREL replaced by the given predictions.

    ``heads[i]`` / ``deprels[i]`` align with ``sentences[i].words``; when omitted the
    column is written as read. Everything else (comments, multiword-token lines, empty
    nodes, DEPS, ...) is written unchanged, so ``read_conllu`` then ``write_conllu``
    reproduces a UD file byte for byte.
    """
    for name, predictions in (("heads", heads), ("deprels", deprels)):
        if predictions is not None and len(predictions) != len(sentences):
            raise ValueError(f"{len(predictions)} {name} for {len(sentences)} sentences")
    if isinstance(path_or_file, (str, os.PathLike)):
        output = open(path_or_file, "w", encoding="utf-8")
    else:
        output = nullcontext(path_or_file)
    with output as file:
        for i, sentence in enumerate(sentences):
            tokenlist = sentence.tokenlist
            if heads is not None or deprels is not None:
                tokenlist = _with_predictions(sentence, None if heads is None else heads[i],
                                              None if deprels is None else deprels[i])
            file.write(tokenlist.serialize())


def _with_predictions(sentence: Sentence, heads: Sequence[int] | None,
                      deprels: Sequence[str] | None) -> conllu.TokenList:
    """A copy of the sentence's TokenList with the words' HEAD and/or DEPREL replaced."""
    for name, values in (("heads", heads), ("deprels", deprels)):
        if values is not None and len(values) != len(sentence):
            raise ValueError(f"{sentence.source}: {len(values)} {name} for {len(sentence)} words")
    tokens = []
    for token in sentence.tokenlist:
        token = conllu.Token(token)
        if isinstance(token["id"], int):
            if heads is not None:
                token["head"] = int(heads[token["id"] - 1])
            if deprels is not None:
                token["deprel"] = deprels[token["id"] - 1]
        tokens.append(token)
    return conllu.TokenList(tokens, sentence.tokenlist.metadata)
