"""Sentences in and out: CoNLL-U and one-sentence-per-line text files <-> :class:`Sentence`.

Text files hold one tokenised sentence per line; blank lines separate paragraphs (the
sentence after them carries CoNLL-U's ``# newpar``).

Reading keeps every column, comment, multiword token and empty node, so that
``read_conllu`` then ``write_conllu`` reproduces a UD file byte for byte (comment lines
as written); malformed input
(bytes that are not UTF-8 included) raises :class:`ConlluError` naming file and line. A
name ending in ``.gz`` is read through gzip, ``-`` is standard input (``open_output``: standard
output). :func:`records` and :func:`parse_record` are the pieces the strict readers here and
the lenient readers share (``parse_records`` and ``Skipped``: ``parser.data.stream.Source``, the
unlabeled stream and ``treeexp parse``).
"""

from __future__ import annotations

import gzip
import logging
import os
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import BinaryIO, Literal, TextIO

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

    ``heads``/``deprels`` are None when the input has no (used) trees; in a partially
    annotated sentence a head is None (HEAD ``_``) where unknown. ``tokenlist`` is
    the whole sentence as read, every column kept as its original string except ID
    (int, or a tuple for ``3-4`` / ``5.1``) and HEAD (int, None for ``_``), so that
    ``write_conllu`` reproduces the input exactly. ``path`` and ``line`` (its first line,
    from 1) say where it was read; ``source`` is the two as ``"path:LINE"`` for messages,
    ``treebank`` the file's folder. ``comments``: its comment lines as written (None for a text
    line's, whose comments are those of ``tokenlist``'s metadata), written back as they are.
    """

    words: list[str]
    upos: list[str]
    heads: list[int | None] | None
    deprels: list[str] | None
    tokenlist: conllu.TokenList
    path: str
    line: int
    comments: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.words)

    @property
    def source(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def treebank(self) -> str | None:
        """The name of the treebank the sentence comes from: its file's folder
        (``UD_Wolof-WTB`` for ``.../UD_Wolof-WTB/wo_wtb-ud-train.conllu``); None for a
        path without a folder (``parse()``'s sentences)."""
        return os.path.basename(os.path.dirname(self.path)) or None


def read_conllu(path: str | os.PathLike, trees: bool = True,
                on_invalid: Literal["raise", "skip"] = "raise", partial: bool = False,
                first: int | None = None) -> list[Sentence]:
    """Read a CoNLL-U file (``.gz`` too) with gold tokenisation; with ``first``, only its first
    ``first`` valid sentences (the rest of the file is not read).

    With ``trees`` every word needs an integer HEAD and the heads must form a tree
    (one word attached to the root, no cycle); otherwise HEAD and DEPREL are ignored
    (they may be ``_``, a given HEAD must still be in range) and ``heads``/``deprels``
    are None. With ``trees`` and ``partial`` a HEAD may be ``_`` (unknown, head None; its
    DEPREL is then ignored) and the given heads must agree with some tree (no cycle, at
    most one word attached to the root). An invalid tree raises, or
    with ``on_invalid="skip"`` the sentence is dropped and the count logged as a
    warning. Any other malformed input raises ``ConlluError`` naming file and line.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', not {on_invalid!r}")
    sentences, skipped = [], 0
    for record in records(path, text=False):
        if first is not None and len(sentences) >= first:
            break
        sentence = parse_record(path, record, text=False, trees=trees, partial=partial)
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


def open_bytes(path: str | os.PathLike) -> BinaryIO:
    """The file's bytes, decompressed when its name ends in ``.gz``; ``-``: standard input (left open)."""
    if str(path) == "-":
        return open(sys.stdin.fileno(), "rb", closefd=False)
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def open_output(path: str | os.PathLike, append: bool = False) -> TextIO:
    """``path`` opened for writing UTF-8 (appending with ``append``); ``-``: standard output, left open."""
    if str(path) == "-":
        return open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False)
    return open(path, "a" if append else "w", encoding="utf-8")


def is_text(path: str | os.PathLike) -> bool:
    """Whether the file holds one tokenised sentence per line (``.txt``, ``.txt.gz``), not CoNLL-U."""
    return str(path).removesuffix(".gz").endswith(".txt")


@dataclass
class Record:
    """The undecoded lines of one sentence (a line of text or a blank-line-separated
    CoNLL-U block), without line ends; ``line`` is the number of the first;
    ``new_paragraph``: a text line that follows blank lines."""

    line: int
    lines: list[bytes]
    new_paragraph: bool = False


def records(path: str | os.PathLike, text: bool) -> Iterator[Record]:
    """The file's sentences as undecoded Records, read lazily: one per non-blank line with
    ``text`` (blank lines start a paragraph), else one per CoNLL-U block.

    Raises ConlluError for a binary file (a NUL byte or the gzip signature at its start)
    and for a ``.gz`` that is not gzip or ends early.
    """
    block: list[bytes] = []
    start = number = 0
    sentences = blank = 0  # text: sentences so far, and whether blank lines followed the last
    with open_bytes(path) as file:
        try:
            _check_text(path, file.peek(4096)[:4096])
            for number, line in enumerate(file, 1):
                stripped = line.rstrip(b"\r\n")
                if text:
                    if not stripped.strip():
                        blank = True
                        continue
                    yield Record(number, [stripped], new_paragraph=bool(sentences and blank))
                    sentences, blank = sentences + 1, False
                elif stripped.strip():
                    if not block:
                        start = number
                    block.append(stripped)
                elif block:
                    yield Record(start, block)
                    block = []
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:
            raise ConlluError(f"{path}:{number + 1}: unreadable gzip data ({error})") from None
    if block:
        yield Record(start, block)


def _check_text(path: str | os.PathLike, head: bytes) -> None:
    if head.startswith(b"\x1f\x8b"):
        raise ConlluError(f"{path}:1: binary file (gzip-compressed): name it *.gz to read it")
    if b"\0" in head:
        raise ConlluError(f"{path}:1: binary file (NUL bytes), not text")


def decode(path: str | os.PathLike, record: Record) -> list[str]:
    """The record's lines as text; ConlluError naming line and byte for bytes that are not UTF-8."""
    lines = []
    for number, raw in enumerate(record.lines, record.line):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ConlluError(f"{path}:{number}: not UTF-8 text"
                              f" (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line)") from None
    return lines


def parse_record(path: str | os.PathLike, record: Record, text: bool, trees: bool = False,
                 partial: bool = False) -> Sentence:
    """One Record as a Sentence (``trees``, ``partial`` only for CoNLL-U: see ``read_conllu``); ConlluError naming file and line
    for anything malformed, the tree itself excepted (see ``read_conllu``).

    A text line's words get UPOS ``_`` and no tree, and a TokenList with a ``# text``
    comment (after ``# newpar`` when it starts a paragraph) so that predictions can be
    written as CoNLL-U.
    """
    lines = decode(path, record)
    if not text:
        return _parse_block(path, record.line, lines, trees, partial)
    words = lines[0].split()
    if not words:  # blank but for Unicode spaces, which ``records`` cannot see in undecoded bytes
        raise ConlluError(f"{path}:{record.line}: a line of spaces only (expected one sentence per line)")
    tokens = [conllu.Token(zip(FIELDS, (i, word, "_", "_", "_", "_", None, "_", "_", "_")))
              for i, word in enumerate(words, 1)]
    comments = {"newpar": None} if record.new_paragraph else {}
    tokenlist = conllu.TokenList(tokens, conllu.Metadata(**comments, text=" ".join(words)))
    return Sentence(words, ["_"] * len(words), None, None, tokenlist, str(path), record.line)


def _parse_block(path: str | os.PathLike, start: int, lines: list[str], trees: bool, partial: bool = False) -> Sentence:
    """Parse and check one sentence block; ``start`` is the line number of ``lines[0]``."""
    metadata, comments = conllu.Metadata(), []
    tokens: list[conllu.Token] = []
    words: list[tuple[int, conllu.Token]] = []  # (line number, token) of syntactic words
    for number, line in enumerate(lines, start):
        where = f"{path}:{number}"
        if line.startswith("#"):
            if tokens:
                raise ConlluError(f"{where}: comment line after the first token line")
            metadata.update(parse_comment_line(line, _KEEP_ALL_COMMENTS))
            comments.append(line)
            continue
        columns = line.split("\t")
        if len(columns) != len(FIELDS):
            raise ConlluError(f"{where}: expected 10 tab-separated columns, found {len(columns)}")
        if not columns[1]:
            raise ConlluError(f"{where}: empty FORM")
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
        if head is None and trees and not partial:
            raise ConlluError(f"{path}:{number}: missing HEAD")
        if head is not None and not 0 <= head <= len(words):
            raise ConlluError(f"{path}:{number}: HEAD {head} outside 0..{len(words)}")
    return Sentence(
        words=[token["form"] for _, token in words],
        upos=[token["upos"] for _, token in words],
        heads=[token["head"] for _, token in words] if trees else None,
        deprels=[token["deprel"] for _, token in words] if trees else None,
        tokenlist=conllu.TokenList(tokens, metadata),
        path=str(path),
        line=start,
        comments=tuple(comments),
    )


def _tree_problem(heads: list[int | None]) -> str | None:
    """Why ``heads`` (head of word m at ``heads[m-1]``, None if unknown) agrees with no
    tree, or None."""
    roots = heads.count(0)
    if roots > 1:
        return f"{roots} words attached to the root"
    acyclic = {0, None}  # words whose chain of heads ends at the root or at an unknown head
    for word in range(1, len(heads) + 1):
        path: list[int] = []
        while word not in acyclic:
            if word in path:
                return f"cycle through word {word}"
            path.append(word)
            word = heads[word - 1]
        acyclic.update(path)
    return None


def read_text(path: str | os.PathLike) -> list[Sentence]:
    """Read one pre-tokenised sentence per line (whitespace-separated words; ``.gz`` too).

    Words get UPOS ``_`` and no trees (see ``parse_record``); blank lines separate
    paragraphs (``# newpar`` on the sentence after them).
    """
    sentences = [parse_record(path, record, text=True) for record in records(path, text=True)]
    if not sentences:
        raise ConlluError(f"{path}:1: empty file, no sentences")
    return sentences


def parse_records(path: str | os.PathLike, items: Iterable[Record | ConlluError], text: bool
                  ) -> Iterator[Sentence | ConlluError]:
    """Each Record of ``path`` parsed (``parse_record``); a malformed one, or an error already
    in its place, as its ConlluError."""
    for item in items:
        if isinstance(item, ConlluError):
            yield item
            continue
        try:
            yield parse_record(path, item, text)
        except ConlluError as error:
            yield error


class Skipped:
    """Passes the sentences of a stream on and names each malformed one (its ConlluError)
    on stderr, the first ``logged``, counting all in ``count``."""

    def __init__(self, logged: int):
        self.count = 0
        self.logged = logged

    def filter(self, items: Iterable[Sentence | ConlluError]) -> Iterator[Sentence]:
        from tqdm import tqdm  # not in every peer's environment (benchmarks.peer_drivers)

        for item in items:
            if isinstance(item, Sentence):
                yield item
                continue
            self.count += 1
            if self.count <= self.logged:
                tqdm.write(f"skipped: {item}", file=sys.stderr)  # above a progress bar, if one is shown


def read_sentences(path: str | os.PathLike) -> list[Sentence]:
    """Sentences to parse or to learn from without trees: ``.txt`` (or ``.txt.gz``) as
    text, else CoNLL-U."""
    return read_text(path) if is_text(path) else read_conllu(path, trees=False)


def conllu_blocks(path: str | os.PathLike) -> list[str]:
    """A CoNLL-U file's sentences as they are written, unparsed: each one's lines (comments, multiword
    tokens, trailing spaces) without the blank line after it; for cutting a file into parts, losslessly."""
    with open(path, encoding="utf-8") as file:
        return [block.strip("\n") for block in file.read().split("\n\n") if block.strip()]


def has_upos(sentences: Sequence[Sentence]) -> bool:
    """Whether there are sentences and all their words carry a UPOS tag (not ``_``)."""
    return bool(sentences) and all("_" not in s.upos for s in sentences)


def write_conllu(sentences: Sequence[Sentence], path_or_file: str | os.PathLike | TextIO,
                 heads: Sequence[Sequence[int]] | None = None,
                 deprels: Sequence[Sequence[str]] | None = None,
                 upos: Sequence[Sequence[str]] | None = None) -> None:
    """Write sentences as CoNLL-U, HEAD, DEPREL and UPOS replaced by the given predictions.

    ``heads[i]`` / ``deprels[i]`` / ``upos[i]`` align with ``sentences[i].words``; when
    omitted the column is written as read. Everything else (comments, multiword-token
    lines, empty nodes, DEPS, ...) is written unchanged, so ``read_conllu`` then
    ``write_conllu`` reproduces a UD file byte for byte.
    """
    columns = {"head": heads, "deprel": deprels, "upos": upos}
    for name, predictions in columns.items():
        if predictions is not None and len(predictions) != len(sentences):
            raise ValueError(f"{len(predictions)} {name} predictions for {len(sentences)} sentences")
    if isinstance(path_or_file, (str, os.PathLike)):
        output = open(path_or_file, "w", encoding="utf-8")
    else:
        output = nullcontext(path_or_file)
    with output as file:
        for i, sentence in enumerate(sentences):
            given = {name: values[i] for name, values in columns.items() if values is not None}
            file.write(conllu_text(sentence, _with_predictions(sentence, given) if given else None))


def conllu_text(sentence: Sentence, tokenlist: conllu.TokenList | None = None) -> str:
    """A sentence as CoNLL-U: its comment lines as read (or its metadata's, for a text line's),
    then ``tokenlist``'s lines (default its own), then a blank line."""
    tokens = sentence.tokenlist if tokenlist is None else tokenlist
    if sentence.comments is None:
        return tokens.serialize()
    return "".join(f"{line}\n" for line in sentence.comments) + conllu.TokenList(list(tokens)).serialize()


def _with_predictions(sentence: Sentence, columns: dict[str, Sequence]) -> conllu.TokenList:
    """A copy of the sentence's TokenList with the words' columns (``head``, ``deprel``,
    ``upos``) replaced by ``columns[name][word - 1]``."""
    for name, values in columns.items():
        if len(values) != len(sentence):
            raise ValueError(f"{sentence.source}: {len(values)} {name} predictions for {len(sentence)} words")
    tokens = []
    for token in sentence.tokenlist:
        token = conllu.Token(token)
        if isinstance(token["id"], int):
            for name, values in columns.items():
                value = values[token["id"] - 1]
                token[name] = int(value) if name == "head" else value
        tokens.append(token)
    return conllu.TokenList(tokens, sentence.tokenlist.metadata)
