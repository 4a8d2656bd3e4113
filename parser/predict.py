"""Parse a CoNLL-U (or one-sentence-per-line text) file with a trained checkpoint.

    python -m parser.predict CKPT IN.conllu OUT.conllu [--batch-size 32] [--device cpu] [--precision bf16-mixed]
    python train.py predict --config CONFIG --ckpt_path CKPT --data.predict IN.conllu \
        --trainer.callbacks+=parser.predict.ConlluWriter --trainer.callbacks.output OUT.conllu

HEAD and DEPREL are filled in; every other column, comment, multiword-token line and
empty node of the input is written back unchanged, and no sentence is ever dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from parser.cli import run_reporting_errors
from parser.data.sentences import read_sentences, write_conllu
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


def predict(checkpoint: str, source: str, target: str, batch_size: int = 32, device: str | None = None,
            overwrite_upos: bool = False, projective: bool | None = None,
            crossing_margin: float | None = None, precision: str = "32-true", treebank: str | None = None) -> float:
    """Parse ``source`` into ``target``; returns sentences per second (parsing + decoding).

    A parser with a tagger fills UPOS where the input has ``_`` (every word with
    ``overwrite_upos``); other columns are kept. ``projective``: decode the best projective
    (Eisner) or spanning tree; ``crossing_margin``: a spanning tree only where it beats the
    best projective one by that margin (both override the checkpoint's setting).
    ``precision``: ``bf16-mixed`` runs the encoder under bfloat16 autocast (faster where
    the processor has bf16 arithmetic: AVX512-BF16 or AMX CPUs, recent GPUs); ``auto``
    decides by the processor (:mod:`parser.training.precision`). The
    checkpoint's kind, the whole input and the output's folder are checked before the
    model loads, so bad input fails in a moment, not after loading. ``treebank``: the
    input's treebank, for a parser with treebank vectors (default: the input file's folder,
    ``Sentence.treebank``; one the parser was not trained on reads as ``<other>``)."""
    Decoding(projective=bool(projective), crossing_margin=crossing_margin)  # a bad pair fails before loading
    check_checkpoint_path(checkpoint)
    sentences = read_sentences(source)
    if not Path(target).resolve().parent.is_dir():
        raise FileNotFoundError(2, "no such folder for the output", str(Path(target).parent))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    parser = Parser.load(checkpoint, map_location=device)
    if projective is not None or crossing_margin is not None:
        parser.decoding = dataclasses.replace(parser.decoding, projective=bool(projective), crossing_margin=crossing_margin)
    precision, line = resolve_precision(precision, torch.device(device).type)
    if line:
        print(line, file=sys.stderr)
    dtype = AUTOCAST[precision]
    start = time.perf_counter()
    with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
        parses = parser.parse([s.words for s in sentences], batch_size=batch_size,
                              treebank=treebank or [s.treebank for s in sentences])
    speed = len(sentences) / (time.perf_counter() - start)
    upos = None
    if parses and parses[0].tags is not None:
        upos = fill_upos(sentences, [p.tags for p in parses], overwrite_upos)
    write_conllu(sentences, target, heads=[p.heads for p in parses], deprels=[p.labels for p in parses], upos=upos)
    return speed


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("checkpoint")
    cli.add_argument("input", help="CoNLL-U file, or .txt with one tokenised sentence per line")
    cli.add_argument("output", help="CoNLL-U file to write")
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
    speed = run_reporting_errors(lambda: predict(args.checkpoint, args.input, args.output, args.batch_size,
                                                 args.device, args.overwrite_upos, args.projective,
                                                 args.crossing_margin, args.precision, args.treebank))
    print(f"parsed {args.input} -> {args.output} ({speed:.1f} sentences/s)")


if __name__ == "__main__":
    main()
