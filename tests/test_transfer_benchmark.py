"""benchmarks.transfer: a row per run of a transfer pipeline's own rows, and the table."""

import json
import sys

from benchmarks import recorded, transfer
from benchmarks.common import ROOT, mean_sd
import pytest

from objectives.conventions import ConfigurationError
from parser import pipeline


def pipeline_row(stage: str, seed: int | None, las: float, command: str | None = "python train.py fit") -> dict:
    """A row of a pipeline's runs.jsonl, as ``treeexp pipeline ... --test`` writes it."""
    folder = "runs/base" if seed is None else f"out/{stage}/seed{seed}/transfer/version_0"
    return {"stage": stage, "seed": seed, "checkpoint": f"{folder}/checkpoints/best.ckpt",
            "dev": {} if seed is None else {"step": 99, "val/las": las}, "cpu_minutes": 10.0 if command else None,
            "peak_rss_mib": 1024 if command else None, "commit": "abc" if command else None, "command": command,
            "date": "d" if command else None, "machine": "AMD EPYC, 2 cores, avx512_bf16" if command else None,
            "test": {"uas": 70.0, "las": las + 1}}


def test_rows_of_every_run_of_a_pipelines_own_rows_once_and_their_table(tmp_path):
    output, results = tmp_path / "out", tmp_path / "rows.jsonl"
    output.mkdir()
    pipeline.write_rows(output, [
        {**pipeline_row("base", None, 20.0, command=None), "dev": {"val/las": 70.0}}, pipeline_row("finetuned", 1, 60.0),
        pipeline_row("finetuned", 2, 62.0), pipeline_row("target_only", 1, 50.0),
        pipeline_row("student", 1, 64.0, command="python train.py fit --data.dev_size 100"),
        {**pipeline_row("better", 1, 64.0, command=None), "chosen": "student", "dev_trees": 100}])
    rows = transfer.record("UD_Wolof-WTB", output, results)
    assert [(r["stage"], r["seed"]) for r in rows] == [("zero-shot", None), ("finetuned", 1), ("finetuned", 2),
                                                         ("target_only", 1), ("student", 1), ("better", 1)]
    assert rows[5]["chosen"] == "student" and rows[5]["dev_las"] == 64.0 and rows[5]["dev_trees"] == 100
    assert "cpu_minutes" not in rows[5] and "benchmarks.transfer record" in rows[5]["command"]  # a choice trains nothing
    assert "dev_las" not in rows[0]  # the base's own dev is no target's
    assert rows[1]["dev_las"] == 60.0 and rows[1]["command"] == "python train.py fit" and rows[1]["commit"] == "abc"
    assert rows[1]["cpu_minutes"] == 10.0 and rows[1]["peak_rss_mib"] == 1024 and rows[1]["test_las"] == 61.0
    assert rows[1]["machine"] == "AMD EPYC, 2 cores, avx512_bf16"  # whose CPU minutes these are
    assert rows[1]["run"] == str(output / "finetuned" / "seed1") and "dev_trees" not in rows[1]
    assert "benchmarks.transfer record" in rows[0]["command"] and rows[0]["run"] == "runs/base/checkpoints/best.ckpt"
    assert rows[4]["dev_trees"] == 100  # chosen on the first 100 dev trees: a table of its own
    assert transfer.record("UD_Wolof-WTB", output, results) == []
    table = transfer.report(results)
    assert "| zero-shot | 1 | 21.00 |" in table and "| finetuned | 2 | 62.00 ± 1.41 |" in table
    assert table.index("zero-shot") < table.index("target_only") < table.index("finetuned")
    assert table.index("### UD_Wolof-WTB, chosen on the first 100 dev trees") > table.index("finetuned")
    given = pipeline_row("finetuned", 4, 1.0, command=f"{sys.executable} {ROOT}/train.py fit --config {ROOT}/configs/t.yaml")
    pipeline.write_rows(output, [given])  # a run given to the pipeline: its command as its machine wrote it
    assert transfer.record("UD_Wolof-WTB", output, results)[0]["command"] == "python train.py fit --config configs/t.yaml"
    untested = pipeline_row("finetuned", 3, 1.0)
    del untested["test"]  # a pipeline run without --test
    pipeline.write_rows(output, [untested])
    with pytest.raises(ConfigurationError, match="run the pipeline again with --test"):
        transfer.record("UD_Wolof-WTB", output, results)


def test_summary_sets_each_target_beside_its_own_trees_and_the_whole_file(tmp_path):
    rows = [("UD_Wolof-WTB", "zero-shot", 20.0), ("UD_Wolof-WTB", "student", 55.0), ("UD_Wolof-WTB", "student", 57.0),
            ("UD_Wolof-WTB", "full", 81.0), ("UD_Turkish-IMST", "target_only", 40.0),
            ("UD_Turkish-IMST", "student", 45.5), ("UD_Fake-X", "student", 1.0)]
    results = tmp_path / "rows.jsonl"
    results.write_text("".join(json.dumps({"treebank": t, "stage": s, "test_las": las}) + "\n" for t, s, las in rows))
    wolof = next(language for language in recorded.languages() if language.treebank == "UD_Wolof-WTB")
    found = recorded.targets(results, new_language=tmp_path / "none.jsonl", small_treebanks=tmp_path / "none.jsonl")
    lines = transfer.summary(found).splitlines()
    assert len(lines) == 4  # header, rule, Wolof, Turkish: only the six targets, in their order
    cells = [cell.strip() for cell in lines[2].split("|")[1:-1]]
    best = sum(wolof.recipe) / len(wolof.recipe)
    assert cells[0] == "Wolof-WTB" and cells[1] == "20.0" and cells[5] == "56.0 ± 1.4" and cells[6] == "-"
    assert cells[3] == mean_sd(wolof.recipe, 1, "-") and cells[7] == f"{56.0 - best:+.1f}"
    assert cells[8] == f"{wolof.full:.1f}" and cells[9] == "81.0" and cells[10] == "80.2"
    turkish = [cell.strip() for cell in lines[3].split("|")[1:-1]]
    assert turkish[2] == "40.0" and turkish[3] == "-" and turkish[7] == "+5.5" and turkish[10] == "73.6"
    assert transfer.figure(found, tmp_path / "transfer.png").stat().st_size > 10_000


def test_a_target_outside_the_grid_takes_its_own_trees_from_the_language_alone_pipeline(tmp_path):
    results, alone, whole = tmp_path / "rows.jsonl", tmp_path / "new_language.jsonl", tmp_path / "small_treebanks.jsonl"
    results.write_text("".join(json.dumps({"treebank": "UD_Welsh-CCG", "stage": s, "test_las": las}) + "\n"
                               for s, las in [("target_only", 40.0), ("student", 60.0)]))
    lines = transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole)).splitlines()
    assert [c.strip() for c in lines[2].split("|")[1:-1]][2:4] == ["40.0", "-"]  # no rows: target_only stands
    alone.write_text("".join(json.dumps({"treebank": t, "stage": s, "test_las": las}) + "\n" for t, s, las in [
        ("UD_Welsh-CCG", "teachers", 50.0), ("UD_Welsh-CCG", "teachers", 52.0), ("UD_Welsh-CCG", "round1", 54.0),
        ("UD_Welsh-CCG", "round2", 56.0), ("UD_Turkish-IMST", "round2", 99.0)]))
    cells = [c.strip() for c in transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole))
             .splitlines()[2].split("|")[1:-1]]
    assert cells[0] == "Welsh-CCG" and cells[2:4] == ["51.0 ± 1.4", "56.0"] and cells[7] == "+4.0"
    assert cells[8] == "-" and cells[10] == "82.6"  # no whole-file row yet; UDPipe 2's published LAS
    whole.write_text(json.dumps({"treebank": "UD_Welsh-CCG", "recipe": "configs/small_treebank.yaml", "ablation": "",
                                 "encoder": "multilingual-e5-small", "decoder": "mst", "dev_las": 77.0,
                                 "test_las": 78.04}) + "\n")
    cells = [c.strip() for c in transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole))
             .splitlines()[2].split("|")[1:-1]]
    assert cells[8] == "78.0"


def test_protocols_set_the_recipe_chosen_on_every_dev_tree_beside_the_same_on_k(tmp_path):
    rows = [("finetuned", None, 60.0, 10.0), ("student", None, 64.0, 20.0), ("finetuned", None, 62.0, 12.0),
            ("student", None, 66.0, 22.0), ("finetuned", 100, 59.0, 9.0), ("student", 100, 63.5, 19.0),
            ("zero-shot", None, 20.0, None)]
    results = tmp_path / "rows.jsonl"
    results.write_text("".join(json.dumps({"treebank": "UD_Wolof-WTB", "stage": stage, "test_las": las,
                                           "cpu_minutes": minutes, **({"dev_trees": k} if k else {})}) + "\n"
                               for stage, k, las, minutes in rows))
    lines = transfer.protocols([results]).splitlines()
    assert [cell.strip() for cell in lines[2].split("|")[1:-1]] == ["Wolof-WTB", "all", "61.00 ± 1.41", "65.00 ± 1.41",
                                                                    "-", "2", "32.0"]
    assert [cell.strip() for cell in lines[3].split("|")[1:-1]] == ["Wolof-WTB", "first 100", "59.00 (1 seed)",
                                                                    "63.50 (1 seed)", "-", "1", "28.0"]
    with results.open("a") as file:  # the second round and the choice of the better student: the recipe's final
        for stage, las, minutes in [("round2", 64.0, 18.0), ("better_student", 64.0, None)]:
            file.write(json.dumps({"treebank": "UD_Wolof-WTB", "stage": stage, "test_las": las, "cpu_minutes": minutes,
                                   "dev_trees": 100}) + "\n")
    second = tmp_path / "round2.jsonl"  # another file's runs: its seed 1 is a run of its own
    second.write_text("".join(json.dumps({"treebank": "UD_Wolof-WTB", "stage": stage, "seed": 1, "test_las": las,
                                          "cpu_minutes": 10.0, "dev_trees": 100, "dev_las": las}) + "\n"
                              for stage, las in [("finetuned", 60.0), ("student", 64.0), ("round2", 66.0)]))
    lines = transfer.protocols([results, second]).splitlines()
    assert [cell.strip() for cell in lines[3].split("|")[1:-1]] == ["Wolof-WTB", "first 100", "59.50 ± 0.71",
                                                                    "63.75 ± 0.35", "65.00 ± 1.41", "2", "38.0"]


def test_the_shipped_recipe_is_each_runs_final_parser_chosen_on_k_dev_trees_over_its_files(tmp_path):
    """The headline's transfer recipe: per target, the final parser of every run that reached it (a
    choice the pipeline wrote, or one made from its two students), not the runs chosen on every dev
    tree, not a run that stopped at its student, nor a target without a final."""
    def rows(path, runs):
        path.write_text("".join(json.dumps({"treebank": treebank, "stage": stage, "seed": seed, "dev_las": dev,
                                            "test_las": test, **({"dev_trees": k} if k else {})}) + "\n"
                                for treebank, stage, seed, k, dev, test in runs))
        return path

    first = rows(tmp_path / "student200.jsonl", [
        ("UD_Wolof-WTB", "student", 1, 100, 57.0, 55.0),  # stopped at its student: not the recipe
        ("UD_Wolof-WTB", "student", 2, 100, 57.0, 55.5), ("UD_Wolof-WTB", "round2", 2, 100, 58.0, 56.5),
        ("UD_Wolof-WTB", "better_student", 3, None, 60.0, 60.0),  # chosen on every dev tree
        ("UD_Welsh-CCG", "student", 1, 100, 70.0, 73.0)])
    second = rows(tmp_path / "round2.jsonl", [("UD_Wolof-WTB", "student", 1, 100, 57.0, 55.4),
                                              ("UD_Wolof-WTB", "round2", 1, 100, 56.0, 56.4),
                                              ("UD_Wolof-WTB", "better_student", 1, 100, 57.0, 55.4)])
    assert transfer.shipped([first, second]) == {"UD_Wolof-WTB": [56.5, 55.4]}


def test_the_zero_shot_of_the_shipped_rows_is_one_per_base_however_many_files_name_it(tmp_path):
    """Two files that record the same base's zero-shot give it once; another base is another value."""
    def rows(path, runs):
        path.write_text("".join(json.dumps({"treebank": treebank, "stage": stage, "seed": None, "run": run,
                                            "test_las": las}) + "\n" for treebank, stage, run, las in runs))
        return path

    first = rows(tmp_path / "a.jsonl", [("UD_Wolof-WTB", "zero-shot", "base1500", 21.7),
                                        ("UD_Wolof-WTB", "finetuned", "ft", 53.8)])
    second = rows(tmp_path / "b.jsonl", [("UD_Wolof-WTB", "zero-shot", "base1500", 21.7),
                                         ("UD_Wolof-WTB", "zero-shot", "base2250", 22.1),
                                         ("UD_Welsh-CCG", "zero-shot", "base1500", 50.1)])
    assert transfer.zero_shot([first, second]) == {"UD_Wolof-WTB": [21.7, 22.1], "UD_Welsh-CCG": [50.1]}


def test_a_second_round_recorded_before_its_choice_had_a_row_is_chosen_as_the_pipeline_chooses():
    def row(stage, seed, dev, test):
        return {"treebank": "UD_Welsh-CCG", "stage": stage, "seed": seed, "dev_las": dev, "test_las": test,
                "dev_trees": 100}

    rows = [row("student", 1, 70.0, 73.0), row("round2", 1, 69.0, 74.0), row("student", 2, 71.0, 73.5),
            row("round2", 2, 71.0, 74.4), row("student", 3, 70.0, 73.0), row("round2", 3, 72.0, 74.0),
            {**row(transfer.FINAL, 3, 70.0, 73.0), "chosen": "student"}, row("round2", 4, 71.0, 74.0)]
    made = transfer.with_choices(rows)[len(rows):]  # seed 3: chosen by its pipeline; seed 4: no student
    assert [(r["seed"], r["chosen"], r["test_las"], r["dev_trees"]) for r in made] == [
        (1, "student", 73.0, 100), (2, "round2", 74.4, 100)]  # the higher dev LAS; a tie: the second round


def test_recipes_compare_each_recipes_runs_at_the_seeds_every_file_has(tmp_path):
    """The fine-tuned base and its student per recipe file at the seeds all files have (a given
    fine-tuning's seed read from its command), the last recipe's student minus the first's."""
    def rows(path, runs):
        path.write_text("".join(json.dumps({"treebank": "UD_Wolof-WTB", "stage": stage, "seed": seed, "test_las": las,
                                            "cpu_minutes": 10.0, "dev_trees": 100, "command": command}) + "\n"
                                for stage, seed, las, command in runs))
        return path

    old = rows(tmp_path / "transfer.jsonl", [("finetuned", 1, 48.0, "x"), ("student", 1, 53.0, "x"),
                                             ("finetuned", 2, 49.0, "x"), ("student", 2, 54.0, "x")])
    new = rows(tmp_path / "relatives.jsonl", [("zero-shot", None, 21.0, None),
                                              ("finetuned", None, 51.0, "python train.py fit --seed_everything 1"),
                                              ("student", 1, 55.5, "x")])
    line = transfer.recipes([old, new]).splitlines()[2]
    assert [cell.strip() for cell in line.split("|")[1:-1]] == ["Wolof-WTB", "1", "48.00", "53.00", "20.0", "51.00",
                                                                "55.50", "20.0", "+2.50"]
    rows(tmp_path / "round2.jsonl", [("finetuned", 1, 51.0, "x"), ("student", 1, 55.5, "x"), ("round2", 1, 56.5, "x"),
                                     ("better_student", 1, 56.5, None)])
    lines = transfer.recipes([old, tmp_path / "round2.jsonl"]).splitlines()  # its final: the better of two students
    assert "round2: better_student" in lines[0] and lines[2].split("|")[-4:-1] == [" 56.50 ", " 30.0 ", " +3.50 "]


def test_stages_compare_two_recipes_stage_by_stage_on_dev_and_test_at_their_common_seeds(tmp_path):
    """A stage's dev and test LAS of each recipe, the second's minus the first's, over the seeds
    both ran (a stage one recipe did not run, or another number of dev trees, has no line)."""
    def rows(path, runs):
        path.write_text("".join(json.dumps({"treebank": "UD_Wolof-WTB", "stage": stage, "seed": seed, "dev_las": dev,
                                            "test_las": test, "dev_trees": trees}) + "\n"
                                for stage, seed, dev, test, trees in runs))
        return path

    shipped = rows(tmp_path / "shipped.jsonl", [("finetuned", 1, 50.0, 48.0, 100), ("finetuned", 2, 52.0, 49.0, 100),
                                                ("student", 1, 55.0, 53.0, 100), ("finetuned", 3, 60.0, 60.0, None)])
    averaged = rows(tmp_path / "averaged.jsonl", [("finetuned", 1, 51.0, 47.5, 100), ("finetuned", 3, 70.0, 70.0, 100)])
    lines = transfer.stages([shipped, averaged]).splitlines()
    assert "shipped: dev" in lines[0] and "averaged: test" in lines[0] and len(lines) == 3
    assert [cell.strip() for cell in lines[2].split("|")[1:-1]] == ["Wolof-WTB", "finetuned", "1", "50.00", "51.00",
                                                                    "+1.00", "48.00", "47.50", "-0.50"]
    for path in (shipped, averaged):  # a target beyond the six, after them
        path.write_text(path.read_text() + json.dumps({"treebank": "UD_Naija-NSC", "stage": "finetuned", "seed": 1,
                                                       "dev_las": 40.0, "test_las": 41.0, "dev_trees": 100}) + "\n")
    lines = transfer.stages([averaged, shipped]).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| Wolof-WTB |") and lines[3].startswith("| Naija-NSC | finetuned | 1 |")
