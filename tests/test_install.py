"""The installed product: a wheel (not an editable checkout) in a fresh virtual environment, used
by command name from a folder that is not the repository; configs, rules and pipelines by name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from setuptools import find_packages

from tests.test_train import _slice

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "train.py", "parser", "objectives", "configs")  # what the wheel is built from


def environment(venv: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without the repository on the import path, the virtual
    environment's commands first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "OMP_NUM_THREADS": "1", **extra}


def new_environment(venv: Path) -> str:
    """A fresh virtual environment (no pip of its own: ensurepip takes longer than the rest of the
    setup) that imports what this interpreter imports, torch and the rest, but not the checkout:
    ``--system-site-packages`` alone would not, where this interpreter is itself a virtual
    environment. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    checkout = {REPO, REPO / "tests"}  # its import roots; a virtual environment inside it (.venv) is inherited
    inherited = [p for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() not in checkout]
    (site_packages / "inherited.pth").write_text("\n".join(inherited) + "\n", encoding="utf-8")
    return str(venv / "bin" / "python")


def build_wheel(tmp_path: Path) -> Path:
    """The project's wheel, built from a copy of its sources (no build folder left in the checkout)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, env=environment())
    return next((tmp_path / "dist").glob("treeexp-*.whl"))


def test_every_package_of_the_sources_is_in_the_wheel():
    """pyproject.toml lists its packages (parser.configs is mapped from configs/): none is left out."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    packages = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    assert set(find_packages(str(REPO), include=["parser*", "objectives*"])) <= set(packages)


@pytest.mark.slow
def test_the_installed_wheel_trains_runs_a_pipeline_and_parses_from_any_folder(ud_dir, tmp_path):
    """``pip install`` of the wheel into a fresh environment (torch and the rest from this
    interpreter's), then from an empty folder: ``treeexp train --objective ge`` for 2 steps, the
    shipped pipeline by name, ``treeexp parse`` with the checkpoint, and the parser from Python
    (the wheel's modules, not the checkout's)."""
    venv = tmp_path / "venv"
    python = new_environment(venv)  # this interpreter's pip, run by the environment's python, installs into it
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", str(build_wheel(tmp_path))],
                   check=True, env=environment())
    data = _slice(ud_dir, tmp_path, 24)
    user = tmp_path / "user"
    user.mkdir()
    env = environment(venv, UD_DIR=str(ud_dir.resolve()), TREEEXP_DEBUG="1")

    def treeexp(*args: str) -> str:
        done = subprocess.run(["treeexp", *args], cwd=user, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    treeexp("train", "--objective", "ge", "--trainer.max_steps", "2", "--data.train", str(data), "--data.dev", str(data),
            "--data.labeled_size", "8", "--data.batch_tokens", "300", "--trainer.limit_val_batches", "1", "--model.heads.arc_size", "32",
            "--model.heads.label_size", "16", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false")
    best = user / "runs" / "ge" / "version_0" / "checkpoints" / "best.ckpt"
    assert best.is_file()

    commands = treeexp("pipeline", "new_language", "--treebank", "UD_Wolof-WTB", "--output", "wolof", "--dry-run")
    shipped = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "parser" / "configs"
    assert f"--config {shipped / 'likelihood_low_resource.yaml'}" in commands
    assert f"--config {shipped / 'low_resource_multilingual.yaml'}" in commands

    treeexp("parse", str(best), str(data), "parsed.conllu", "--device", "cpu")
    assert (user / "parsed.conllu").read_text(encoding="utf-8").count("\n\n") == 24

    parse = subprocess.run([python, "-c", f"import parser, train; from parser.model import Parser; "
                            f"heads = Parser.load({str(best)!r}).parse([['A', 'small', 'test', '.']])[0].heads; "
                            f"print(parser.__file__, train.__file__, len(heads))"],
                           cwd=user, env=env, capture_output=True, text=True)
    assert parse.returncode == 0, parse.stderr[-3000:]
    *where, words = parse.stdout.splitlines()[-1].split()
    assert words == "4" and len(where) == 2 and all(Path(path).is_relative_to(venv) for path in where), where  # the wheel's
