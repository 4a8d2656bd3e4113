"""benchmarks.tokenizer and raw_text: the test file's raw text, the official scorer's F1 and the report."""

import json
import shutil
from pathlib import Path

from benchmarks import raw_text as raw_text_benchmark
from benchmarks.common import official, raw_text
from benchmarks.tokenizer import official_f1, report

FIXTURE = Path(__file__).parent / "parser" / "fixtures" / "mwt_empty.conllu"


def test_raw_text_joins_a_paragraphs_sentences(tmp_path):
    """Sentences by a space, paragraphs (``# newpar``) by a blank line; no ``# newpar``: one paragraph."""
    text, gold = FIXTURE.read_text(encoding="utf-8"), tmp_path / "gold.conllu"
    paragraph = "Vamos al mercado. Sue likes coffee and Bill tea."
    gold.write_text(text + text, encoding="utf-8")
    assert raw_text(gold) == f"{paragraph}\n\n{paragraph}\n"
    gold.write_text((text + text).replace("# newpar\n", ""), encoding="utf-8")
    assert raw_text(gold) == f"{paragraph} {paragraph}\n"


def test_the_same_tokens_score_100_and_the_report_shows_the_row(tmp_path):
    system = tmp_path / "system.conllu"
    shutil.copy(FIXTURE, system)
    assert official_f1(FIXTURE, system) == {"tokens_f1": 100.0, "sentences_f1": 100.0, "words_f1": 100.0}
    results = tmp_path / "rows.jsonl"
    row = {"treebank": "UD_X", "train_sentences": 100, "epochs": 20, "tokens_f1": 99.5, "sentences_f1": 80.0,
           "words_f1": 98.25, "train_seconds": 12.5, "commit": "0123456789abcdef", "command": "python -m x"}
    results.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert report(results).splitlines()[-1] == "| UD_X | 100 | 20 | 99.50 | 80.00 | 98.25 | 12.5 | 0123456 |"


def test_raw_text_parses_score_by_the_official_scorer_and_the_report_keeps_each_systems_last_row(tmp_path):
    """benchmarks.raw_text: a parse with the gold words and trees scores 100 on every measure; a
    wrong head lowers UAS and LAS only; the report shows UDPipe 2's raw LAS for whole files."""
    from benchmarks.raw_text import SCORES, report

    system = tmp_path / "system.conllu"
    shutil.copy(FIXTURE, system)
    assert set(official(FIXTURE, system, SCORES).values()) == {100.0}
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    word = next(i for i, line in enumerate(lines) if line.split("\t")[0] == "2")
    columns = lines[word].split("\t")
    columns[6] = "3" if columns[6] != "3" else "1"
    lines[word] = "\t".join(columns)
    system.write_text("\n".join(lines) + "\n", encoding="utf-8")
    scores = official(FIXTURE, system, SCORES)
    assert scores["uas"] < 100 and scores["las"] < 100 and scores["tokens"] == scores["upos"] == 100
    row = {"treebank": "UD_Wolof-WTB", "train_sentences": 1188, "system": "treeexp", **dict.fromkeys(
        ("tokens", "sentences", "words", "upos", "uas", "las"), 90.0), "gold_tokens_las": 95.0, "commit": "abcdef0123"}
    older = {**row, "las": 10.0}
    table = report([older, row, {**row, "train_sentences": 100}]).splitlines()
    assert len(table) == 4  # header, rule, one row per (treebank, trees, system): the last
    assert table[2].startswith("| UD_Wolof-WTB | 100 | treeexp |") and table[2].endswith("| 95.00 |  | abcdef0 |")
    assert table[3].endswith("| 90.00 | 95.00 | 78.02 | abcdef0 |")


def test_gains_compare_the_final_stage_over_its_start_with_gold_and_learned_tokens(tmp_path):
    def output(name: str, start_las: float, final_las: float, start: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        rows = [{"stage": "base", "seed": None, "checkpoint": "base.ckpt", "test": {"las": 40.0}},
                {"stage": "finetuned", "seed": 1 if start == f"{name}/ft.ckpt" else None, "checkpoint": start,
                 "test": {"las": start_las}},
                {"stage": "student", "seed": 1, "checkpoint": f"{name}/st.ckpt", "test": {"las": final_las},
                 "command": f"python train.py fit --model.init {start} --model.teacher {start}", "commit": "c",
                 "cpu_minutes": 20.0}]
        (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return folder

    gold = raw_text_benchmark.gain_row("UD_X", output("gold", 50.0, 53.5, "gold/ft.ckpt"), "gold tokens")
    raw = raw_text_benchmark.gain_row("UD_X", output("raw", 50.0, 52.75, "gold/ft.ckpt"), "raw text")
    assert (gold["start"], gold["gain"], raw["start"], raw["gain"]) == ("finetuned", 3.5, "finetuned", 2.75)
    table = raw_text_benchmark.gains_report([gold, raw]).splitlines()
    assert table[2].split("|")[1:-1] == [" UD_X ", " 1 ", " 50.00 ", " 53.50 ", " +3.50 ", " 52.75 ", " +2.75 ", " -0.75 "]


def test_a_gain_is_the_final_parsers_over_its_start_of_the_same_seed_and_seeds_average(tmp_path):
    """benchmarks.raw_text gains: per seed the final run's test LAS over the run its --model.init
    names; the report adds each treebank's mean over seeds."""
    from benchmarks.raw_text import gain_row, gains_report

    def row(stage, seed, las, init=None):
        command = f"python train.py fit --model.init {init}" if init else "python train.py fit"
        return {"stage": stage, "seed": seed, "checkpoint": f"{stage}{seed}.ckpt", "test": {"las": las},
                "command": command, "commit": "abc", "cpu_minutes": 1.0}

    rows = {"gold": [row("finetuned", 1, 50.0), row("student", 1, 53.0, "finetuned1.ckpt"),
                     row("finetuned", 2, 51.0), row("student", 2, 52.0, "finetuned2.ckpt")],
            "raw": [row("student", 1, 52.0, "finetuned1.ckpt"), row("student", 2, 52.5, "finetuned2.ckpt")]}
    for name, lines in rows.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rows["raw"][:0] = [rows["gold"][0], rows["gold"][2]]  # the raw run's given start parsers
    (tmp_path / "raw" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows["raw"]))
    gains = [gain_row("UD_X", tmp_path / folder, unlabeled, seed) for seed in (1, 2)
             for folder, unlabeled in (("gold", "gold tokens"), ("raw", "raw text"))]
    assert [(g["seed"], g["start_test_las"], g["gain"]) for g in gains] == [(1, 50.0, 3.0), (1, 50.0, 2.0),
                                                                           (2, 51.0, 1.0), (2, 51.0, 1.5)]
    assert gain_row("UD_X", tmp_path / "gold", "gold tokens")["seed"] == 2  # no seed: the last run
    table = gains_report(gains).splitlines()
    assert table[-1].split(" | ")[1:] == ["mean of 2", "50.50 ± 0.71", "52.50 ± 0.71", "2.00 ± 1.41", "52.25 ± 0.35",
                                          "1.75 ± 0.35", "-0.25 ± 1.06 |"]
