"""benchmarks.small_treebank: one real (tiny) run of the recipe, its rows and its resume."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from benchmarks import common, small_treebank
from parser.data.sentences import read_conllu, write_conllu


def _treebank(ud_dir: Path, root: Path) -> Path:
    """A UD folder ``root/UD_Tiny-Test`` whose train, dev and test are 30 EWT dev sentences."""
    sentences = read_conllu(ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu")[:30]
    folder = root / "UD_Tiny-Test"
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        write_conllu(sentences, folder / f"tt_test-ud-{split}.conllu")
    return root


def test_the_driver_trains_the_recipe_and_scores_three_decoders(tiny_bert_dir, ud_dir, tmp_path, monkeypatch):
    """The recipe with the tiny encoder for 2 steps: one row per decoder with dev and test
    scores, non-projective shares beside gold's, the chosen margin and the exact command;
    a second call skips the recorded variant."""
    data_root, results = _treebank(ud_dir, tmp_path / "ud"), tmp_path / "results.jsonl"
    variant = (f"--model.encoder {tiny_bert_dir} --model.encoder_options.characters 8 --model.heads.arc_size 32 "
               "--model.heads.label_size 16 "
               "--trainer.max_steps 2 --trainer.max_time null --trainer.enable_progress_bar false")
    argv = ["--treebank", "UD_Tiny-Test", "--data-root", str(data_root), "--train-args", variant,
            "--output", str(tmp_path / "runs"), "--results", str(results)]
    monkeypatch.setenv("UD_DIR", str(data_root))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the train.py process: one thread, as the tests' other processes
    small_treebank.main(argv)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [row["decoder"] for row in rows] == list(small_treebank.DECODERS)
    for row in rows:
        assert row["variant"] == variant and row["ablation"] == "" and row["steps"] == 2
        assert "configs/small_treebank.yaml" in row["command"] and "--model.encoder_options.characters 8" in row["command"]
        assert "--data.root $UD_DIR " in row["command"] and str(data_root) not in row["command"]  # no machine's path
        assert 0 <= row["test_las"] <= row["test_uas"] <= 100 and "test_upos" in row  # the recipe has a tagger
        assert row["gold_nonprojective_trees"].keys() == {"dev", "test"} and row["cpu_minutes"] > 0
    assert rows[1]["dev_nonprojective_trees"] == rows[1]["test_nonprojective_trees"] == 0.0  # Eisner
    assert rows[2]["crossing_margin"] is not None and rows[0]["crossing_margin"] is None

    assert list((tmp_path / "runs" / "UD_Tiny-Test").iterdir()) == [tmp_path / "runs" / "UD_Tiny-Test" /
                                                                     small_treebank.folder_name(shlex.split(variant))]

    monkeypatch.setattr(small_treebank, "train", lambda *a: pytest.fail("a recorded variant was trained again"))
    small_treebank.main(argv)
    assert len(results.read_text().splitlines()) == 3
    assert small_treebank.recorded_variants(results, "UD_Tiny-Test", small_treebank.RECIPE) == {variant}
    assert small_treebank.recorded_variants(results, "UD_Tiny-Test", "configs/other.yaml") == set()  # another recipe
    assert small_treebank.recorded_variants(results, "UD_Wolof-WTB", small_treebank.RECIPE) == set()


def test_the_report_names_each_run_and_decoder(tmp_path, capsys):
    """``--report``: a table per treebank, one line per row in file order, an ablation named
    by the ingredient it removes and its other overrides, the margin beside its decoder."""
    base = {"treebank": "UD_Tiny-Test", "commit": "abcdef0123", "gold_nonprojective_trees": {"dev": 3.6, "test": 3.2},
            "dev_las": 70.0, "test_uas": 79.0, "test_las": 71.5, "test_clas": 63.0, "dev_nonprojective_trees": 40.0,
            "test_nonprojective_trees": 38.0, "steps": 450, "cpu_minutes": 58.3}
    rows = [{**base, "ablation": "", "variant": "", "decoder": "mst", "test_upos": 92.3,
             "dev_crossing_head_accuracy": 25.4},
            {**base, "ablation": "characters", "variant": "--model.encoder_options.characters 0 --trainer.max_epochs 9",
             "decoder": "margin", "crossing_margin": 3.81}]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    small_treebank.main(["--report", "--results", str(results)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "**UD_Tiny-Test** (gold non-projective trees: dev 3.6%, test 3.2%)"
    assert lines[4].startswith("| recipe (abcdef0) | mst | 70.00 | 79.00 | 71.50 | 63.00 | 92.3 | 40.0% / 38.0% | 25.4% |")
    assert lines[5].startswith("| without characters + `--trainer.max_epochs 9` (abcdef0) | margin 3.81 |")
    assert "| 63.00 | - | 40.0% / 38.0% | - | 450 | 58.3 |" in lines[5]  # no tagger, no crossing-arc heads
    assert len(lines) == 6


def test_an_ablation_of_an_ingredient_the_recipe_lacks_is_refused(tmp_path, capsys):
    """``--ablate`` removes what the recipe has: an ingredient already off (set so, or left
    at the parser's default) is a usage error naming it, before anything trains."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  encoder_options:\n    layer_mix: true\n    characters: 0\n  terms:\n    - objective: objectives.Likelihood\n")
    assert small_treebank.absent_ingredients(str(recipe), ["layer_mix", "characters", "tagger"]) == ["characters", "tagger"]
    with pytest.raises(SystemExit) as stop:
        small_treebank.main(["--config", str(recipe), "--ablate", "characters", "--results", str(tmp_path / "r.jsonl")])
    assert stop.value.code == 2 and "has no characters to remove (already --model.encoder_options.characters 0)" in capsys.readouterr().err
    assert small_treebank.absent_ingredients("configs/small_treebank.yaml", ["layer_mix", "lstm"]) == []


def test_the_whole_file_run_the_tables_cite_is_the_recipes_best_on_dev():
    def row(dev_las, **fields):
        return {"treebank": "UD_Welsh-CCG", "recipe": small_treebank.RECIPE, "ablation": "", "encoder":
                "multilingual-e5-small", "decoder": "mst", "dev_las": dev_las, "test_las": dev_las + 1, **fields}
    rows = [row(70.0), row(72.0, variant="--trainer.max_epochs 20"), row(90.0, ablation="tagger"),
            row(91.0, encoder="runs/adapt/welsh"), row(92.0, decoder="eisner"), row(93.0, treebank="UD_Wolof-WTB"),
            row(94.0, recipe="configs/likelihood.yaml")]
    assert common.whole_file_run(rows, "UD_Welsh-CCG")["test_las"] == 73.0
    assert common.whole_file_run(rows, "UD_Turkish-IMST") is None
