"""benchmarks.gains: each test word's group and the LAS of each group, on a toy treebank."""

import json

import pytest

from benchmarks import gains
from parser.data.sentences import read_conllu


def conllu(*sentences: list[tuple[str, int, str]]) -> str:
    """CoNLL-U text of sentences given as (form, head, deprel) per word."""
    return "".join("".join(f"{i}\t{form}\t_\tX\t_\t_\t{head}\t{deprel}\t_\t_\n" for i, (form, head, deprel)
                           in enumerate(words, 1)) + "\n" for words in sentences)


GOLD = [("A", 0, "root"), ("c", 1, "obj"), ("z", 1, "nmod:poss")]


@pytest.fixture
def treebank(tmp_path):
    """UD_Toy: train 'a b' (the labeled sentence) and 'c d'; test 'A c z', one word of each group."""
    folder = tmp_path / "UD_Toy"
    folder.mkdir()
    (folder / "toy-ud-train.conllu").write_text(conllu([("a", 0, "root"), ("b", 1, "obj")],
                                                       [("c", 0, "root"), ("d", 1, "obj")]))
    (folder / "toy-ud-test.conllu").write_text(conllu(GOLD))
    baseline = tmp_path / "baseline.conllu"  # 'c' on the wrong head; 'z' right on its universal relation
    baseline.write_text(conllu([("A", 0, "root"), ("c", 3, "obj"), ("z", 1, "nmod")]))
    run = tmp_path / "run.conllu"  # every word right
    run.write_text(conllu(GOLD))
    return tmp_path, baseline, run


def test_the_groups_follow_the_labeled_sentences_the_rest_of_train_and_neither(treebank):
    root, _, _ = treebank
    train, test = read_conllu(root / "UD_Toy/toy-ud-train.conllu"), read_conllu(root / "UD_Toy/toy-ud-test.conllu")
    assert gains.word_groups(train, 1, test) == [0, 1, 2]  # 'A' is 'a' lower-cased
    assert gains.word_groups(train, 2, test) == [0, 0, 2]


def test_each_group_has_its_las_and_the_points_sum_to_the_whole_difference(treebank):
    root, baseline, run = treebank
    gold = root / "UD_Toy/toy-ud-test.conllu"
    assert gains.attachments(gold, [str(baseline)]) == [1.0, 0.0, 1.0]
    assert gains.attachments(gold, [str(baseline), str(run)]) == [1.0, 0.5, 1.0]  # several files: their mean
    compared = gains.compare([0, 1, 2], gains.attachments(gold, [str(baseline)]), gains.attachments(gold, [str(run)]),
                             reference=gains.attachments(gold, [str(run)]))
    unlabeled = compared["only in the unlabeled text"]
    assert (unlabeled.words, unlabeled.baseline, unlabeled.run) == (1, 0.0, 100.0)
    assert unlabeled.points == pytest.approx(100 / 3) and unlabeled.gap_closed == pytest.approx(100)
    assert compared["in the labeled sentences"].gap_closed is None  # baseline already at the reference
    assert sum(compared[g].points for g in gains.GROUPS) == pytest.approx(compared["all"].points)
    assert compared["all"].run - compared["all"].baseline == pytest.approx(100 / 3)


def test_the_command_prints_each_run_and_records_its_row(treebank, capsys):
    root, baseline, run = treebank
    results = root / "gains.jsonl"
    gains.main(["--treebank", "UD_Toy", "--data-root", str(root), "--labeled", "1", "--baseline", str(baseline),
                "--run", "student", f"{run},{baseline}", "--results", str(results)])
    assert "| only in the unlabeled text | 1 | 33.3% | 0.00 | 50.00 | +50.00 | +16.67 | 100% |" in capsys.readouterr().out
    row = json.loads(results.read_text())
    assert row["run"] == "student" and row["groups"]["all"]["run"] == pytest.approx(83.3333, abs=1e-4)
    assert "benchmarks.gains" in row["command"] and row["commit"]
