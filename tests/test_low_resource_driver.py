"""benchmarks.low_resource: each cell a stage of parser.pipeline, the self-training rounds one
pipeline, every run through parser.runs.fit (training faked here but for the recipe check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import train
from benchmarks import low_resource
from parser import pipeline, runs
from parser.pipeline import TeacherRuns


def _args(**settings) -> low_resource.Options:
    return low_resource.Options(treebank="UD_X", **settings)


def test_a_cell_adds_only_its_size_and_teacher_to_the_recipe(tiny_bert_dir):
    """A cell's stage is the objective's shipped recipe with K, the teacher (kl and the other
    students) and the overrides; the pipeline adds the treebank and the seed, and the whole
    builds the recipe with the cell's settings."""
    for objective, name in low_resource.OBJECTIVES.items():
        teacher = "teacher.ckpt" if objective in low_resource.DISTILLING else None
        stage = low_resource.cell_stage(objective, 1000, [3], _args(), teacher_checkpoint=teacher)
        assert stage.config == str(runs.recipe(name)) and runs.config_path(stage.config).is_file()
        assert stage.args == ("--data.labeled_size", "1000", *(["--model.teacher", teacher] if teacher else []))
        assert stage.seeds == (3,) and stage.name == f"{objective}-k1000"
    with pytest.raises(ValueError, match="teacher"):
        low_resource.cell_stage("kl", 100, [1], _args())
    assert low_resource.cell_stage("supervised", "all", [1], _args()).args[:2] == ("--data.labeled_size", "null")
    partial = low_resource.cell_stage("supervised", 100, [1], _args(partial_arcs=0.3), partial_train=Path("p.conllu"))
    assert partial.args == ("--data.labeled_size", "null", "--data.train", "p.conllu", "--data.partial", "true")
    assert partial.name == "supervised-k100-partial0.3"

    stage = low_resource.cell_stage("ge", 100, [2], _args(train_args=("--model.encoder_lr", "1e-4")))
    overrides = pipeline.stage_overrides(stage, 2, "UD_English-EWT", "/data/ud", lambda name, seed: [])
    assert overrides == ["--data.treebank", "UD_English-EWT", "--data.root", "/data/ud", "--seed_everything", "2",
                         "--data.seed", "2", *stage.args] and stage.args[-2:] == ("--model.encoder_lr", "1e-4")
    cli = train.main(["--config", stage.config, *overrides, "--model.encoder", str(tiny_bert_dir)], run=False)
    assert cli.datamodule.labeled_size == 100 and cli.datamodule.seed == 2 and cli.config.seed_everything == 2
    assert cli.model.hparams.encoder_lr == 1e-4 and cli.trainer.max_steps == 400


@pytest.mark.parametrize("options, expected", [
    ({}, [("supervised-k100", (3,), None), ("self_distill1-k100", (3,), TeacherRuns("supervised-k100", "all")),
          ("self_distill2-k100", (3,), TeacherRuns("self_distill1-k100"))]),
    ({"ensemble_seeds": (1, 2)},
     [("supervised-k100", (1, 2), None), ("self_distill1e1_2-k100", (3,), TeacherRuns("supervised-k100", "all")),
      ("self_distill2e1_2-k100", (3,), TeacherRuns("self_distill1e1_2-k100"))]),
    ({"ensemble_seeds": (1, 2), "committee": True},
     [("supervised-k100", (1, 2), None), ("self_distill1e1_2-k100", (1, 2), TeacherRuns("supervised-k100", "all")),
      ("self_distill2c1_2-k100", (3,), TeacherRuns("self_distill1e1_2-k100", "all"))]),
], ids=["own-seed", "ensemble", "committee"])
def test_self_training_is_one_pipeline_of_its_rounds(options, expected):
    """Round 2 of seed 3: the supervised cell, then each round taught by the one before (the
    same seed); an ensemble of seeds teaches round 1, a committee every round (its members
    trained for those seeds in the rounds before)."""
    cells = low_resource.self_training("self_distill", 100, 3, 2, _args(**options))
    assert [(stage.name, stage.seeds, stage.teacher) for stage, _, _ in cells] == expected
    assert [(objective, round_) for _, objective, round_ in cells] == [("supervised", None), ("self_distill", 1),
                                                                       ("self_distill", 2)]


def test_the_rounds_are_the_shipped_chains(capsys):
    """The chains are pipeline configs a user runs as they are (``treeexp pipeline self_training``):
    a round 3 is the third round of the chain, and --rounds goes no further than its rounds."""
    for name in low_resource.CHAINS.values():
        assert [stage.name for stage in pipeline.read_pipeline(name).stages] == ["supervised", "round1", "round2", "round3"]
    cells = low_resource.self_training("self_sample", 100, 2, 3, _args())
    assert [(stage.name, stage.config.rsplit("/", 1)[-1], stage.teacher and stage.teacher.stage) for stage, _, _ in cells][1:] == [
        ("self_sample1-k100", "sample_distill.yaml", "supervised-k100"),
        ("self_sample2-k100", "sample_distill.yaml", "self_sample1-k100"),
        ("self_sample3-k100", "sample_distill.yaml", "self_sample2-k100")]
    with pytest.raises(SystemExit):
        low_resource.main(["--objectives", "supervised", "self_distill", "--rounds", "4"])
    assert "--rounds takes 1 to 3" in capsys.readouterr().err


@pytest.fixture
def launched(fake_training, monkeypatch) -> list[list[str]]:
    """Every train.py command launched (training faked, ``fake_training``); a run is scored LAS 40
    without parsing anything."""
    monkeypatch.setattr(low_resource, "test_scores", lambda run, options: {"uas": 50.0, "las": 40.0, "clas": 30.0})
    monkeypatch.setattr(low_resource, "report", lambda results: "")
    monkeypatch.setattr(low_resource, "figure", lambda results, path: path)
    return fake_training


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_a_committee_grid_trains_each_run_once_records_each_and_resumes(tmp_path, monkeypatch, launched):
    """Two committee rounds of seed 3 with the seeds 1 and 2: the runs in the order the old
    chain trained them, each once; a row per run (student overrides on the students only, the
    data root everywhere, the exact command of each); a second call trains nothing and
    records nothing, and a run whose row is gone is scored again without training."""
    results, output = tmp_path / "r.jsonl", tmp_path / "out"
    argv = ["--objectives", "supervised", "self_distill", "--rounds", "2", "--sizes", "100", "--seeds", "3",
            "--ensemble-seeds", "1", "2", "--committee", "--treebank", "UD_Wolof-WTB", "--data-root", str(tmp_path / "ud"),
            "--train-args", "--model.lr 1e-3", "--student-args", "--model.warmup_steps 7",
            "--output", str(output), "--results", str(results)]
    low_resource.main(argv)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    student = "--model.lr 1e-3 --model.warmup_steps 7"
    assert [(row["objective"], row["seed"], row["variant"]) for row in rows] == [
        ("supervised", 3, "--model.lr 1e-3"), ("supervised", 1, "--model.lr 1e-3"), ("supervised", 2, "--model.lr 1e-3"),
        ("self_distill", 3, f"round 1 teachers of seeds 1 2 {student}"),
        ("self_distill", 1, f"round 1 teachers of seeds 1 2 {student}"),
        ("self_distill", 2, f"round 1 teachers of seeds 1 2 {student}"),
        ("self_distill", 3, f"round 2 committee of seeds 1 2 {student}")]
    assert [row["command"] for row in rows] == [runs.shell_line(command) for command in launched]
    for row in rows:
        assert (row["labeled"], row["treebank"], row["las"], row["max_steps"], row["train_seconds"]) == (
            100, "UD_Wolof-WTB", 40.0, 7, 61) and row["commit"] and row["extra_labeled"] == 0
    for command in launched:
        assert _option(command, "--data.root") == str(tmp_path / "ud") and _option(command, "--data.labeled_size") == "100"
        assert ("--model.warmup_steps" in command) == ("--model.teacher" in command)  # the students only
    supervised, student_command = launched[0], launched[-1]
    assert "--model.warmup_steps" not in supervised and supervised[-4:-2] == ["--model.lr", "1e-3"]
    folder = output / "UD_Wolof-WTB" / "self_distill2c1_2-k100__model.lr_1e_3___model.warmup_steps_7" / "seed3"
    assert _option(student_command, "--trainer.default_root_dir") == str(folder)
    round_1 = output / "UD_Wolof-WTB" / "self_distill1e1_2-k100__model.lr_1e_3___model.warmup_steps_7"
    assert yaml.safe_load(_option(student_command, "--model.teacher")) == [
        str(round_1 / f"seed{seed}" / "distill" / "version_0" / "checkpoints" / "best.ckpt") for seed in (1, 2)]

    monkeypatch.setattr(runs, "launch", lambda *a: pytest.fail("a finished run was trained again"))
    low_resource.main(argv)
    assert len(results.read_text().splitlines()) == 7
    results.write_text("".join(line + "\n" for line in results.read_text().splitlines()[:-1]))
    low_resource.main(argv)
    assert results.read_text().splitlines()[-1] == json.dumps(rows[-1])  # the same row, scored again


def test_cells_of_two_treebanks_never_share_a_run(tmp_path, launched):
    """One --output for two treebanks: each treebank's cells train in a folder of their own."""
    for treebank in ("UD_Wolof-WTB", "UD_Greek-GDT"):
        low_resource.main(["--objectives", "supervised", "--sizes", "100", "--seeds", "1", "--treebank", treebank,
                           "--output", str(tmp_path / "out"), "--results", str(tmp_path / "r.jsonl")])
    folders = [Path(_option(command, "--trainer.default_root_dir")) for command in launched]
    assert folders == [tmp_path / "out" / treebank / "supervised-k100" / "seed1" for treebank in ("UD_Wolof-WTB", "UD_Greek-GDT")]


def test_a_cross_treebank_teacher_is_trained_once_per_settings(tmp_path, launched):
    """The other treebanks' teacher (their own data, the data root, --teacher-args) trains once
    per config and --teacher-args, beside the treebanks' folders, and records its row alone;
    the student learns from it."""
    common = ["--objectives", "cross_treebank", "--sizes", "100", "--seeds", "1", "--treebank", "UD_Wolof-WTB",
              "--teacher-treebank", "UD_Greek-GDT", "UD_Uyghur-UDT", "--data-root", str(tmp_path / "ud"),
              "--output", str(tmp_path / "out"), "--results", str(tmp_path / "r.jsonl")]
    for teacher_args in ("", "--trainer.max_steps 1500", ""):
        low_resource.main([*common, "--teacher-args", teacher_args])
    teachers = [command for command in launched if "--data.labeled_size" not in command]
    assert len(teachers) == 2 and len(launched) == 3  # the first settings' teacher is reused (the student too)
    first, second = (Path(_option(command, "--trainer.default_root_dir")).parent for command in teachers)
    assert first != second and first.parent == tmp_path / "out" and first.name.startswith("teacher-UD_Greek_GDT_UD_Uyghur_UDT")
    assert json.loads(_option(teachers[0], "--data.treebank")) == ["UD_Greek-GDT", "UD_Uyghur-UDT"]
    assert _option(teachers[0], "--data.root") == str(tmp_path / "ud") and teachers[1][-4:-2] == ["--trainer.max_steps", "1500"]
    student = launched[1]
    assert _option(student, "--model.teacher") == str(first / "seed1" / "likelihood" / "version_0" / "checkpoints" / "best.ckpt")
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [row["variant"] for row in rows] == [
        "teacher alone (UD_Greek-GDT+UD_Uyghur-UDT)", "teacher UD_Greek-GDT+UD_Uyghur-UDT",
        "teacher alone (UD_Greek-GDT+UD_Uyghur-UDT)"]
    assert rows[0]["max_steps"] is None and list(rows[0])[:5] == ["objective", "variant", "labeled", "seed", "train_seconds"]
