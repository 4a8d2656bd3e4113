"""``treeexp nearness``: treebanks ranked for a target from its K trees and raw text."""

import json

import numpy as np
import pytest

from parser import nearness
from parser.data.sentences import read_conllu

UYGHUR = "UD_Uyghur-UDT/ug_udt-ud-train.conllu"


@pytest.fixture(scope="module")
def uyghur(ud_dir):
    sentences = read_conllu(ud_dir / UYGHUR)
    return sentences[:100], sentences[100:]


def profile(ud_dir, name, tokenizer=None):
    sentences = list(nearness.sample(nearness.candidate_files(name, ud_dir), nearness.CANDIDATE_WORDS))
    built = nearness.tree_profile(sentences)
    if tokenizer:
        built.tokens = tokenizer.count(sentences)
    return built


def test_each_measure_is_nearest_for_a_treebank_against_itself(uyghur):
    trees, _ = uyghur
    words = nearness.Tokenizer("words")
    mine = nearness.tree_profile(trees)
    mine.tokens = words.count(trees)
    assert nearness.upos_ngrams(mine, mine) == pytest.approx(0, abs=1e-12)
    assert nearness.head_direction(mine, mine) == 0
    assert nearness.subword_overlap(mine, mine) == 1


def test_distances_are_symmetric_and_the_overlap_is_a_coverage(ud_dir, uyghur):
    words = nearness.Tokenizer("words")
    kazakh, turkish = profile(ud_dir, "UD_Kazakh-KTB", words), profile(ud_dir, "Turkish", words)
    for measure in (nearness.upos_ngrams, nearness.head_direction):
        assert measure(kazakh, turkish) == pytest.approx(measure(turkish, kazakh), abs=1e-12)
        assert 0 < measure(kazakh, turkish) < 1
    assert 0 < nearness.subword_overlap(kazakh, turkish) < 1


def test_turkic_treebanks_have_heads_on_the_side_uyghur_has(ud_dir, uyghur):
    """Uyghur's first 100 train trees: Kazakh, Turkish and Tatar (Turkic, head-final) are nearer
    by head direction than Italian (Romance, head-initial), by a wide margin."""
    mine = nearness.tree_profile(uyghur[0])
    italian = nearness.head_direction(mine, profile(ud_dir, "Italian-ParTUT"))
    turkic = {name: nearness.head_direction(mine, profile(ud_dir, name)) for name in ("Kazakh", "Turkish-IMST", "Tatar")}
    assert max(turkic.values()) < italian / 2, (turkic, italian)


def test_e5_pieces_of_a_text_all_occur_in_itself(uyghur):
    trees, _ = uyghur
    pieces = nearness.Tokenizer("e5")
    mine = nearness.Profile(tokens=pieces.count(trees))
    assert len(mine.tokens) > 100 and nearness.subword_overlap(mine, mine) == 1


def test_mean_ranks_share_ties_and_turn_similarities_around():
    values = np.array([[0.1, 0.9], [0.2, 0.5], [0.2, 0.1]])  # a distance, then a similarity
    assert nearness.mean_ranks(values, [False, True]).tolist() == [1.0, 2.25, 2.75]


def test_a_candidates_files_come_train_dev_test_and_a_language_names_its_treebanks(ud_dir):
    assert [f.name for f in nearness.candidate_files("Kazakh", ud_dir)] == ["kk_ktb-ud-train.conllu", "kk_ktb-ud-test.conllu"]
    assert [f.name for f in nearness.candidate_files("UD_Welsh-CCG", ud_dir)] == [
        "cy_ccg-ud-train.conllu", "cy_ccg-ud-dev.conllu", "cy_ccg-ud-test.conllu"]
    assert {f.parent.name for f in nearness.candidate_files("Indonesian", ud_dir)} == {"UD_Indonesian-CSUI", "UD_Indonesian-GSD"}


def test_the_command_prints_a_ranked_table_and_json(ud_dir, capsys):
    arguments = ["--target", str(ud_dir / UYGHUR), "--trees", "100", "--root", str(ud_dir), "--tokens", "words",
                 "--candidates", "Italian-ParTUT", "Kazakh", "UD_Uyghur-UDT"]
    nearness.main(arguments)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["rank", "treebank", *nearness.MEASURES, "mean", "rank"]
    assert [line.split()[1] for line in lines[1:]] == ["Kazakh", "Italian-ParTUT"]  # the target itself is no candidate
    nearness.main([*arguments, "--json", "--measure", "head_direction"])
    rows = json.loads(capsys.readouterr().out)
    assert [(r["treebank"], r["rank"], r["mean_rank"]) for r in rows] == [("Kazakh", 1, 1.0), ("Italian-ParTUT", 2, 2.0)]
    assert rows[0]["files"] == [str(ud_dir / "UD_Kazakh-KTB" / name) for name in ("kk_ktb-ud-train.conllu", "kk_ktb-ud-test.conllu")]
    assert rows[0]["words"] >= nearness.CANDIDATE_WORDS and set(rows[0]) >= {"head_direction"}
    nearness.main([*arguments, "--json", "--trees", "0"])  # no tree: the file is raw text, ranked by its words
    rows = json.loads(capsys.readouterr().out)
    assert {r["treebank"] for r in rows} == {"Kazakh", "Italian-ParTUT"} and all(
        set(nearness.MEASURES) & set(r) == {"subword_overlap"} for r in rows)


def test_the_targets_own_folder_is_left_out_with_its_linked_files(ud_dir, tmp_path):
    """A root where the target's train file is its own and its test file a link to the release (as
    ``benchmarks.dev_split`` makes it): no file of its folder is a candidate, linked or not."""
    root = tmp_path / "ud"
    (root / "UD_Uyghur-UDT").mkdir(parents=True)
    train = root / "UD_Uyghur-UDT" / "ug_udt-ud-train.conllu"
    train.write_text((ud_dir / UYGHUR).read_text(encoding="utf-8"), encoding="utf-8")
    (root / "UD_Uyghur-UDT" / "ug_udt-ud-test.conllu").symlink_to(ud_dir / "UD_Uyghur-UDT" / "ug_udt-ud-test.conllu")
    (root / "UD_Kazakh-KTB").symlink_to(ud_dir / "UD_Kazakh-KTB", target_is_directory=True)
    ranked = nearness.rank_target(train, 100, None, root, measures=["head_direction"])
    assert [r.treebank for r in ranked] == ["UD_Kazakh-KTB"]


@pytest.mark.parametrize("arguments, says", [
    (["--candidates", "Klingon"], "no treebank 'Klingon'"),
    (["--candidates", "Kazakh", "--trees", "-1"], "--trees must be at least 0"),
    (["--candidates", "Kazakh", "--trees", "0", "--measure", "upos_ngrams"], "upos_ngrams counts trees"),
    (["--candidates", "Kazakh", "--candidate-words", "0"], "--candidate-words must be at least 1"),
    (["--candidates", "Kazakh", "--trees", "100000"], "subword_overlap needs raw text"),
])
def test_errors_are_one_line(ud_dir, capsys, arguments, says):
    with pytest.raises(SystemExit) as exit:
        nearness.main(["--target", str(ud_dir / UYGHUR), "--root", str(ud_dir), "--tokens", "words", *arguments])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and error.startswith("error: ") and says in error and error.count("\n") == 1


def test_a_missing_target_is_one_line(ud_dir, capsys):
    with pytest.raises(SystemExit) as exit:
        nearness.main(["--target", str(ud_dir / "missing.conllu"), "--root", str(ud_dir), "--candidates", "Kazakh"])
    assert exit.value.code == 2 and "missing.conllu" in capsys.readouterr().err
