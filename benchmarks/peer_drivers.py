"""What ``benchmarks.peers`` runs inside a peer's own environment, where neither torch nor
this project's dependencies are installed: the steps of UDPipe 1 and spaCy that their
command lines do not offer (UDPipe 1 on PyPI is a library without the ``udpipe`` binary;
``spacy`` parses raw text, not given words). Only the peer's library, the standard library,
``parser.data.sentences`` (which needs ``conllu``) and ``parser.data.tokenizer``'s reader are imported; run it from the
repository root as ``<peer>/bin/python -m benchmarks.peer_drivers COMMAND ...``.

    udpipe1-train TRAIN DEV MODEL [--tagger OPTIONS] [--parser OPTIONS]
    udpipe1-parse MODEL IN OUT
    spacy-parse MODEL IN OUT
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parser.data.tokenizer import UDPIPE_METHOD, udpipe_sentences


def udpipe1_train(train: Path, dev: Path, model: Path, tagger: str, parser: str) -> None:
    """UDPipe 1's ``udpipe --train --tokenizer=none --heldout=DEV`` through its library:
    no tokenizer (the input is tokenised), the tagger's and the parser's options as given
    (empty: the defaults, UDPipe's recipe), early stopping on ``dev``."""
    from ufal.udpipe import ProcessingError, Trainer

    error = ProcessingError()
    trained = Trainer.train(UDPIPE_METHOD, udpipe_sentences(train), udpipe_sentences(dev), Trainer.NONE,
                            tagger or Trainer.DEFAULT, parser or Trainer.DEFAULT, error)
    if error.occurred() or not trained:
        raise RuntimeError(f"UDPipe training failed: {error.message}")
    model.write_bytes(trained if isinstance(trained, bytes) else trained.encode("utf-8", "surrogateescape"))


def udpipe1_parse(model: Path, source: Path, target: Path) -> None:
    """Tag and parse a tokenised CoNLL-U file (its words kept), UDPipe's pipeline
    ``--input conllu --tag --parse``."""
    from ufal.udpipe import Model, Pipeline, ProcessingError

    loaded = Model.load(str(model))
    if loaded is None:
        raise RuntimeError(f"{model}: not a UDPipe model")
    error = ProcessingError()
    output = Pipeline(loaded, "conllu", Pipeline.DEFAULT, Pipeline.DEFAULT, "conllu").process(
        source.read_text(encoding="utf-8"), error)
    if error.occurred():
        raise RuntimeError(f"UDPipe parsing failed: {error.message}")
    target.write_text(output, encoding="utf-8")


def spacy_parse(model: Path, source: Path, target: Path) -> None:
    """Parse each sentence of ``source`` as a spaCy ``Doc`` of its gold words (no spaCy
    tokenizer), each word but the first marked as no sentence start so that spaCy's parser
    gives one tree (where it still leaves several, :func:`one_tree` joins them; the count goes
    to stderr); heads and relations written back into ``source``'s lines (``ROOT``, the
    label spaCy's converter gives the root, as UD's ``root``)."""
    import spacy
    from spacy.tokens import Doc

    from parser.data.sentences import read_conllu, write_conllu

    nlp = spacy.load(model)
    sentences = read_conllu(source, trees=False)
    docs = []
    for sentence in sentences:
        doc = Doc(nlp.vocab, words=sentence.words)
        for token in doc[1:]:
            token.is_sent_start = False
        docs.append(doc)
    heads, labels, forests = [], [], 0
    for doc in nlp.pipe(docs):
        tree, relations = one_tree([0 if token.head.i == token.i else token.head.i + 1 for token in doc],
                                   ["root" if token.dep_ == "ROOT" else token.dep_ or "dep" for token in doc])
        forests += tree != [0 if token.head.i == token.i else token.head.i + 1 for token in doc]
        heads.append(tree)
        labels.append(relations)
    write_conllu(sentences, target, heads=heads, deprels=labels)
    print(f"{forests} of {len(sentences)} sentences came out as several trees, joined under the first root",
          file=sys.stderr)


def one_tree(heads: list[int], labels: list[str]) -> tuple[list[int], list[str]]:
    """A parse with several roots (spaCy leaves a word it never attached as a root of its
    own, whatever the sentence boundaries say) as one tree: every root after the first
    attached to the first as ``dep``, UD's unspecified relation."""
    roots = [i for i, head in enumerate(heads) if head == 0]
    heads, labels = list(heads), list(labels)
    for i in roots[1:]:
        heads[i], labels[i] = roots[0] + 1, "dep"
    return heads, labels


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = cli.add_subparsers(dest="command", required=True)
    train = commands.add_parser("udpipe1-train")
    for name in ("train", "dev", "model"):
        train.add_argument(name, type=Path)
    train.add_argument("--tagger", default="", help="UDPipe tagger options (empty: its defaults)")
    train.add_argument("--parser", default="", help="UDPipe parser options (empty: its defaults)")
    for command in ("udpipe1-parse", "spacy-parse"):
        parse = commands.add_parser(command)
        for name in ("model", "source", "target"):
            parse.add_argument(name, type=Path)
    args = cli.parse_args(argv)
    if args.command == "udpipe1-train":
        udpipe1_train(args.train, args.dev, args.model, args.tagger, args.parser)
    elif args.command == "udpipe1-parse":
        udpipe1_parse(args.model, args.source, args.target)
    else:
        spacy_parse(args.model, args.source, args.target)


if __name__ == "__main__":
    main(sys.argv[1:])
