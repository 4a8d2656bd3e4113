from pathlib import Path

import pytest

from parser.evaluate import Validity, crossings, evaluate, main, nonprojective_arcs, scores, validity
from parser.data.sentences import read_conllu

MWT = Path(__file__).parent / "fixtures" / "mwt_empty.conllu"

WORDS = ["She", "saw", "the", "cat", "quickly", "."]
GOLD = [(2, "nsubj"), (0, "root"), (4, "det"), (2, "obj"), (2, "advmod"), (2, "punct")]
# Word by word: subtype only (right for LAS), right, label wrong (det -> amod, now a
# content word), head wrong, label wrong (advmod -> mark, no longer content), label wrong
# (punct -> discourse, now content).
PRED = [(2, "nsubj:pass"), (0, "root"), (4, "amod"), (5, "obj"), (2, "mark"), (2, "discourse")]


def write(path, arcs, words=WORDS):
    lines = [f"{i}\t{word}\t_\t_\t_\t_\t{head}\t{deprel}\t_\t_"
             for i, (word, (head, deprel)) in enumerate(zip(words, arcs, strict=True), 1)]
    path.write_text("# sent_id = 1\n" + "\n".join(lines) + "\n\n", encoding="utf-8")
    return path


def test_identical_files_score_100():
    assert evaluate(MWT, MWT) == {"upos": 100.0, "uas": 100.0, "las": 100.0, "clas": 100.0}


def test_hand_computed_scores(tmp_path):
    gold, pred = write(tmp_path / "gold.conllu", GOLD), write(tmp_path / "pred.conllu", PRED)
    result = scores(gold, pred)
    # heads right: 1 2 3 5 6; heads and universal labels right: 1 2
    assert (result["uas"].correct, result["las"].correct) == (5, 2)
    assert evaluate(gold, pred)["uas"] == pytest.approx(500 / 6)
    assert evaluate(gold, pred)["las"] == pytest.approx(200 / 6)
    # content words: gold 1 2 4 5, system 1 2 3 4 6; correct 1 2
    clas = result["clas"]
    assert (clas.correct, clas.gold, clas.system) == (2, 4, 5)
    assert clas.precision == pytest.approx(40.0)
    assert clas.recall == pytest.approx(50.0)
    assert clas.f1 == pytest.approx(400 / 9)


def test_different_words_name_file_and_line(tmp_path):
    gold = write(tmp_path / "gold.conllu", GOLD)
    pred = write(tmp_path / "pred.conllu", GOLD, words=["She", "saw", "a", "cat", "quickly", "."])
    with pytest.raises(ValueError, match=f"{pred}:1: the text reads 'Shesawacatquickl' where {gold}:1 reads 'Shesawthecatquic'"):
        evaluate(gold, pred)  # another tokenisation of the same text would have been aligned


def test_cli_prints_a_table(tmp_path, capsys):
    main([str(write(tmp_path / "g.conllu", GOLD)), str(write(tmp_path / "p.conllu", PRED))])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("|")[0].strip() == "Metric"
    assert lines[-1].split() == ["CLAS", "|", "40.00", "|", "50.00", "|", "44.44"]


def _crossing(heads: list[int]) -> bool:
    """Brute force: two arcs whose spans (root arc included) cross strictly."""
    spans = [tuple(sorted((h, m))) for m, h in enumerate(heads, 1)]
    return any(a < c < b < d for a, b in spans for c, d in spans)


def test_nonprojective_arcs_agree_with_crossing_spans(ud_dir):
    """Trees with a non-projective arc are exactly the trees with crossing arcs; EWT dev and
    test have 31 and 26 of them (shared/data/ud/MANIFEST.md)."""
    assert nonprojective_arcs([0, 4, 1, 1]) == [False, True, False, False]  # 1 <- 3 over 2, whose head is 4
    assert not any(nonprojective_arcs([2, 0, 2]))
    for split, expected in (("dev", 31), ("test", 26)):
        trees = read_conllu(next((ud_dir / "UD_English-EWT").glob(f"*-ud-{split}.conllu")))
        flagged = [any(nonprojective_arcs(s.heads)) for s in trees]
        assert flagged == [_crossing(s.heads) for s in trees]
        assert sum(flagged) == expected


def test_crossings_report(tmp_path):
    gold = tmp_path / "gold.conllu"
    gold.write_text("".join(
        f"{i}\tw{i}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_\n" for i, h in enumerate([0, 4, 1, 1], 1)) + "\n")
    pred = tmp_path / "pred.conllu"
    pred.write_text("".join(
        f"{i}\tw{i}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_\n" for i, h in enumerate([0, 1, 1, 1], 1)) + "\n")
    report = crossings(gold, pred)
    assert (report.sentences, report.gold_trees, report.predicted_trees) == (1, 1, 0)
    assert (report.gold_arcs, report.predicted_arcs, report.gold_arcs_found) == (1, 0, 0)


def test_validity_counts_what_ud_rejects(tmp_path, capsys):
    """HEAD 0 with another DEPREL and root elsewhere, two roots, a cycle: counted, not refused."""
    path = tmp_path / "pred.conllu"
    sentences = [[(2, "nsubj"), (0, "root"), (2, "obj")],  # valid
                 [(2, "nsubj"), (0, "nsubj"), (2, "root")],  # 2 words against the root rule
                 [(0, "root"), (0, "root"), (2, "obj")],  # two roots
                 [(3, "nsubj"), (0, "root"), (1, "obj")]]  # 1 -> 3 -> 1
    path.write_text("".join(write(tmp_path / "one.conllu", arcs, ["a", "b", "c"]).read_text() for arcs in sentences))
    assert validity(path) == Validity(sentences=4, root_labels=2, roots=1, cycles=1)
    with pytest.raises(SystemExit):  # the scores need trees; the counts come first
        main([str(path), str(path), "--validate"])
    assert "2 words with HEAD 0 but not DEPREL root or the reverse" in capsys.readouterr().out
