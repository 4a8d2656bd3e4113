"""benchmarks.dev_split: a root where a target without a dev file has one, cut from its train file."""

import json

import pytest

from benchmarks import dev_split
from objectives.conventions import ConfigurationError


def sentence(k: int) -> str:
    return f"# sent_id = s{k}\n# text = w{k} . \n1-2\tw{k}.\t_\t_\t_\t_\t_\t_\t_\t_\n1\tw{k}\tw\tNOUN\t_\t_\t0\troot\t_\t_\n" \
           f"2\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n"


def test_the_last_trees_of_train_become_dev_byte_for_byte_and_every_other_treebank_is_linked(tmp_path):
    root, output = tmp_path / "ud", tmp_path / "split"
    (root / "UD_X-A").mkdir(parents=True)
    (root / "UD_Y-B").mkdir()
    train = "".join(sentence(k) for k in range(5))  # a comment's trailing space kept, a multiword token
    (root / "UD_X-A" / "x_a-ud-train.conllu").write_text(train, encoding="utf-8")
    (root / "UD_X-A" / "x_a-ud-test.conllu").write_text(sentence(9), encoding="utf-8")
    (root / "UD_Y-B" / "y_b-ud-train.conllu").write_text(sentence(7), encoding="utf-8")
    record = dev_split.split_root("UD_X-A", 2, root, output)
    target = output / "UD_X-A"
    assert record["train_trees"] == 3 and record["dev_trees"] == 2 and record["from"] == "UD_X-A/x_a-ud-train.conllu"
    assert (target / "x_a-ud-train.conllu").read_text() == "".join(sentence(k) for k in range(3))
    assert (target / "x_a-ud-dev.conllu").read_text() == sentence(3) + sentence(4)
    assert (target / "x_a-ud-test.conllu").is_symlink() and (output / "UD_Y-B").is_symlink()
    assert (output / "UD_Y-B" / "y_b-ud-train.conllu").read_text() == sentence(7)
    assert json.loads((output / dev_split.SPLIT).read_text()) == record
    assert (root / "UD_X-A" / "x_a-ud-train.conllu").read_text() == train  # the release untouched
    with pytest.raises(ConfigurationError, match="has a dev file"):
        dev_split.split_root("UD_X-A", 2, output, tmp_path / "again")
    with pytest.raises(ConfigurationError, match="has 5 trees"):
        dev_split.split_root("UD_X-A", 5, root, tmp_path / "too_many")
