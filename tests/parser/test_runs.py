"""parser.runs: the recipes' one table, a run's command line, process costs and folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

import train
from objectives.conventions import ConfigurationError
from parser import runs


def test_every_recipe_has_one_name_and_a_shipped_config():
    assert train.OBJECTIVE_CONFIGS is runs.RECIPES  # train.py --objective NAME takes the same names
    assert len(set(runs.RECIPES.values())) == len(runs.RECIPES)  # one name per config
    for name, file in runs.RECIPES.items():
        assert runs.recipe(name).is_file() and runs.recipe(name).name == file
    with pytest.raises(ConfigurationError, match="no recipe 'distill'"):
        runs.recipe("distill")


def test_a_shipped_file_is_found_by_name_from_any_folder_and_a_users_own_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, shipped in (("configs/ge.yaml", "ge.yaml"), ("ge.yaml", "ge.yaml"),
                          ("configs/rules/naseem_ud.yaml", "rules/naseem_ud.yaml")):
        assert runs.config_path(name) == runs.CONFIGS / shipped and runs.config_path(name).is_file()
    assert runs.config_path("configs/nope.yaml") == Path("configs/nope.yaml")  # as given, for its error to name
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ge.yaml").write_text("model: {}\n")
    assert runs.config_path("configs/ge.yaml") == Path("configs/ge.yaml")
    assert runs.recipe("ge") == Path("configs/ge.yaml")


def test_a_fit_command_is_written_as_typed_in_the_repository(tmp_path):
    command = runs.fit_command("configs/ge.yaml", ["--model.encoder", "my encoder", "--seed_everything", "2"], tmp_path)
    assert runs.shell_line(command, {"OMP_NUM_THREADS": "1"}) == (
        "OMP_NUM_THREADS=1 python train.py fit --config configs/ge.yaml --model.encoder 'my encoder' "
        f"--seed_everything 2 --trainer.default_root_dir {tmp_path}")
    assert runs.shell_line([sys.executable, "-m", "benchmarks.gains"], {}) == "python -m benchmarks.gains"


def test_launch_appends_the_output_and_measures_the_process(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("before\n")
    code, usage = runs.launch([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], log, {})
    assert code == 3 and log.read_text() == "before\nhello\n"
    assert usage["seconds"] >= 0 and usage["cpu_seconds"] >= 0 and usage["peak_rss_bytes"] > 1_000_000


def test_a_run_folder_tells_its_config_and_steps(tmp_path):
    run = runs.Run(tmp_path / "likelihood" / "version_0")
    assert run.steps() == 0 and run.dev() == {} and run.provenance() == {} and run.usage() == {}
    run.directory.mkdir(parents=True)
    (run.directory / "config.yaml").write_text(yaml.safe_dump({"trainer": {"max_steps": 9}}))
    (run.directory / "metrics.csv").write_text("step,val/las,train/loss\n4,50.0,\n4,,1.0\n8,,0.5\n")
    assert run.config()["trainer"]["max_steps"] == 9 and run.steps() == 9 and run.dev() == {"step": 4, "val/las": 50.0}


def test_a_failed_run_says_the_signal_that_stopped_it_or_its_last_line(tmp_path):
    from parser.runs import failure
    log = tmp_path / "train.log"
    log.write_text("Epoch 0:  50%|#####     | 2/4\rEpoch 0:  75%|#######   | 3/4\nerror: no file x.conllu\n")
    assert failure(2, log) == "exited with 2 (error: no file x.conllu)"
    assert failure(143, log).replace("143", "-15") == failure(-15, log)
    assert "SIGTERM" in failure(143, log) and "SIGKILL" in failure(-9, log) and "resume" in failure(-9, log)
    log.write_text("x\rEpoch 0:  75%|#######   | 3/4")
    assert failure(1, log) == "exited with 1 (Epoch 0:  75%|#######   | 3/4)"


def test_a_run_that_never_validated_gives_its_last_checkpoint(tmp_path):
    """No dev trees (a fixed number of steps): the parser a run gives is its last checkpoint."""
    run = runs.Run(tmp_path / "run")
    (run.directory / "checkpoints").mkdir(parents=True)
    run.last.write_bytes(b"")
    assert run.best == run.last
    (run.directory / "checkpoints" / "best.ckpt").write_bytes(b"")
    assert run.best == run.directory / "checkpoints" / "best.ckpt"


def test_a_failed_child_run_is_one_line_from_any_command(capsys):
    """RunFailed (a child train.py that failed, its log named) ends a command in one line, exit 1."""
    from parser.cli import run_reporting_errors

    def fails():
        raise runs.RunFailed("train.py exited with 2 (error: no file x.conllu); its log: runs/a/train.log")

    with pytest.raises(SystemExit) as stop:
        run_reporting_errors(fails)
    assert stop.value.code == 1
    assert capsys.readouterr().err == "error: train.py exited with 2 (error: no file x.conllu); its log: runs/a/train.log\n"
