"""``treeexp COMMAND``: the installed command dispatches to each tool."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parser import main as entry

ROOT = Path(__file__).resolve().parents[1]


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


def test_a_reader_that_stops_early_gets_no_traceback():
    """``treeexp ... | head``: output into a pipe nobody reads any more ends quietly (exit 1), as Unix tools do."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-m", "parser.main", "--help"], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == ""
