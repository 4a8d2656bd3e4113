"""``treeexp COMMAND``: the installed command dispatches to each tool."""

import subprocess
import sys

import pytest

from parser import main as entry


def run(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["treeexp", *argv])
    entry.main()


def test_usage_lists_every_command(monkeypatch, capsys):
    run(monkeypatch)
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in entry.COMMANDS)


def test_an_unknown_command_is_one_line(monkeypatch, capsys):
    with pytest.raises(SystemExit) as stop:
        run(monkeypatch, "trian")
    assert stop.value.code == 2 and capsys.readouterr().err.startswith("error: no command 'trian'")


def test_commands_reach_their_tools(monkeypatch, capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        run(monkeypatch, "train", "--objective", "gee")  # train.py's own check
    assert stop.value.code == 2 and "--objective" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        run(monkeypatch, "evaluate", str(tmp_path / "gold.conllu"), str(tmp_path / "pred.conllu"))
    assert stop.value.code == 2 and "gold.conllu" in capsys.readouterr().err


def test_the_installed_script_runs_from_any_folder(tmp_path):
    done = subprocess.run(["treeexp", "pipeline", "--help"], cwd=tmp_path, capture_output=True, text=True)
    if done.returncode == 127 or "not found" in done.stderr:
        pytest.skip("the project is not installed with its scripts")
    assert done.returncode == 0 and "--treebank" in done.stdout
