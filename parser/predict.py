"""Parse a CoNLL-U, tokenised or raw text file with a trained parser, as a stream.

    python -m parser.predict CKPT IN.conllu OUT.conllu [--batch-size 32] [--device cpu] [--precision bf16-mixed]
    python -m parser.predict CKPT - - < IN.conllu > OUT.conllu          # a stream, in bounded memory
    python -m parser.predict CKPT IN.conllu OUT.conllu --resume          # on from the last sentence written
    python -m parser.predict PARSER_DIR IN.txt OUT.conllu --input-format raw   # untokenised text
    python train.py predict --config CONFIG --ckpt_path CKPT --data.predict IN.conllu \
        --trainer.callbacks+=parser.predict.ConlluWriter --trainer.callbacks.output OUT.conllu

HEAD and DEPREL are filled in; every other column, comment, multiword-token line and
empty node of the input is written back unchanged, and no well-formed sentence is ever
dropped (a malformed one is named, FILE:LINE, on stderr and skipped).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from tqdm import tqdm

from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.sentences import ConlluError, Sentence, Skipped, is_text, open_output, write_conllu
from parser.data.stream import MAX_LOGGED, Source
from parser.decoding.decode import Decoding
from parser.model import Parser
from parser.training.checkpoint import check_checkpoint_path
from parser.training.precision import resolve_precision


class ConlluWriter(BasePredictionWriter):
    """Writes ``trainer.predict``'s parses of ``data.predict`` to ``output`` as CoNLL-U, in
    input order (with a tagger, UPOS filled where the input has ``_``). On several
    processes each parses its share; process 0 gathers them all and writes every sentence
    once."""

    def __init__(self, output: str):
        super().__init__(write_interval="epoch")
        self.output = output

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        parses = {index: parse for batch in predictions for index, parse in batch}
        if trainer.world_size > 1:
            shares = [None] * trainer.world_size if trainer.is_global_zero else None
            torch.distributed.gather_object(parses, shares, dst=0)
            parses = {index: parse for share in shares or [] for index, parse in share.items()}
        if trainer.is_global_zero:
            sentences = trainer.datamodule.predict_sentences
            ordered = [parses[i] for i in range(len(sentences))]
            upos = None if not ordered or ordered[0].tags is None else fill_upos(sentences, [p.tags for p in ordered])
            write_conllu(sentences, self.output, heads=[p.heads for p in ordered], deprels=[p.labels for p in ordered],
                         upos=upos)
        trainer.strategy.barrier("ConlluWriter")


def fill_upos(sentences, tags, overwrite: bool = False) -> list[list[str]]:
    """The UPOS column to write: the predicted ``tags`` where a sentence has ``_`` (every word with ``overwrite``)."""
    return [[tag if overwrite or given == "_" else given for given, tag in zip(s.upos, predicted)]
            for s, predicted in zip(sentences, tags)]


# Lightning's names of the precisions (``--trainer.precision``): the dtype the encoder runs in
# under autocast (None: float32 throughout); the scorer, the engine and the decoders stay in
# float32/float64 either way.
AUTOCAST = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


FORMATS = ("conllu", "text", "raw")  # how the input is read: CoNLL-U, one tokenised sentence per line, raw text
WINDOW = 2000  # sentences read, sorted by length for batching and written at a time


@dataclass
class Parsed:
    """What a parse did: ``sentences`` in the output (resumed ones included), ``parsed`` by
    this call in ``seconds`` (parsing and decoding), malformed ones ``skipped``."""

    sentences: int
    skipped: int
    seconds: float
    parsed: int

    @property
    def speed(self) -> float:
        """Sentences per second (parsing + decoding)."""
        return self.parsed / self.seconds if self.seconds else 0.0


def predict(checkpoint: str, source: str, target: str, batch_size: int = 32, device: str | None = None,
            overwrite_upos: bool = False, projective: bool | None = None,
            crossing_margin: float | None = None, precision: str = "32-true", treebank: str | None = None,
            input_format: str | None = None, window: int = WINDOW, resume: bool = False,
            progress: bool | None = None, tokenizer: str | None = None) -> Parsed:
    """Parse ``source`` into ``target`` as a stream (``-``: standard input or output), in
    input order, holding ``window`` sentences at a time.

    A parser with a tagger fills UPOS where the input has ``_`` (every word with
    ``overwrite_upos``); other columns are kept. ``projective``: decode the best projective
    (Eisner) or spanning tree; ``crossing_margin``: a spanning tree only where it beats the
    best projective one by that margin (both override the checkpoint's setting).
    ``precision``: ``bf16-mixed`` runs the encoder under bfloat16 autocast (faster where
    the processor has bf16 arithmetic: AVX512-BF16 or AMX CPUs, recent GPUs); ``auto``
    decides by the processor (:mod:`parser.training.precision`). ``treebank``: the
    input's treebank, for a parser with treebank vectors (default: the input file's folder,
    ``Sentence.treebank``; one the parser was not trained on reads as ``<other>``).
    ``input_format``: one of ``FORMATS`` (default: ``text`` for ``.txt``/``.txt.gz``,
    else CoNLL-U); ``raw``: untokenised text, paragraphs separated by blank lines, split and
    tokenised by ``tokenizer`` (default: the one saved in the parser's directory,
    :mod:`parser.data.tokenizer`) and written with its ``# newpar``, ``# sent_id``, ``# text``,
    multiword tokens and SpaceAfter.

    Windows are sorted by length inside for batching and written (and flushed) whole. A
    malformed sentence is named (file:line) on stderr and skipped, counted in
    ``Parsed.skipped``. ``resume``: keep the sentences ``target`` holds whole (a partly
    written last one is cut off), skip as many well-formed input sentences and append;
    the window the first new one falls in is parsed whole again, so the file is the one
    an uninterrupted parse with the same ``window`` writes, byte for byte. ``progress``: a bar on stderr
    (default: where stderr is a terminal). The checkpoint's kind, the output's folder and
    the input up to its first well-formed sentence are checked before the model loads.
    """
    Decoding(projective=bool(projective), crossing_margin=crossing_margin)  # a bad pair fails before loading
    check_checkpoint_path(checkpoint)
    if window < 1:
        raise ConfigurationError(f"window must be at least 1 sentence, not {window}")
    input_format = _input_format(source, input_format)
    if target == "-" and resume:
        raise ConfigurationError("--resume needs an output file, not standard output")
    if target != "-" and not Path(target).resolve().parent.is_dir():
        raise FileNotFoundError(2, "no such folder for the output", str(Path(target).parent))
    if input_format == "raw" and tokenizer is None and not Path(checkpoint).is_dir():
        raise ConfigurationError(f"{checkpoint}: raw text needs --tokenizer (only a saved parser's directory holds one)")
    skipped = Skipped(MAX_LOGGED)
    reader = Source(source, lines=input_format == "text",
                    tokenizer=(tokenizer or checkpoint) if input_format == "raw" else None)
    sentences = skipped.filter(reader.sentences())
    first = next(sentences, None)
    if first is None:
        raise ConlluError(f"{source}:1: no well-formed sentence to parse")
    done = complete_sentences(target) if resume and Path(target).exists() else 0

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    parser = Parser.load(checkpoint, map_location=device)
    if projective is not None or crossing_margin is not None:
        parser.decoding = dataclasses.replace(parser.decoding, projective=bool(projective), crossing_margin=crossing_margin)
    precision, line = resolve_precision(precision, torch.device(device).type)
    if line:
        print(line, file=sys.stderr)
    dtype = AUTOCAST[precision]

    show = sys.stderr.isatty() if progress is None else progress
    known = show and source != "-" and input_format != "raw"  # raw text's sentences are known once tokenised
    total = sum(1 for _ in reader.records()) if known else None
    written, seconds = 0, 0.0
    with open_output(target, append=done > 0) as output, \
            tqdm(total=total, initial=done - done % window, unit=" sentences", file=sys.stderr, disable=not show) as bar:
        for chunk in windows(itertools.chain([first], sentences), window):
            first_index, written = written, written + len(chunk)
            if written <= done:  # written before the parse was resumed
                continue
            start = time.perf_counter()
            with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
                parses = parser.parse([s.words for s in chunk], batch_size=batch_size,
                                      treebank=treebank or [s.treebank for s in chunk],
                                      progress=bar.update)
            seconds += time.perf_counter() - start
            new = slice(max(done - first_index, 0), None)  # the sentences of the window not yet in the file
            upos = None if parses[0].tags is None else fill_upos(chunk[new], [p.tags for p in parses[new]], overwrite_upos)
            write_conllu(chunk[new], output, heads=[p.heads for p in parses[new]],
                         deprels=[p.labels for p in parses[new]], upos=upos)
            output.flush()
    return Parsed(sentences=written, skipped=skipped.count, seconds=seconds, parsed=max(written - done, 0))


def _input_format(source: str, input_format: str | None) -> str:
    if input_format is None:
        return "text" if is_text(source) else "conllu"
    if input_format not in FORMATS:
        raise ConfigurationError(f"input format {input_format!r} is not one of {', '.join(FORMATS)}")
    return input_format


def windows(sentences: Iterator[Sentence], size: int) -> Iterator[list[Sentence]]:
    """``sentences`` in consecutive lists of ``size`` (the last shorter)."""
    while chunk := list(itertools.islice(sentences, size)):
        yield chunk


def complete_sentences(path: str | Path) -> int:
    """The number of sentences ``path`` (CoNLL-U) holds whole, each ended by a blank line;
    whatever follows the last of them (a sentence cut off by a kill) is truncated away."""
    count = offset = end = 0
    blank = True
    with open(path, "rb") as file:
        for line in file:
            offset += len(line)
            if line.strip():
                blank = False
            elif not blank:
                count, end, blank = count + 1, offset, True
    os.truncate(path, end)
    return count


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("checkpoint")
    cli.add_argument("input", help="CoNLL-U file, or .txt with one tokenised sentence per line; - for standard input")
    cli.add_argument("output", help="CoNLL-U file to write; - for standard output")
    cli.add_argument("--input-format", choices=FORMATS, default=None,
                     help="conllu; text: one tokenised sentence per line; raw: untokenised text, paragraphs "
                          "separated by blank lines (default: text for .txt, else conllu)")
    cli.add_argument("--tokenizer", default=None,
                     help="for raw text: a tokenizer file (default: tokenizer.udpipe in the parser's directory; "
                          "train one with treeexp tokenizer train)")
    cli.add_argument("--resume", action="store_true",
                     help="keep the sentences the output holds whole and parse on from there (appending)")
    cli.add_argument("--window", type=int, default=WINDOW,
                     help="sentences held, sorted by length for batching and written, at a time")
    cli.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="a progress bar on stderr (default: where stderr is a terminal)")
    cli.add_argument("--batch-size", type=int, default=32)
    cli.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    cli.add_argument("--overwrite-upos", action="store_true",
                     help="with a tagger, replace every UPOS (default: fill only the words whose UPOS is _)")
    cli.add_argument("--projective", action=argparse.BooleanOptionalAction, default=None,
                     help="decode the best projective tree (Eisner), or with --no-projective the best spanning "
                          "tree (default: as the checkpoint was trained)")
    cli.add_argument("--crossing-margin", type=float, default=None,
                     help="a sentence's best spanning tree only where it outscores its best projective tree by "
                          "more than this (choose it on dev: python -m parser.crossing_margin)")
    cli.add_argument("--precision", choices=[*AUTOCAST, "auto"], default="32-true",
                     help="bf16-mixed: the encoder under bfloat16 autocast, as --trainer.precision in training; "
                          "auto: bf16-mixed where the processor does bf16 arithmetic, else 32-true (said on stderr)")
    cli.add_argument("--treebank", default=None,
                     help="the input's treebank, for a parser with treebank vectors (default: the input's folder)")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    parsed = run_reporting_errors(lambda: predict(
        args.checkpoint, args.input, args.output, args.batch_size, args.device, args.overwrite_upos, args.projective,
        args.crossing_margin, args.precision, args.treebank, args.input_format, args.window, args.resume,
        args.progress, args.tokenizer))
    skipped = f"; {parsed.skipped} malformed sentences skipped" if parsed.skipped else ""
    print(f"parsed {args.input} -> {args.output} ({parsed.sentences} sentences, {parsed.speed:.1f} sentences/s{skipped})",
          file=sys.stderr if args.output == "-" else sys.stdout)


if __name__ == "__main__":
    main()
