"""Raw text to sentences of words: sentence splitting and tokenisation (multiword tokens,
SpaceAfter) learned from a labeled CoNLL-U file by UDPipe 1's trainable tokenizer
(``ufal.udpipe``, a GRU over characters), as UDPipe, Stanza and Trankit learn theirs.

    treeexp tokenizer train TRAIN.conllu PARSER_DIR [--sentences 100]   # PARSER_DIR/tokenizer.udpipe
    treeexp tokenizer run MODEL IN.txt OUT.conllu                        # raw text -> CoNLL-U, no trees

A saved parser's directory holds its tokenizer as ``tokenizer.udpipe``; ``treeexp parse
--input-format raw`` finds it there. Raw text: paragraphs separated by blank lines; the
lines of a paragraph are joined by the line ends between them (a line end is a space to
the tokenizer). Only ``ufal.udpipe``, ``conllu`` and this package's ``sentences`` are
imported at the top, no torch, so that ``benchmarks.peer_drivers`` reads CoNLL-U for UDPipe
with :func:`udpipe_sentences` in a peer's environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from parser.data.sentences import ConlluError, Record, decode, records

TOKENIZER_FILE = "tokenizer.udpipe"
UDPIPE_METHOD = "morphodita_parsito"  # UDPipe 1's one training method (here its tokenizer alone)
EPOCHS = 20  # UDPipe's default is 100; 20 take about 2 minutes of one thread (docs/results/tokenizer.jsonl)


def udpipe_sentences(path: str | os.PathLike, limit: int | None = None) -> list:
    """A CoNLL-U file (its first ``limit`` sentences) as UDPipe's own sentences, the form
    its trainer takes; ConlluError naming the file for what UDPipe cannot read."""
    from ufal.udpipe import InputFormat, ProcessingError, Sentence as UDPipeSentence, Sentences

    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = data.count(b"\n", 0, bad.start) + 1
        raise ConlluError(f"{path}:{line}: not UTF-8 text") from None
    reader, error = InputFormat.newConlluInputFormat(), ProcessingError()
    reader.setText(text)
    sentences, sentence = Sentences(), UDPipeSentence()
    while (limit is None or len(sentences) < limit) and reader.nextSentence(sentence, error):
        sentences.append(sentence)
        sentence = UDPipeSentence()
    if error.occurred():
        raise ConlluError(f"{path}: {error.message.strip()}")
    if not len(sentences):
        raise ConlluError(f"{path}:1: empty file, no sentences")
    return sentences


def train_tokenizer(train: str | os.PathLike, output: str | os.PathLike, sentences: int | None = None,
                    epochs: int = EPOCHS, heldout: str | os.PathLike | None = None, options: str = "") -> Path:
    """Train a tokenizer on ``train`` (its first ``sentences`` trees) and write it to
    ``output``: ``output/tokenizer.udpipe`` where ``output`` is a directory (a saved
    parser's), else that file. ``heldout``: a CoNLL-U file for early stopping (UDPipe keeps
    the epoch best on it); ``options``: more of UDPipe's tokenizer options
    (``dimension=64;dropout=0.1``). Returns the file written."""
    from ufal.udpipe import ProcessingError, Sentences, Trainer

    from objectives.conventions import ConfigurationError

    target = Path(output) / TOKENIZER_FILE if Path(output).is_dir() else Path(output)
    if not target.resolve().parent.is_dir():
        raise FileNotFoundError(2, "no such folder for the tokenizer", str(target.parent))
    if epochs < 1:
        raise ConfigurationError(f"epochs must be at least 1, not {epochs}")
    settings = ";".join(filter(None, ["tokenize_url=0", f"epochs={epochs}",
                                      "early_stopping=1" if heldout else "", options]))
    held = udpipe_sentences(heldout) if heldout else Sentences()
    error = ProcessingError()
    trained = Trainer.train(UDPIPE_METHOD, udpipe_sentences(train, sentences), held, settings, "none", "none", error)
    if error.occurred() or not trained:
        raise ConfigurationError(f"UDPipe could not train a tokenizer with {settings!r}: {error.message.strip()}")
    target.write_bytes(trained if isinstance(trained, bytes) else trained.encode("utf-8", "surrogateescape"))
    return target


def tokenizer_file(location: str | os.PathLike) -> str:
    """The tokenizer at ``location``: that file, or ``tokenizer.udpipe`` in a saved parser's directory."""
    from objectives.conventions import ConfigurationError

    path = Path(location)
    if path.is_dir():
        path = path / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigurationError(f"{location}: no {TOKENIZER_FILE} beside the parser; train one with "
                                     f"`treeexp tokenizer train TRAIN.conllu {location}` or give --tokenizer")
    elif not path.is_file():
        raise FileNotFoundError(2, "no such tokenizer (train one: treeexp tokenizer train)", str(path))
    return str(path)


class Tokenizer:
    """A trained tokenizer (:func:`train_tokenizer`'s file) that turns raw text into
    sentences as UDPipe writes them in CoNLL-U: ``# newdoc`` (first), ``# newpar``,
    ``# sent_id``, ``# text``, multiword-token lines and SpaceAfter/SpacesAfter in MISC; HEAD
    and the other columns ``_``. ``parser.data.stream.Source`` reads a raw file through it."""

    def __init__(self, path: str | os.PathLike):
        from ufal.udpipe import Model

        from objectives.conventions import ConfigurationError

        self.path = tokenizer_file(path)
        self.model = Model.load(self.path)
        if self.model is None:
            raise ConfigurationError(f"{path}: not a UDPipe tokenizer (train one: treeexp tokenizer train)")

    def records(self, source: str | os.PathLike) -> Iterator[Record | ConlluError]:
        """The raw text file's sentences as CoNLL-U Records, read and tokenised lazily
        (``-``: standard input); a line that is not UTF-8 as its ConlluError in its place (the
        rest of its paragraph is kept). A sentence's ``line`` is its paragraph's first line."""
        from ufal.udpipe import OutputFormat, ProcessingError, Sentence as UDPipeSentence

        tokenizer, writer, error = self.model.newTokenizer(self.model.DEFAULT), OutputFormat.newOutputFormat("conllu"), \
            ProcessingError()
        for start, lines in _paragraphs(source):
            tokenizer.setText("\n".join(line for line in lines if not isinstance(line, ConlluError)))
            yield from (line for line in lines if isinstance(line, ConlluError))
            sentence, first = UDPipeSentence(), True
            while tokenizer.nextSentence(sentence, error):
                block = writer.writeSentence(sentence).rstrip("\n").split("\n")
                if first and "# newpar" not in block:  # each setText is one paragraph: UDPipe marks only the first
                    block.insert(block[0] == "# newdoc", "# newpar")
                yield Record(start, [line.encode("utf-8") for line in block])
                sentence, first = UDPipeSentence(), False
            if error.occurred():
                yield ConlluError(f"{source}:{start}: UDPipe could not tokenise the paragraph ({error.message.strip()})")


def _paragraphs(source: str | os.PathLike) -> Iterator[tuple[int, list[str | ConlluError]]]:
    """(first line number, lines) of each paragraph of a raw text file (blank lines between);
    a line that is not UTF-8 as its ConlluError."""
    start, lines = 0, []
    for record in records(source, text=True):
        if record.new_paragraph and lines:
            yield start, lines
            lines = []
        if not lines:
            start = record.line
        try:
            lines.extend(decode(source, record))
        except ConlluError as error:
            lines.append(error)
    if lines:
        yield start, lines


def main(argv: list[str] | None = None) -> None:
    from parser.cli import run_reporting_errors
    from parser.data.sentences import Skipped, open_output, write_conllu
    from parser.data.stream import MAX_LOGGED, Source

    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = cli.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="learn sentence splitting and tokenisation from a CoNLL-U file")
    train.add_argument("train", help="labeled CoNLL-U (its words, SpaceAfter, multiword tokens, sentences)")
    train.add_argument("output", help=f"a saved parser's directory (writes {TOKENIZER_FILE} in it) or a file")
    train.add_argument("--sentences", type=int, default=None, help="learn from the first N sentences only")
    train.add_argument("--epochs", type=int, default=EPOCHS)
    train.add_argument("--heldout", default=None, help="CoNLL-U for early stopping (the best epoch on it is kept)")
    train.add_argument("--options", default="", help="more of UDPipe's tokenizer options, e.g. dimension=64")
    run = commands.add_parser("run", help="tokenise raw text (paragraphs separated by blank lines) into CoNLL-U")
    run.add_argument("model", help=f"a tokenizer file, or a saved parser's directory with {TOKENIZER_FILE}")
    run.add_argument("input", help="raw text; - for standard input")
    run.add_argument("output", help="CoNLL-U to write; - for standard output")
    for command in (train, run):
        command.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    if args.command == "train":
        written = run_reporting_errors(lambda: train_tokenizer(args.train, args.output, args.sentences, args.epochs,
                                                               args.heldout, args.options))
        print(f"tokenizer of {args.train} -> {written}")
        return

    def tokenise() -> int:
        skipped = Skipped(MAX_LOGGED)
        with open_output(args.output) as output:
            for sentence in skipped.filter(Source(args.input, tokenizer=args.model).sentences()):
                write_conllu([sentence], output)
        return skipped.count

    skipped = run_reporting_errors(tokenise)
    if skipped:
        print(f"{skipped} malformed lines skipped", file=sys.stderr)
