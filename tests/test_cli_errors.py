"""Bad input ends every command with one ``error:`` line naming the file (and line), exit
status 2 and no traceback; ``--debug`` shows the traceback."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("TREEEXP_DEBUG", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    good = tmp_path / "good.conllu"
    good.write_text(SENTENCE, encoding="utf-8")
    latin1 = tmp_path / "latin1.conllu"
    latin1.write_bytes(SENTENCE.replace("Hi", "Caf\u00e9").encode("latin-1"))
    gz = tmp_path / "packed.conllu"
    gz.write_bytes(gzip.compress(SENTENCE.encode()))
    other = tmp_path / "other.conllu"
    other.write_text(SENTENCE.replace("Hi", "Ho"), encoding="utf-8")
    not_ckpt = tmp_path / "notes.ckpt"
    not_ckpt.write_text("no model here\n")
    return {"good": good, "latin1": latin1, "gz": gz, "other": other, "not_ckpt": not_ckpt}


def test_evaluate_reports_bad_files_in_one_line(files, tmp_path):
    _one_error_line(_run("-m", "parser.evaluate", str(files["good"]), str(files["latin1"]), cwd=tmp_path),
                    "latin1.conllu:1", "not UTF-8")
    _one_error_line(_run("-m", "parser.evaluate", str(files["good"]), str(files["gz"]), cwd=tmp_path),
                    "packed.conllu:1", "gzip")
    _one_error_line(_run("-m", "parser.evaluate", str(files["good"]), str(files["other"]), cwd=tmp_path),
                    "other.conllu:1: word 1 is 'Ho'", "'Hi'")
    _one_error_line(_run("-m", "parser.evaluate", str(files["good"]), str(tmp_path / "missing.conllu"), cwd=tmp_path),
                    "missing.conllu")
    debug = _run("-m", "parser.evaluate", str(files["good"]), str(files["latin1"]), "--debug", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_predict_checks_inputs_before_loading_a_model(files, tmp_path):
    _one_error_line(_run("-m", "parser.predict", str(files["not_ckpt"]), str(files["good"]), "out.conllu", cwd=tmp_path),
                    "notes.ckpt: not a checkpoint")
    _one_error_line(_run("-m", "parser.predict", str(tmp_path / "missing.ckpt"), str(files["good"]), "out.conllu",
                         cwd=tmp_path), "missing.ckpt")


def test_train_reports_a_missing_file_in_one_line(tmp_path):
    result = _run(str(REPO / "train.py"), "fit", "--config", str(REPO / "configs/likelihood.yaml"),
                  "--data.treebank", "null", "--data.train", str(tmp_path / "nope.conllu"), cwd=tmp_path)
    _one_error_line(result, "nope.conllu")


def test_train_reports_a_setting_lightning_rejects_in_one_line(tmp_path):
    result = _run(str(REPO / "train.py"), "fit", "--config", str(REPO / "configs/likelihood.yaml"),
                  "--trainer.fast_dev_run", "-1", cwd=tmp_path)
    _one_error_line(result, "fast_dev_run=-1")
