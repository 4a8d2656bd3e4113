"""Word vectors learned from a language's raw text, for a parser to read beside its encoder.

    treeexp vectors TEXT [TEXT ...] --output wolof.vec [--tokenizer OUTPUT/tokenizer.udpipe] [--size 100]
    python train.py fit ... --model.encoder_options.word_vectors wolof.vec

Skip-gram word2vec (gensim's, ``pip install treeexp[vectors]``) over the text's words: one
tokenised sentence per line (``.txt``) or CoNLL-U, or untokenised text (paragraphs between blank
lines) read through a tokenizer file (``treeexp tokenizer train``, or a pipeline's). The output
is a word2vec text file, the format fastText's published vectors also have.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from pathlib import Path

from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.sentences import ConlluError
from parser.data.stream import Source


class Corpus:
    """The words of every sentence of ``files`` (through ``tokenizer`` where given), read again on
    each pass (gensim passes over a corpus several times; nothing is held in memory).
    ``malformed``: the sentences of the last pass that did not parse."""

    def __init__(self, files: Sequence[str | Path], tokenizer: str | Path | None = None):
        self.sources = [Source(str(f), tokenizer=str(tokenizer) if tokenizer else None) for f in files]
        self.malformed = 0

    def __iter__(self) -> Iterator[list[str]]:
        self.malformed = 0
        for source in self.sources:
            for sentence in source.sentences():
                if isinstance(sentence, ConlluError):
                    self.malformed += 1
                else:
                    yield sentence.words


def train_vectors(files: Sequence[str | Path], output: str | Path, tokenizer: str | Path | None = None,
                  size: int = 100, window: int = 5, min_count: int = 2, epochs: int = 10, seed: int = 1) -> Path:
    """Skip-gram vectors of ``size`` for the words seen at least ``min_count`` times, written to
    ``output`` (word2vec text format); one worker thread, so a seed gives the same file."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise ConfigurationError("word vectors need gensim: pip install treeexp[vectors]") from None
    corpus = Corpus(files, tokenizer)
    model = Word2Vec(vector_size=size, window=window, min_count=min_count, sg=1, seed=seed, workers=1)
    model.build_vocab(corpus)
    if not model.wv.index_to_key:
        raise ConfigurationError(f"no word occurs {min_count} times in {', '.join(map(str, files))}")
    model.train(corpus, total_examples=model.corpus_count, epochs=epochs)
    model.wv.save_word2vec_format(str(output))
    if corpus.malformed:
        print(f"{corpus.malformed} malformed sentences skipped (each pass)")
    return Path(output)


def main(argv: Sequence[str] | None = None) -> None:
    cli = argparse.ArgumentParser(prog="treeexp vectors", description=__doc__.split("\n\n")[0])
    cli.add_argument("text", nargs="+", help="the language's text: .txt (a tokenised sentence a line), CoNLL-U, or "
                                             "raw text with --tokenizer")
    cli.add_argument("--output", required=True, type=Path, help="the word2vec text file to write")
    cli.add_argument("--tokenizer", type=Path, help="a tokenizer file: the text is raw (paragraphs), split by it")
    cli.add_argument("--size", type=int, default=100, help="the vectors' size")
    cli.add_argument("--window", type=int, default=5)
    cli.add_argument("--min-count", type=int, default=2, help="the fewest occurrences of a word that gets a vector")
    cli.add_argument("--epochs", type=int, default=10)
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def run() -> None:
        for name in args.text:
            if not Path(name).is_file():
                raise FileNotFoundError(2, "no such text file", name)
        path = train_vectors(args.text, args.output, args.tokenizer, args.size, args.window, args.min_count,
                             args.epochs, args.seed)
        print(f"{sum(1 for _ in open(path, encoding='utf-8')) - 1} word vectors -> {path}")

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
