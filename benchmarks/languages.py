"""What differs between the low-resource treebanks, before any training: how much unlabeled
text the 100-sentence setting leaves, and how the encoder's tokenizer sees each language.

    python -m benchmarks.languages [--labeled 100] [--treebanks UD_English-EWT UD_Wolof-WTB ...]

Per treebank (train/dev/test as in ``--data.treebank``; syntactic words): the sentences and
words of train, those left unlabeled after the first ``--labeled`` (the unlabeled text of
``--data.labeled_size``), the share of test word types (lower-cased) never seen in the
labeled sentences and never seen anywhere in train (what the unlabeled text adds), the
share of non-projective test trees, and the encoder's tokenizer on the test words (the
encoder of the recipe: MiniLM for English, multilingual-e5-small otherwise): subwords per
word, the share of words cut into 3 or more pieces and the share of unknown subwords.
Every sentence is read by the project's reader; nothing is trained.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers import AutoTokenizer

from benchmarks.common import add_root_option, markdown_table
from parser.data.datamodule import treebank_file
from parser.evaluate import nonprojective_arcs
from parser.network.pretrained import resolve_model_path
from parser.data.sentences import read_conllu

TREEBANKS = ("UD_English-EWT", "UD_Wolof-WTB", "UD_Greek-GDT", "UD_Uyghur-UDT", "UD_Vietnamese-VTB")


def encoder_of(treebank: str) -> str:
    """The encoder of the low-resource recipes for a treebank."""
    return "all-MiniLM-L6-v2" if treebank.startswith("UD_English") else "multilingual-e5-small"


def row(treebank: str, root: Path, labeled: int) -> list[str]:
    train = treebank_file(treebank, "train", root)
    train_sentences, test_sentences = read_conllu(train), read_conllu(treebank_file(treebank, "test", root))
    rest = train_sentences[labeled:]
    labeled_types = {w.lower() for s in train_sentences[:labeled] for w in s.words}
    train_types = {w.lower() for s in train_sentences for w in s.words}
    test_types = {w.lower() for s in test_sentences for w in s.words}
    nonprojective = sum(any(nonprojective_arcs(s.heads)) for s in test_sentences) / len(test_sentences)

    encoder = encoder_of(treebank)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(encoder))
    words = [w for s in test_sentences for w in s.words]
    pieces = tokenizer(words, add_special_tokens=False)["input_ids"]
    unknown = tokenizer.unk_token_id
    subwords = sum(len(p) for p in pieces)
    return [
        treebank.removeprefix("UD_"),
        f"{len(train_sentences):,}",
        f"{sum(len(s) for s in train_sentences):,}",
        f"{len(rest):,}",
        f"{sum(len(s) for s in rest):,}",
        f"{100 * len(test_types - labeled_types) / len(test_types):.1f}%",
        f"{100 * len(test_types - train_types) / len(test_types):.1f}%",
        f"{100 * nonprojective:.1f}%",
        encoder,
        f"{subwords / len(words):.2f}",
        f"{100 * sum(len(p) >= 3 for p in pieces) / len(words):.1f}%",
        f"{100 * sum(i == unknown for p in pieces for i in p) / subwords:.2f}%",
    ]


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--labeled", type=int, default=100, help="labeled sentences (the rest of train is unlabeled)")
    cli.add_argument("--treebanks", nargs="+", default=list(TREEBANKS))
    add_root_option(cli)
    args = cli.parse_args()
    header = ["treebank", "train sentences", "train words", f"unlabeled sentences (after {args.labeled})",
              "unlabeled words", f"test types unseen in {args.labeled} labeled", "test types unseen in train",
              "non-projective test trees", "encoder", "subwords per word", "words in 3+ subwords", "unknown subwords"]
    print(markdown_table(header, [row(t, args.root, args.labeled) for t in args.treebanks]))


if __name__ == "__main__":
    main()
