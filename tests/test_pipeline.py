"""The pipeline command: stages of train.py runs as one command (parser.pipeline, parser.runs)."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from parser import pipeline, runs
from parser.data import tokenizer
from parser.data.datamodule import DependencyDataModule
from parser.data.sentences import read_conllu, write_conllu
from parser.training.precision import processor
from tests.conftest import fake_runs, whole_checkpoint

REPO = Path(__file__).resolve().parents[1]


def tiny_treebank(ud_dir: Path, root: Path) -> Path:
    """``root/UD_Tiny``: 30 training and 8 dev and test sentences of Wolof-WTB."""
    (root / "UD_Tiny").mkdir(parents=True)
    for split, size in (("train", 30), ("dev", 8), ("test", 8)):
        sentences = read_conllu(next((ud_dir / "UD_Wolof-WTB").glob(f"*-ud-{split}.conllu")))[:size]
        write_conllu(sentences, root / "UD_Tiny" / f"tiny-ud-{split}.conllu")
    return root


def write_pipeline(path: Path, encoder: Path, stages: str) -> Path:
    small = (f"[--model.encoder, {encoder}, --model.heads.arc_size, '32', --model.heads.label_size, '16', "
             "--trainer.max_steps, '2', --data.batch_tokens, '300', --trainer.enable_progress_bar, 'false', "
             "--trainer.enable_model_summary, 'false', --trainer.limit_val_batches, '1.0']")
    path.write_text(stages.replace("SMALL", small))
    return path


def stage_lines(printed: str) -> list[str]:
    """A dry run's lines but its first, the tokenizer's."""
    lines = printed.splitlines()
    assert lines[0].startswith("tokenizer: ")
    return lines[1:]


TWO_STAGES = """
stages:
  - name: teachers
    config: configs/likelihood.yaml
    seeds: [1, 2]
    args: SMALL
  - name: student
    config: configs/distill.yaml
    teacher: {stage: teachers, runs: all}
    args: SMALL
"""


def test_dry_run_prints_each_stage_with_its_teachers_and_start(ud_dir, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("""
stages:
  - {name: base, config: configs/likelihood.yaml, data: own}
  - {name: tuned, config: configs/likelihood.yaml, init: base, seeds: [1, 2]}
  - {name: plain, config: configs/likelihood.yaml}
  - {name: start, choose: [tuned, plain]}
  - {name: student, config: configs/distill.yaml, teacher: start, seeds: [2]}
  - {name: committee, config: configs/distill.yaml, teacher: {stage: tuned, runs: all}}
""")
    pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "out", "--dry-run"])
    lines = stage_lines(capsys.readouterr().out)
    assert lines[5] == "stage 5/6 student: not trained (the final parser does not use it; --also student trains it)"
    assert len(lines) == 7 and "--model.teacher '[out/tuned" in lines[6]  # the committee, the final one, trains
    pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "out", "--dry-run",
                   "--also", "student"])
    lines = stage_lines(capsys.readouterr().out)
    assert len(lines) == 7 and "--data.treebank" not in lines[0]  # the base keeps its own data
    assert "--data.root" in lines[0]
    assert "--model.init out/base/seed1/likelihood/version_0/checkpoints/best.ckpt" in lines[2]
    assert lines[4].startswith("stage 4/6 start: whichever of tuned, plain")
    assert "--model.teacher out/tuned/seed2/likelihood/version_0/checkpoints/best.ckpt" in lines[5]  # the same seed
    assert ("--model.teacher '[out/tuned/seed1/likelihood/version_0/checkpoints/best.ckpt, "
            "out/tuned/seed2/likelihood/version_0/checkpoints/best.ckpt]'") in lines[6]  # every seed
    pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "out", "--dry-run",
                   "--until", "tuned"])
    assert len(stage_lines(capsys.readouterr().out)) == 3  # base and the two seeds of tuned


def test_a_stage_of_several_configs_reads_each_over_the_one_before_its_teacher(ud_dir, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("""
stages:
  - {name: teacher, config: configs/likelihood_low_resource.yaml}
  - {name: student, config: [configs/likelihood_low_resource.yaml, configs/distill.yaml], teacher: teacher}
  - {name: round2, config: configs/distill.yaml, teacher: student}
""")
    pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "out", "--dry-run"])
    student, round2 = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if "train.py" in line][1:]
    configs = [str(runs.config_path(f"configs/{name}.yaml")) for name in ("likelihood_low_resource", "distill")]
    start = student.index("fit") + 1
    assert student[start:start + 4] == ["--config", configs[0], "--config", configs[1]]  # before the teacher: not unset
    assert student[student.index("--model.teacher") + 1] == "out/teacher/seed1/likelihood_low_resource/version_0/checkpoints/best.ckpt"
    assert round2[round2.index("--model.teacher") + 1] == "out/student/seed1/distill/version_0/checkpoints/best.ckpt"  # the last's name


def test_a_seed_given_replaces_each_single_seed_and_keeps_the_ensembles(ud_dir, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("""
stages:
  - {name: teachers, config: configs/likelihood_low_resource.yaml, seeds: [1, 2]}
  - {name: student, config: configs/distill.yaml, teacher: {stage: teachers, runs: all}}
  - {name: round2, config: configs/distill.yaml, teacher: student}
""")
    pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "out", "--dry-run",
                   "--seed", "3"])
    lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if "train.py" in line]
    assert [line[line.index("--seed_everything") + 1] for line in lines] == ["1", "2", "3", "3"]
    assert lines[2][lines[2].index("--model.teacher") + 1].count("out/teachers/seed") == 2  # the ensemble's runs
    assert lines[3][lines[3].index("--model.teacher") + 1] == "out/student/seed3/distill/version_0/checkpoints/best.ckpt"


@pytest.mark.parametrize("stages, message", [
    ("stages: [{name: a, config: configs/likelihood.yaml, teacher: b}, {name: b, config: configs/likelihood.yaml}]",
     "stage a: reads b, which is not an earlier stage"),
    ("stages: [{name: a, config: configs/likelihood.yaml, teachers: b}]", "teachers: b is now written teacher: {stage: b, runs: all}"),
    ("stages: [{name: a, config: configs/likelihood.yaml, teacher: {stage: b, runs: two}}]", "teacher is a stage's name or"),
    ("stages: [{name: a, config: configs/nope.yaml}]", "stage a: no config file configs/nope.yaml"),
    ("stages: [{name: a, config: [configs/likelihood.yaml, configs/nope.yaml]}]", "stage a: no config file configs/nope.yaml"),
    ("stages: [{name: a, config: configs/likelihood.yaml, seed: 3}]", "stage a: unknown keys seed"),
    ("stages: [{name: a, choose: [a]}]", "stage a: reads a, which is not an earlier stage"),
    ("stages: [{name: a}]", "give a config to train, choose: [stages] to choose between, or average"),
    ("stages: [{name: a, config: configs/likelihood.yaml}, {name: b, average: {a: 1.0}}]", "average is {stage: weight"),
    ("stages: [{name: a, config: configs/likelihood.yaml}, {name: b, config: configs/likelihood.yaml}, "
     "{name: c, average: {a: 0.5, b: 0.6}}]", "positive weights summing to 1, not {'a': 0.5, 'b': 0.6}"),
    ("stages: [{name: a, config: configs/likelihood.yaml}, {name: c, average: {a: 0.5, b: 0.5}}]",
     "stage c: reads b, which is not an earlier stage"),
    ("stages: {a: 1}", "a pipeline needs a list of stages"),
])
def test_a_wrong_pipeline_is_one_line_before_anything_trains(ud_dir, tmp_path, capsys, stages, message):
    path = tmp_path / "p.yaml"
    path.write_text(stages)
    with pytest.raises(SystemExit) as stop:
        pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and error.startswith("error: ") and message in error and "\n" not in error
    assert not (tmp_path / "out").exists()


def test_a_shipped_pipeline_is_found_by_name_with_its_configs_from_any_folder(ud_dir, tmp_path, capsys, monkeypatch):
    root = str(ud_dir.resolve())
    monkeypatch.chdir(tmp_path)
    pipeline.main(["transfer", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--dry-run"])
    lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if "train.py" in line]
    assert [line[line.index("--config") + 1] for line in lines[:2]] == [
        str(runs.CONFIGS / "multilingual_base.yaml"), str(runs.CONFIGS / "transfer.yaml")]
    with pytest.raises(SystemExit) as stop:
        pipeline.main(["old_language", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out"])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "nor a shipped pipeline of that name (" in error and " new_language," in error and "\n" not in error


def test_the_transfer_recipes_second_round_learns_from_its_student_and_the_better_on_dev_is_final(
        ud_dir, tmp_path, capsys, monkeypatch):
    root = str(ud_dir.resolve())
    monkeypatch.chdir(tmp_path)
    pipeline.main(["transfer", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "100",
                   "--dry-run"])
    out = capsys.readouterr().out
    student, round2 = [shlex.split(line) for line in out.splitlines() if "train.py" in line][-2:]
    assert student[student.index("--trainer.default_root_dir") + 1] == "out/student/seed1"
    made = "out/student/seed1/transfer_student/version_0/checkpoints/best.ckpt"
    assert round2[round2.index("--model.init") + 1] == round2[round2.index("--model.teacher") + 1] == made
    assert round2[round2.index("--config") + 1] == str(runs.CONFIGS / "transfer_student.yaml")
    assert round2[round2.index("--data.dev_size") + 1] == "100"
    assert "better_student: whichever of round2, student has the higher mean dev LAS" in out
    assert pipeline.read_pipeline("transfer").final == "better_student"
    pipeline.main(["transfer", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "100",
                   "--until", "student", "--dry-run"])  # the recipe before the second round
    assert "/round2/" not in capsys.readouterr().out


def test_no_treebank_passes_the_languages_statistics_to_its_ge_stage(ud_dir, tmp_path, capsys, monkeypatch):
    root = str(ud_dir.resolve())
    monkeypatch.chdir(tmp_path)
    pipeline.main(["no_treebank", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out",
                   "--statistics", "configs/facts/wolof.yaml", "--dry-run"])
    base, ge = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if "train.py" in line]
    assert ge[ge.index("--config") + 1] == str(runs.CONFIGS / "no_treebank.yaml")
    assert ge[ge.index("--statistics") + 1] == "configs/facts/wolof.yaml"
    assert ge[ge.index("--model.init") + 1] == ge[ge.index("--model.teacher") + 1]  # the base starts and teaches


RELATIVES = """
stages:
  - name: finetuned
    config: configs/transfer.yaml
    relatives: {nearest: 2, share: 0.5}
"""


def test_relatives_are_the_treebanks_nearest_the_target_ranked_once_sharing_part_of_every_epoch(
        ud_dir, tmp_path, capsys, fake_training, wolof_tokenizer):
    """A stage with relatives trains beside the N treebanks nearest the target's labeled trees and
    raw text (here the rest of its file), ranked once into OUTPUT/nearness.json, the nearer
    drawn more; a dry run before the ranking names it."""
    root = tiny_treebank(ud_dir, tmp_path / "ud")
    for name, source, split in (("UD_Wolof-Other", "UD_Wolof-WTB", "test"), ("UD_Yoruba-YTB", "UD_Yoruba-YTB", "test"),
                                ("UD_English-EWT", "UD_English-EWT", "dev")):
        (root / name).mkdir()
        write_conllu(read_conllu(next((ud_dir / source).glob(f"*-ud-{split}.conllu")))[:150],
                     root / name / f"x-ud-{split}.conllu")
    path = tmp_path / "relatives.yaml"
    path.write_text(RELATIVES)
    common = [str(path), "--treebank", "UD_Tiny", "--root", str(root), "--output", str(tmp_path / "out"), "--trees", "10",
              "--no-tokenizer"]
    pipeline.main([*common, "--dry-run"])
    assert "--data.relatives '<the 2 nearest in nearness.json, sharing 0.5>'" in capsys.readouterr().out
    output, train = tmp_path / "out", root / "UD_Tiny" / "tiny-ud-train.conllu"
    rows = pipeline.nearest_treebanks(train, 10, None, str(root), None, output, print)
    ranked = [row["treebank"] for row in rows]
    assert sorted(ranked) == ["UD_English-EWT", "UD_Wolof-Other", "UD_Yoruba-YTB"] and ranked[0] == "UD_Wolof-Other"
    assert json.loads((output / "nearness.json").read_text()) == rows
    pipeline.run(pipeline.read_pipeline(path), "UD_Tiny", output, str(root), trees=10, ranked=rows, say=print)
    (command,) = fake_training
    shares = json.loads(command[command.index("--data.relatives") + 1])
    assert list(shares) == ranked[:2] and sum(shares.values()) == pytest.approx(0.5)
    assert shares[ranked[0]] > shares[ranked[1]]
    path.write_text(RELATIVES.replace("nearest: 2", "nearest: all"))  # every candidate, the nearer drawn more
    assert pipeline.relatives_option(pipeline.Relatives(None, 0.5), None) == "<every treebank in nearness.json, sharing 0.5>"
    pipeline.run(pipeline.read_pipeline(path), "UD_Tiny", tmp_path / "every", str(root), trees=10, ranked=rows, say=print)
    every = json.loads(fake_training[-1][fake_training[-1].index("--data.relatives") + 1])
    assert list(every) == ranked and sum(every.values()) == pytest.approx(0.5)
    path.write_text(RELATIVES)
    assert pipeline.nearest_treebanks(train, 10, None, str(root), ["Yoruba"], output, print) == rows  # ranked once
    assert "(reused)" in capsys.readouterr().out
    (output / "nearness.json").unlink()
    chosen = pipeline.nearest_treebanks(train, 10, None, str(root), ["Yoruba", "English"], output, print)
    assert sorted(row["treebank"] for row in chosen) == ["UD_English-EWT", "UD_Yoruba-YTB"]
    (output / "nearness.json").unlink()  # raw text read through the target's tokenizer
    raw = tmp_path / "wolof.txt"
    dev = read_conllu(root / "UD_Tiny" / "tiny-ud-dev.conllu", trees=False)
    raw.write_text(" ".join(s.tokenlist.metadata["text"] for s in dev) + "\n")
    from_raw = pipeline.nearest_treebanks(train, 10, (str(raw), wolof_tokenizer), str(root), None, output, print)
    assert from_raw[0]["treebank"] == "UD_Wolof-Other" and from_raw != rows  # other text, other overlaps
    alone = tiny_treebank(ud_dir, tmp_path / "alone")  # no other treebank: the target's trees alone
    only = alone / "UD_Tiny" / "tiny-ud-train.conllu"
    assert pipeline.nearest_treebanks(only, 10, None, str(alone), None, tmp_path / "out2", print) == []
    assert "no treebank under" in capsys.readouterr().out
    pipeline.run(pipeline.read_pipeline(path), "UD_Tiny", tmp_path / "out2", str(alone), trees=10, ranked=[], say=print)
    assert "--data.relatives" not in fake_training[-1] and len(fake_training) == 3
    for value in ("{nearest: 0, share: 0.5}", "{nearest: some, share: 0.5}", "{nearest: 2, share: 1.5}",
                  "{nearest: 2, share: 0.5, alike: 1}", "3"):
        path.write_text(RELATIVES.replace("{nearest: 2, share: 0.5}", value))
        with pytest.raises(SystemExit) as stop:
            pipeline.main(common)
        assert stop.value.code == 2 and "relatives is {nearest: N, share: S}" in capsys.readouterr().err


def test_with_no_tree_of_the_target_its_relatives_alone_train_alike_ranked_by_its_raw_text(
        ud_dir, tmp_path, capsys, fake_training, monkeypatch):
    """A stage that reads no tree of the target (no_treebank_relatives) trains on the relatives
    alone, each alike (shares summing to 1), the ranking reading no tree of the target (its raw
    text's words alone); that parser and the base are averaged (no dev tree to choose on), and
    the last stage starts from the average and learns from it."""
    from parser import averaging

    root = tiny_treebank(ud_dir, tmp_path / "ud")
    for name, source in (("UD_Wolof-Other", "UD_Wolof-WTB"), ("UD_Yoruba-YTB", "UD_Yoruba-YTB"),
                         ("UD_English-EWT", "UD_English-EWT")):
        (root / name).mkdir()
        write_conllu(read_conllu(next((ud_dir / source).glob("*-ud-test.conllu")))[:150], root / name / "x-ud-test.conllu")
    output, train = tmp_path / "out", root / "UD_Tiny" / "tiny-ud-train.conllu"
    chain = pipeline.read_pipeline("no_treebank_relatives")
    assert pipeline.labeled_trees(chain, chain.needed()) == 0
    rows = pipeline.nearest_treebanks(train, 0, None, str(root), ["Wolof", "Yoruba", "English"], output, print)
    assert rows[0]["treebank"] == "UD_Wolof-Other" and all("upos_ngrams" not in row for row in rows)
    base = tmp_path / "base.ckpt"
    zipfile.ZipFile(base, "w").close()  # a checkpoint's form, never loaded here
    averaged = []
    monkeypatch.setattr(averaging, "save_average", lambda paths, weights, folder: averaged.append((paths, weights, folder)))
    pipeline.run(chain, "UD_Tiny", output, str(root), given={"base": str(base)}, ranked=rows, trees=0,
                 statistics="configs/facts/wolof.yaml", say=print)
    relatives, ge = fake_training
    [(paths, weights, folder)] = averaged
    assert paths[0] == str(base) and "relatives/seed1" in paths[1] and weights == [0.5, 0.5]
    assert ge[ge.index("--model.init") + 1] == ge[ge.index("--model.teacher") + 1] == str(folder)
    shares = json.loads(relatives[relatives.index("--data.relatives") + 1])
    assert len(shares) == 3 and all(share == pytest.approx(1 / 3, abs=1e-4) for share in shares.values())  # each alike
    assert [relatives[i + 1] for i, a in enumerate(relatives) if a == "--config"][-1].endswith("relatives_alone.yaml")
    data = DependencyDataModule("UD_Tiny", root=str(root), labeled_size=0, relatives=shares)  # rounded shares, summed
    data.setup("fit")
    assert sum(data._sampler(data.train_sentences, shuffle=True).shares) == pytest.approx(1)


def test_few_trees_labels_k_trees_chooses_on_k_dev_trees_and_counts_their_statistics(ud_dir, tmp_path, capsys,
                                                                                       monkeypatch):
    """--trees K: every target stage reads the first K training trees labeled and the first K dev
    trees; GE reads the K trees' statistics, counted into OUTPUT/statistics.yaml (not in a dry run)
    unless a statistics file is given; the base's own data keeps its treebanks."""
    root = str(ud_dir.resolve())
    monkeypatch.chdir(tmp_path)
    pipeline.main(["few_trees", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "20",
                   "--dry-run"])
    printed = capsys.readouterr().out
    base, finetuned, few = [shlex.split(line) for line in printed.splitlines() if "train.py" in line]
    assert "--data.labeled_size" not in base and "--data.treebank" not in base
    assert finetuned[finetuned.index("--data.labeled_size") + 1] == "20"
    assert few[few.index("--model.init") + 1] == few[few.index("--model.teacher") + 1]  # the fine-tuned parser
    assert few[few.index("--data.labeled_size") + 1] == few[few.index("--data.dev_size") + 1] == "20"
    assert few[few.index("--statistics") + 1] == str(Path("out") / "statistics.yaml")
    assert "statistics count" in printed and "--trees 20" in printed and not (tmp_path / "out").exists()
    assert "start: whichever of base, finetuned has the higher mean LAS on the target's dev trees" in printed
    pipeline.main(["few_trees", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "20",
                   "--statistics", "configs/facts/wolof.yaml", "--dry-run"])
    printed = capsys.readouterr().out
    few = shlex.split([line for line in printed.splitlines() if "train.py" in line][-1])
    assert few[few.index("--statistics") + 1] == "configs/facts/wolof.yaml" and "statistics count" not in printed
    with pytest.raises(SystemExit) as stop:
        pipeline.main(["few_trees", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "0"])
    assert stop.value.code == 2 and "no_treebank pipeline" in capsys.readouterr().err


def test_a_pipeline_learns_the_targets_tokenizer_from_its_labeled_trees_and_reads_raw_text_through_it(
        ud_dir, tmp_path, capsys, monkeypatch):
    """The tokenizer learns from the trees the target's stages label (100 in transfer.yaml, K with
    --trees) and early-stops on as many dev trees; --raw reaches only the stages that read raw text."""
    root = str(ud_dir.resolve())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wolof.txt").write_text("Ndax yow la. Waaw.\n")
    pipeline.main(["transfer", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--raw", "wolof.txt",
                   "--dry-run"])
    printed = capsys.readouterr().out.splitlines()
    tokenizer = shlex.split(printed[0].removeprefix("tokenizer: "))
    assert tokenizer[:3] == ["treeexp", "tokenizer", "train"] and tokenizer[-3:] == [
        str(Path("out") / "tokenizer.udpipe"), "--sentences", "100"]
    commands = {line[line.index("--trainer.default_root_dir") + 1].split("/")[1]: line
                for line in (shlex.split(text) for text in printed if "train.py" in text)}
    assert set(commands) == {"base", "finetuned", "student", "round2"}  # target_only and student_ge: only with --also
    reading = {stage for stage, line in commands.items() if "--data.unlabeled" in line}
    assert reading == {"student", "round2"}  # the stages whose terms read raw text
    student = commands["student"]
    assert student[student.index("--data.unlabeled") + 1] == "wolof.txt"
    assert student[student.index("--data.unlabeled_tokenizer") + 1] == str(Path("out") / "tokenizer.udpipe")
    pipeline.main(["few_trees", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--trees", "20",
                   "--dry-run"])
    assert shlex.split(capsys.readouterr().out.splitlines()[1])[-2:] == ["--sentences", "20"]  # after the statistics
    pipeline.main(["no_treebank", "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", "--statistics",
                   "configs/facts/wolof.yaml", "--dry-run"])
    assert "tokenizer: none (no labeled tree to learn from)" in capsys.readouterr().out
    for name, extra, message in (("transfer", ["--raw", "wolof.txt", "--no-tokenizer"], "drop --no-tokenizer"),
                                 ("transfer", ["--raw", "nowhere.txt"], "nowhere.txt"),
                                 ("no_treebank", ["--raw", "wolof.txt"], "this pipeline labels none")):
        with pytest.raises(SystemExit) as stop:
            pipeline.main([name, "--treebank", "UD_Wolof-WTB", "--root", root, "--output", "out", *extra])
        error = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and message in error and "\n" not in error, error


def base_tuned_and_a_choice(tmp_path: Path, tuned: str, choose: list[str]) -> tuple[Path, dict[str, str]]:
    """A pipeline file of a base, a stage ``tuned`` from it and a choice between ``choose``, and
    both parsers given (checkpoints in form only, never loaded)."""
    given = {}
    for name in ("base", tuned):
        with zipfile.ZipFile(tmp_path / f"{name}.ckpt", "w") as file:
            file.writestr("x", "")
        given[name] = str(tmp_path / f"{name}.ckpt")
    spec = tmp_path / "p.yaml"
    spec.write_text(f"""
stages:
  - {{name: base, config: configs/likelihood.yaml, data: own}}
  - {{name: {tuned}, config: configs/likelihood.yaml, init: base}}
  - {{name: start, choose: [{', '.join(choose)}]}}
""")
    return spec, given


def test_a_choice_with_a_parser_trained_elsewhere_parses_the_first_k_dev_trees_with_each(ud_dir, tmp_path,
                                                                                         monkeypatch):
    """A base as it is never saw the target's dev: every candidate parses the same K dev trees
    (written as they are) and the higher LAS is chosen."""
    from parser import evaluate

    spec, given = base_tuned_and_a_choice(tmp_path, "tuned", ["base", "tuned"])
    scored = []

    def score(checkpoint, gold, predicted, **options):
        scored.append((Path(checkpoint).name, Path(gold)))
        return {"las": {"base.ckpt": 48.0, "tuned.ckpt": 52.0}[Path(checkpoint).name], "uas": 0.0}

    monkeypatch.setattr(evaluate, "score_checkpoint", score)
    said = []
    (tmp_path / "out").mkdir()
    results = pipeline.run(pipeline.read_pipeline(spec), "UD_Wolof-WTB", tmp_path / "out", str(ud_dir),
                           given=given, say=said.append, trees=5)
    assert results["start"] == results["tuned"] and "start: tuned, the higher mean LAS on" in said[-1]
    choice = pipeline.read_rows(tmp_path / "out")[-1]  # the choice's row: the parser it took, chosen on 5 dev trees
    assert {key: choice[key] for key in ("stage", "seed", "chosen", "checkpoint", "dev_trees", "cpu_minutes")} == {
        "stage": "start", "seed": 1, "chosen": "tuned", "checkpoint": given["tuned"], "dev_trees": 5, "cpu_minutes": None}
    table = pipeline.report(pipeline.read_rows(tmp_path / "out")).splitlines()
    assert table[-1].split()[:3] == ["start", "(tuned)", "seed1"]
    dev = tmp_path / "out" / "dev5.conllu"
    assert [name for name, _ in scored] == ["base.ckpt", "tuned.ckpt"] and {gold for _, gold in scored} == {dev}
    whole = (ud_dir / "UD_Wolof-WTB").glob("*-ud-dev.conllu").__next__().read_text(encoding="utf-8")
    assert dev.read_text(encoding="utf-8").count("\n\n") == 5 and whole.startswith(dev.read_text(encoding="utf-8"))


def test_with_no_tree_a_choice_takes_the_parser_nearer_the_facts_on_the_raw_text(ud_dir, tmp_path, monkeypatch,
                                                                                  capsys):
    """No stage reads a tree of the target, so no dev tree may choose: each candidate's expected
    rates on the raw text's first sentences are held against the facts file's bands, and the
    nearer is taken; without --statistics such a pipeline stops in one line before training."""
    from parser import model, statistics

    spec, given = base_tuned_and_a_choice(tmp_path, "relatives", ["relatives", "base"])
    read = []

    def distance(parser, facts, sentences):
        read.append((parser, len(sentences), Path(facts).name, sentences[0].words == sentences[0].words))
        return {"base.ckpt": 0.0650, "relatives.ckpt": 0.0802}[parser]

    monkeypatch.setattr(model.Parser, "load", staticmethod(lambda path: Path(path).name))
    monkeypatch.setattr(statistics, "facts_distance", distance)
    said = []
    (tmp_path / "out").mkdir()
    facts = str(REPO / "configs" / "facts" / "wolof.yaml")
    results = pipeline.run(pipeline.read_pipeline(spec), "UD_Wolof-WTB", tmp_path / "out", str(ud_dir), trees=0,
                           given=given, say=said.append, statistics=facts)
    assert results["start"] == results["base"] and said[-1].startswith("stage 3/3 start: base, the smaller mean distance")
    assert "(0.0650; relatives 0.0802)" in said[-1] and "wo_wtb-ud-train.conllu's first 500 sentences" in said[-1]
    assert read == [(name, pipeline.CHOICE_SENTENCES, "wolof.yaml", True) for name in ("relatives.ckpt", "base.ckpt")]
    monkeypatch.setattr(statistics, "facts_distance", lambda parser, facts, sentences: 0.0)  # every fact inside its band
    results = pipeline.run(pipeline.read_pipeline(spec), "UD_Wolof-WTB", tmp_path / "out", str(ud_dir), trees=0,
                           given=given, say=said.append, statistics=facts)
    assert results["start"] == results["relatives"]  # a tie: the first listed
    spec.write_text(spec.read_text().replace("config: configs/likelihood.yaml, init: base",
                                             "config: [configs/likelihood.yaml, configs/relatives_alone.yaml], init: base"))
    with pytest.raises(SystemExit):
        pipeline.main([str(spec), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", str(tmp_path / "o"),
                       "--given", f"base={given['base']}"])
    error = capsys.readouterr().err.strip()
    assert "give --statistics FILE" in error and "\n" not in error and not (tmp_path / "o").exists()


def test_an_average_stage_averages_each_seeds_parsers_once_and_is_read_as_a_parser(tiny_bert_dir, ud_dir, tmp_path,
                                                                                 capsys):
    """``average: {base: 0.5, tuned: 0.5}`` trains nothing: the stages' parsers of each seed
    averaged weight by weight into ``OUTPUT/<stage>/seed<S>/parser``, a row recorded, reused
    when run again; a dry run prints the ``treeexp average`` line."""
    from parser.averaging import average
    from parser.model import Parser
    from tests.test_averaging import saved_parser

    for seed, name in enumerate(("base", "tuned"), 1):
        saved_parser(tiny_bert_dir, ["root", "obj"], seed, tmp_path / name)
    given = {name: str(tmp_path / name) for name in ("base", "tuned")}
    spec = tmp_path / "p.yaml"
    spec.write_text("""
stages:
  - {name: base, config: configs/likelihood.yaml, data: own}
  - {name: tuned, config: configs/likelihood.yaml, init: base}
  - {name: start, average: {base: 0.25, tuned: 0.75}}
""")
    said, out = [], tmp_path / "out"
    out.mkdir()
    results = pipeline.run(pipeline.read_pipeline(spec), "UD_Wolof-WTB", out, str(ud_dir), given=given, say=said.append)
    folder = out / "start" / "seed1" / "parser"
    assert [r.best for r in results["start"]] == [folder] and said[-1].endswith(f"0.25 x base + 0.75 x tuned -> {folder}")
    expected = average([given["base"], given["tuned"]], [0.25, 0.75]).network.state_dict()
    for key, value in Parser.load(folder).network.state_dict().items():
        assert torch.equal(value, expected[key]), key
    row = pipeline.read_rows(out)[-1]
    assert (row["stage"], row["seed"], row["checkpoint"]) == ("start", 1, str(folder)) and row["cpu_minutes"] >= 0
    assert row["command"] == f"treeexp average {given['base']} {given['tuned']} --weights 0.25 0.75 --output {folder}"
    assert row["commit"] == runs.commit()
    pipeline.run(pipeline.read_pipeline(spec), "UD_Wolof-WTB", out, str(ud_dir), given=given, say=said.append)
    assert said[-1] == f"stage 3/3 start, seed 1: averaged before, {folder}"
    pipeline.main([str(spec), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "o", "--dry-run",
                   "--given", f"base={given['base']}", "--seed", "2"])
    assert stage_lines(capsys.readouterr().out)[-1] == (
        f"treeexp average {given['base']} o/tuned/seed2/likelihood/version_0/checkpoints/best.ckpt "
        "--weights 0.25 0.75 --output o/start/seed2/parser")
    spec.write_text(spec.read_text().replace("{name: tuned, config: configs/likelihood.yaml",
                                             "{name: tuned, config: [configs/likelihood.yaml, configs/relatives_alone.yaml]"))
    pipeline.main([str(spec), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", "o", "--dry-run",
                   "--given", f"base={given['base']}"])
    assert stage_lines(capsys.readouterr().out)[-1].startswith(  # no dev set: the parser it will give is its last
        f"treeexp average {given['base']} o/tuned/seed1/relatives_alone/version_0/checkpoints/last.ckpt ")


def test_a_run_validates_unless_its_last_word_on_limit_val_batches_is_zero():
    """The dry run's reading of a stage's configs and overrides: the last that sets the limit decides."""
    likelihood, alone = Path("configs/likelihood.yaml"), Path("configs/relatives_alone.yaml")
    assert pipeline.validates([likelihood], []) and not pipeline.validates([likelihood, alone], [])
    assert pipeline.validates([alone], ["--trainer.limit_val_batches", "0.5"])
    assert not pipeline.validates([likelihood], ["--seed_everything", "1", "--trainer.limit_val_batches=0"])


def test_a_missing_treebank_or_given_checkpoint_is_one_line(ud_dir, tmp_path, capsys):
    """Wrong options end the pipeline in one line before anything trains, the tokenizer included."""
    path = tmp_path / "p.yaml"
    path.write_text("stages: [{name: a, config: configs/likelihood.yaml}]")
    for extra, message in (([], "no train file"), (["--given", "a=nowhere.ckpt"], "nowhere.ckpt: no such checkpoint"),
                           (["--given", "b=x.ckpt"], "--given names no stage"), (["--until", "b"], "--until b")):
        treebank = "UD_Nope" if not extra else "UD_Wolof-WTB"
        with pytest.raises(SystemExit) as stop:
            pipeline.main([str(path), "--treebank", treebank, "--root", str(ud_dir), "--output", str(tmp_path / "out"),
                           *extra])
        error = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and message in error and "\n" not in error, error
        assert not (tmp_path / "out" / pipeline.TOKENIZER_FILE).exists()  # said before anything was learned


def test_a_two_stage_pipeline_trains_scores_saves_and_is_reused(tiny_bert_dir, ud_dir, tmp_path, monkeypatch, capsys):
    """The command as ``python -m parser.pipeline`` runs it (its main in this process; each
    stage a train.py process of its own, one thread as the tests' other processes)."""
    root = tiny_treebank(ud_dir, tmp_path / "ud")
    path = write_pipeline(tmp_path / "p.yaml", tiny_bert_dir, TWO_STAGES)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(tokenizer, "train_tokenizer", functools.partial(tokenizer.train_tokenizer, epochs=1))
    pipeline.main([str(path), "--treebank", "UD_Tiny", "--root", str(root), "--output", str(tmp_path / "out"), "--test"])
    lines = capsys.readouterr().out.splitlines()
    learned = tmp_path / "out" / "tokenizer.udpipe"  # from every tree of the file: the stages label them all
    assert (tmp_path / "out" / "parser" / "tokenizer.udpipe").read_bytes() == learned.read_bytes()
    assert [line.split(":")[0] for line in lines if re.match(r"stage \d+/\d+ ", line)] == [
        "stage 1/2 teachers, seed 1", "stage 1/2 teachers, seed 1", "stage 1/2 teachers, seed 2",
        "stage 1/2 teachers, seed 2", "stage 2/2 student, seed 1", "stage 2/2 student, seed 1"]
    rows = [line.split() for line in lines if line.startswith(("teachers ", "student "))]
    assert [row[:2] for row in rows] == [["teachers", "seed1"], ["teachers", "seed2"], ["student", "seed1"]]
    assert all(0 <= float(row[3]) <= 100 for row in rows), "\n".join(lines[-6:])  # dev and test LAS of each run
    assert (tmp_path / "out" / "parser" / "parser.json").is_file()
    usage = runs.finished(tmp_path / "out" / "teachers" / "seed1").usage()
    assert usage["cpu_seconds"] > 0 and usage["peak_rss_bytes"] > 100 * 2**20  # a train.py process's own
    student = runs.finished(tmp_path / "out" / "student" / "seed1")
    hparams = (student.directory / "hparams.yaml").read_text()
    assert "teachers/seed1" in hparams and "teachers/seed2" in hparams  # both teachers taught it

    def no_training(*args, **kwargs):
        raise AssertionError("a finished stage trained again")

    monkeypatch.setattr(runs, "launch", no_training)
    again = pipeline.read_pipeline(path)
    pipeline.run(again, "UD_Tiny", tmp_path / "out", str(root), say=lambda line: None)
    assert again.results["student"] == [student]


def test_with_test_each_parser_is_scored_once_and_a_choice_takes_its_runs_scores(tmp_path, monkeypatch):
    scored = []

    def scores(checkpoint, test_file, scratch):
        scored.append((checkpoint, scratch.name))
        return {"uas": 70.0, "las": {"a.ckpt": 60.0, "b.ckpt": 62.0}[checkpoint]}

    monkeypatch.setattr(pipeline, "test_scores", scores)
    rows = [{"stage": "a", "seed": 1, "checkpoint": "a.ckpt", "test": {"uas": 1.0, "las": 1.0}},
            {"stage": "b", "seed": 1, "checkpoint": "b.ckpt"},
            {"stage": "better", "seed": 1, "chosen": "b", "checkpoint": "b.ckpt"}]
    tested = pipeline.tested_rows(rows, tmp_path / "test.conllu", tmp_path)
    assert scored == [("b.ckpt", "b-seed1.conllu")]  # a: scored before; better: b's parser
    assert [row["test"]["las"] for row in tested] == [1.0, 62.0, 62.0] and tested[2]["chosen"] == "b"


def test_a_stopped_stage_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    folder = tmp_path / "out" / "a" / "seed1"
    last = folder / "likelihood" / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    whole_checkpoint(last)  # what a run stopped by a signal leaves
    commands = []

    def fake_train(command, log, environment):
        commands.append(command)
        return 0, {"seconds": 1.0, "cpu_seconds": 0.5, "peak_rss_bytes": 1}

    monkeypatch.setattr(runs, "launch", fake_train)
    run = runs.fit(REPO / "configs" / "likelihood.yaml", ["--seed_everything", "1"], folder)
    assert commands[0][-2:] == ["--ckpt_path", str(last)] and run.directory == last.parents[1]
    assert runs.finished(folder) == run  # marked: the next pipeline run reuses it
    # what trained it (the command without the resume, as typed in the repository) and its costs
    assert run.provenance()["command"].endswith(f"python train.py fit --config {REPO}/configs/likelihood.yaml "
                                                f"--seed_everything 1 --trainer.default_root_dir {folder}")
    assert run.provenance()["commit"] and run.usage()["seconds"] == 1.0
    assert run.provenance()["machine"] == processor()  # whose CPU minutes these are


def test_a_pipeline_writes_a_row_per_stage_and_seed_that_its_report_reads(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("stages: [{name: a, config: configs/likelihood.yaml, seeds: [1, 2]}]")
    output = tmp_path / "out"
    fake_runs(monkeypatch, 40.0)
    pipeline.run(pipeline.read_pipeline(path), "UD_Tiny", output, say=lambda line: None)
    rows = pipeline.read_rows(output)
    assert [(row["stage"], row["seed"]) for row in rows] == [("a", 1), ("a", 2)]
    assert rows[0]["dev"] == {"step": 6, "val/las": 40.0, "val/uas": 50.0}
    assert (rows[0]["cpu_minutes"], rows[0]["peak_rss_mib"]) == (1.0, 300) and rows[0]["commit"]
    assert rows[0]["machine"] == processor()
    assert "python train.py fit --config" in rows[0]["command"] and rows[0]["checkpoint"].endswith("best.ckpt")
    fake_runs(monkeypatch, 45.0)  # seed 2 again, as --seed 2 would: its row replaced, the other kept
    (output / "a" / "seed2" / runs.FINISHED).unlink()
    shutil.rmtree(output / "a" / "seed2" / "likelihood")
    pipeline.run(pipeline.read_pipeline(path, seed=2), "UD_Tiny", output, say=lambda line: None)
    assert [(row["seed"], row["dev"]["val/las"]) for row in pipeline.read_rows(output)] == [(1, 40.0), (2, 45.0)]
    pipeline.main(["report", str(output)])
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["stage", "run", "dev", "LAS", "CPU", "min", "peak", "MiB"]
    assert [line.split() for line in table[1:]] == [["a", "seed1", "40.00", "1.0", "300"], ["a", "seed2", "45.00", "1.0", "300"]]
    with pytest.raises(SystemExit) as stop:
        pipeline.main(["report", str(tmp_path / "nowhere")])
    assert stop.value.code == 2 and "no run of a pipeline has ended" in capsys.readouterr().err


def test_a_second_pipeline_on_the_same_output_refuses_and_a_stale_lock_does_not_block(ud_dir, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("stages: [{name: a, config: configs/likelihood.yaml}]")
    output = tmp_path / "out"
    output.mkdir()
    (output / pipeline.LOCK).write_text(f"{os.getpid()}\n")  # a pipeline that runs
    with pytest.raises(SystemExit) as stop:
        pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", str(output)])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and f"taken by another treeexp pipeline (process {os.getpid()})" in error
    assert "\n" not in error and not (output / "a").exists()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (output / pipeline.LOCK).write_text(f"{gone.pid}\n")  # one whose process died without removing it
    with pipeline.owning(output):
        assert (output / pipeline.LOCK).read_text() == f"{os.getpid()}\n"
    assert list(output.iterdir()) == []  # released, nothing left behind


@pytest.mark.parametrize("damage, named", [
    (lambda seed: (seed / runs.FINISHED).write_text('{"run": "likel'), "finished.json cannot be read"),
    (lambda seed: (seed / "likelihood" / "version_0" / "checkpoints" / "best.ckpt").unlink(),
     "finished, but its run has no likelihood/version_0/checkpoints/best.ckpt"),
    (lambda seed: ((seed / runs.FINISHED).unlink(), (seed / "likelihood/version_0/checkpoints/last.ckpt").write_bytes(
        b"PK\x03\x04 cut")), "last.ckpt is not a whole checkpoint"),
], ids=["marker", "checkpoint gone", "checkpoint cut"])
def test_a_damaged_stage_folder_is_named_in_one_line(ud_dir, tmp_path, monkeypatch, capsys, damage, named):
    path = tmp_path / "p.yaml"
    path.write_text("stages: [{name: a, config: configs/likelihood.yaml}]")
    output = tmp_path / "out"
    fake_runs(monkeypatch, 40.0)
    pipeline.run(pipeline.read_pipeline(path), "UD_Wolof-WTB", output, str(ud_dir), say=lambda line: None)
    damage(output / "a" / "seed1")
    with pytest.raises(SystemExit) as stop:
        pipeline.main([str(path), "--treebank", "UD_Wolof-WTB", "--root", str(ud_dir), "--output", str(output),
                       "--no-tokenizer"])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and named in error and "\n" not in error, error
    assert str(output / "a" / "seed1") in error and "delete" in error


def test_a_pipeline_killed_during_a_stage_and_run_again_ends_with_the_parser_of_one_never_stopped(
        tiny_bert_dir, ud_dir, tmp_path):
    """Real processes: the pipeline is SIGKILLed while its stage trains (its train.py dies with it,
    leaving the checkpoint of its last validation), then run again: the stage resumes and the final
    parser is byte for byte the one of a pipeline that was never stopped."""
    root = tiny_treebank(ud_dir, tmp_path / "ud")
    path = write_pipeline(tmp_path / "p.yaml", tiny_bert_dir, """
stages:
  - name: a
    config: configs/likelihood.yaml
    args: SMALL
""".replace("'2', --data.batch_tokens", "'4', --trainer.val_check_interval, '2', --data.batch_tokens"))
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}

    def pipeline_process(output: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "parser.pipeline", str(path), "--treebank", "UD_Tiny", "--root",
                                 str(root), "--output", str(output), "--no-tokenizer"], cwd=REPO, env=environment,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    never_stopped = pipeline_process(tmp_path / "whole")
    killed = pipeline_process(tmp_path / "killed")
    checkpoints = tmp_path / "killed" / "a" / "seed1" / "likelihood" / "version_0" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (checkpoints / "last.ckpt").is_file():  # its first validation (step 2 of 4) has been saved
        assert killed.poll() is None, killed.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint in 300 s"
        time.sleep(0.05)
    killed.kill()
    killed.wait()
    time.sleep(2)
    assert not [line for line in Path("/proc").glob("[0-9]*/cmdline") if str(tmp_path / "killed") in
                line.read_bytes().decode(errors="replace")], "a train.py outlived its pipeline"
    assert not (tmp_path / "killed" / "a" / "seed1" / runs.FINISHED).exists()
    again = pipeline_process(tmp_path / "killed")
    assert again.wait(timeout=300) == 0 and never_stopped.wait(timeout=300) == 0, (
        again.stderr.read() + never_stopped.stderr.read())
    assert "Restor" in (tmp_path / "killed" / "a" / "seed1" / "train.log").read_text()  # it resumed, not began again
    weights = [(tmp_path / name / "parser" / "model.safetensors").read_bytes() for name in ("whole", "killed")]
    assert weights[0] == weights[1]
