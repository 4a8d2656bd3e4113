"""benchmarks.languages: the counts of its table come from the treebank's own files."""

from benchmarks import languages
from parser.data.sentences import read_conllu


def test_a_row_counts_the_unlabeled_rest_and_the_test_vocabulary(ud_dir):
    row = dict(zip(["treebank", "train", "train_words", "rest", "rest_words", "unseen_labeled", "unseen_train",
                    "nonprojective", "encoder", "subwords", "long", "unknown"], languages.row("UD_Wolof-WTB", ud_dir, 100)))
    train = read_conllu(ud_dir / "UD_Wolof-WTB/wo_wtb-ud-train.conllu")
    assert row["train"] == f"{len(train):,}" and row["rest"] == f"{len(train) - 100:,}"
    assert row["rest_words"] == f"{sum(len(s) for s in train[100:]):,}"
    assert float(row["unseen_train"].rstrip("%")) < float(row["unseen_labeled"].rstrip("%")) < 100
    assert row["encoder"] == "multilingual-e5-small" and float(row["subwords"]) >= 1
