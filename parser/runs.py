"""One way to run a run: ``python train.py fit`` in a process of its own, in a folder of its own,
and what it leaves there (:class:`Run`). A folder's run that finished is reused; one that was
stopped resumes from its ``last.ckpt``. Every shipped recipe has one name (``RECIPES``), the
name ``train.py --objective`` and the benchmarks use; every shipped config, rules or pipeline
file is found by its name from any folder, in a checkout as in an install (:func:`config_path`)."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path

import yaml

from objectives.conventions import ConfigurationError

from parser.cli import Failure
from parser.training.callbacks import MONITOR
from parser.training.precision import processor

TRAIN = Path(__file__).resolve().parents[1] / "train.py"
REPOSITORY = TRAIN.parent
# The shipped configs, rules and pipelines: a checkout's own configs/ (run from it or installed
# editable, even beside another checkout's install; setuptools' editable finder does not import
# parser.configs, a folder without __init__.py), else the package data it ships as (pyproject.toml)
CONFIGS = REPOSITORY / "configs" if (REPOSITORY / "pyproject.toml").is_file() else resources.files("parser.configs")
FINISHED = "finished.json"  # written in a run's folder when train.py ended well
# A shipped recipe's one name -> its config in configs/ (train.py --objective NAME, the benchmarks)
RECIPES = {
    "likelihood": "likelihood.yaml",  # the full-data EWT recipe
    "likelihood_low_resource": "likelihood_low_resource.yaml",  # the same on K labeled sentences
    "risk": "risk.yaml",
    "entropy": "entropy.yaml",
    "kl": "distill.yaml",  # needs --model.teacher, as the next two
    "sample_distill": "sample_distill.yaml",
    "ge_teacher": "ge_teacher.yaml",
    "ge": "ge.yaml",
    "combined": "combined.yaml",
    "small_treebank": "small_treebank.yaml",
}


class RunFailed(Failure):
    """train.py ended with an error; the message names its log."""


class DamagedRun(Failure):
    """A run's folder holds what no run leaves (a marker that cannot be read, a run without its
    checkpoint, a checkpoint that is not whole); the message names it and what to delete."""


def write_whole(path: Path, text: str) -> Path:
    """``text`` into ``path``, whole or not at all: written beside it, then renamed over it (a
    process killed during the write leaves the file as it was, or no file)."""
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
    return path


@dataclass(frozen=True)
class Run:
    """A fit's version folder (``<folder>/<config name>/version_N``) and what it holds; or a
    parser trained elsewhere (``given``: a ``.ckpt`` or a ``Parser.save`` directory)."""

    directory: Path
    given: Path | None = None

    @classmethod
    def of_checkpoint(cls, path: str | Path) -> Run:
        """A saved parser as a run: its run's folder when it is a run's checkpoint."""
        path = Path(path)
        folder = path.parents[1] if path.parent.name == "checkpoints" else path
        return cls(folder, path)

    @property
    def best(self) -> Path:
        """The parser it gives: its best dev checkpoint, or the last of a run that never validated
        (no dev trees: a fixed number of steps)."""
        if self.given:
            return self.given
        best = self.directory / "checkpoints" / "best.ckpt"
        return self.last if not best.is_file() and self.last.is_file() and not self.dev() else best

    @property
    def last(self) -> Path:
        return self.directory / "checkpoints" / "last.ckpt"

    def dev(self) -> dict[str, float]:
        """The validation of best dev LAS (``val/...`` metrics and ``step``); {} before any."""
        path = self.directory / "metrics.csv"
        if not path.is_file():
            return {}
        with open(path, newline="") as lines:
            rows = [row for row in csv.DictReader(lines) if row.get(MONITOR)]
        if not rows:
            return {}
        best = max(rows, key=lambda row: float(row[MONITOR]))
        return {"step": int(best["step"]), **{k: float(v) for k, v in best.items() if k.startswith("val/") and v}}

    def config(self) -> dict:
        """The run's whole configuration (its ``config.yaml``, defaults filled in)."""
        return yaml.safe_load((self.directory / "config.yaml").read_text(encoding="utf-8"))

    def steps(self) -> int:
        """Optimizer steps the run logged (0 before any)."""
        path = self.directory / "metrics.csv"
        if not path.is_file():
            return 0
        with open(path, newline="") as lines:
            return max((int(row["step"]) for row in csv.DictReader(lines) if row.get("step")), default=-1) + 1

    def provenance(self) -> dict:
        """What trained it, as :func:`fit` recorded it (:func:`provenance_of`: ``commit``,
        ``command``, the shell line from the repository, ``date``, ``machine``); {} for a run
        :func:`fit` did not train."""
        return _marker(self).get("provenance", {})

    def usage(self) -> dict:
        """The costs of the train.py process that finished it: ``seconds`` (wall clock),
        ``cpu_seconds`` and ``peak_rss_bytes``; {} for a run :func:`fit` did not train."""
        return _marker(self).get("usage", {})


def _marker(run: Run) -> dict:
    """The ``finished.json`` of a run's folder ({} if none)."""
    path = run.directory.parents[1] / FINISHED if len(run.directory.parents) > 1 else None
    return json.loads(path.read_text()) if path and path.is_file() else {}


def recipe(name: str) -> Path:
    """The config of a recipe of ``RECIPES``, as :func:`config_path` finds it."""
    if name not in RECIPES:
        raise ConfigurationError(f"no recipe {name!r} (known: {', '.join(RECIPES)})")
    return config_path(f"configs/{RECIPES[name]}")


def config_path(name: str | Path) -> Path:
    """A config, rules or pipeline file: ``name`` where it is a file (a user's own wins), else the
    shipped file of that name (``configs/ge.yaml`` or ``ge.yaml``, ``configs/rules/naseem_ud.yaml``)
    from any folder, else ``name`` as given (for its error to name)."""
    path = Path(name)
    if path.is_file() or path.is_absolute():
        return path
    shipped = CONFIGS
    for part in path.parts[1:] if path.parts[:1] == ("configs",) else path.parts:
        shipped = shipped / part
    return Path(shipped) if shipped.is_file() else path


def commit() -> str:
    """``git rev-parse HEAD`` of the repository, with ``+dirty`` when its work tree has changes
    not committed (tracked or untracked files); ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True,
                              check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain"], cwd=REPOSITORY, capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if status.strip() else "")


def shell_line(command: Sequence[str], environment: dict[str, str] | None = None) -> str:
    """A ``python ...`` command as one types it in the repository: ``python train.py fit ...``
    for :func:`fit_command`'s, prefixed with the thread count when ``OMP_NUM_THREADS`` is set."""
    threads = (os.environ if environment is None else environment).get("OMP_NUM_THREADS")
    arguments = list(command[1:])
    if arguments and arguments[0] == str(TRAIN):
        arguments[0] = "train.py"
    return (f"OMP_NUM_THREADS={threads} " if threads else "") + shlex.join(["python", *arguments])


def provenance_of(command: str) -> dict:
    """What a result records of the ``command`` (a shell line) that made it, taken before it runs so
    that the tree cannot change first: ``commit``, ``command``, ``date`` and ``machine``, the
    processor whose CPU minutes the result reports (:func:`~parser.training.precision.processor`)."""
    return {"commit": commit(), "command": command, "date": date.today().isoformat(), "machine": processor()}


def fit_command(config: str | Path, overrides: Sequence[str], folder: Path, resume: Path | None = None) -> list[str]:
    """The ``train.py fit`` command of a run in ``folder`` (resuming from ``resume``)."""
    return [sys.executable, str(TRAIN), "fit", "--config", str(config), *overrides,
            "--trainer.default_root_dir", str(folder), *(["--ckpt_path", str(resume)] if resume else [])]


def finished(folder: Path) -> Run | None:
    """The run that finished in ``folder``, if one did; DamagedRun where its marker cannot be
    read or its run holds no checkpoint."""
    marker = folder / FINISHED
    if not marker.is_file():
        return None
    try:
        run = Run(folder / json.loads(marker.read_text(encoding="utf-8"))["run"])
    except (ValueError, KeyError, TypeError) as error:
        raise DamagedRun(f"{marker} cannot be read ({error}): delete {folder} to train this run again") from None
    if not run.best.is_file():
        raise DamagedRun(f"{folder} finished, but its run has no {run.best.relative_to(folder)}: "
                         f"delete {folder} to train this run again")
    return run


def stopped(folder: Path) -> Run | None:
    """The newest run in ``folder`` that left a ``last.ckpt`` to resume from, if any;
    DamagedRun where that file is not a whole checkpoint (a zip archive, as torch writes them)."""
    runs = sorted(folder.glob("*/version_*/checkpoints/last.ckpt"), key=lambda p: int(p.parents[1].name.split("_")[1]))
    if runs and not zipfile.is_zipfile(runs[-1]):
        raise DamagedRun(f"{runs[-1]} is not a whole checkpoint: delete {runs[-1].parents[1]} "
                         "to train this run from its start")
    return Run(runs[-1].parents[1]) if runs else None


# Linux counts the memory a process had before its exec in its peak RSS, so a command forked from
# this process (torch loaded: hundreds of MiB) would report at least that much: it runs as the
# child of a bare ``python -S`` (about 10 MiB) that writes the command's own usage to a file.
# On Linux each of the two is killed when its parent dies (PR_SET_PDEATHSIG): a pipeline killed
# leaves no train.py behind writing into a folder that the pipeline run again resumes.
LAUNCHER = """import os, sys
def die_with_parent(parent):
    if sys.platform == "linux":
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() != parent:  # the parent died before this process asked
            os._exit(137)
die_with_parent(int(sys.argv[1]))
launcher = os.getpid()
pid = os.fork()
if pid == 0:
    try:
        die_with_parent(launcher)
        os.execvp(sys.argv[3], sys.argv[3:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[2], "w") as report:
    report.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def launch(command: Sequence[str], log: Path, environment: dict[str, str], cwd: Path | None = None) -> tuple[int, dict]:
    """Run ``command`` (in ``cwd``) with its output appended to ``log``; its exit status (128 + N when
    signal N stopped it) and its own costs, unrounded (:meth:`Run.usage`: the CPU seconds and peak
    RSS of it and the processes it waited for)."""
    report = log.with_name(f"{log.name}.usage")
    report.unlink(missing_ok=True)
    with open(log, "a") as output:
        start = time.perf_counter()
        code = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(os.getpid()), str(report), *command], stdout=output,
                              stderr=subprocess.STDOUT, env=environment, cwd=cwd).returncode
        seconds = time.perf_counter() - start
    peak_kib, cpu = report.read_text().split() if report.is_file() else ("0", "0")
    report.unlink(missing_ok=True)
    return code, {"seconds": seconds, "cpu_seconds": float(cpu), "peak_rss_bytes": int(peak_kib) * 1024}


def failure(code: int, log: Path) -> str:
    """Why a run ended with exit status ``code``: the signal that stopped it (a negative status,
    or 128 + N as a shell and train.py's own handler report it), else its log's last line (the
    last redraw of a progress bar, whose redraws are parted by carriage returns, not a piece of one)."""
    number = -code if code < 0 else code - 128 if code > 128 else None
    if number is not None and number in signal.Signals._value2member_map_:
        return f"was stopped by {signal.Signals(number).name} (exit status {code}): run it again to resume"
    lines = [line for line in log.read_text(errors="replace").replace("\r", "\n").splitlines() if line.strip()]
    return f"exited with {code} ({lines[-1].strip() if lines else 'no output'})"


def fit(config: str | Path, overrides: Sequence[str], folder: str | Path, log: Path | None = None,
        threads: int | None = None) -> Run:
    """Train in ``folder`` unless a run finished there (then that run); a run stopped there
    goes on from its ``last.ckpt``. ``train.py``'s output goes to ``log`` (default
    ``folder/train.log``, appended); RunFailed names it when the run fails. The finished run
    records its provenance (taken as it starts) and its costs (:meth:`Run.provenance`, :meth:`Run.usage`)."""
    folder = Path(folder)
    if (done := finished(folder)) is not None:
        return done
    if not Path(config).is_file():
        raise ConfigurationError(f"no config file {config}")
    folder.mkdir(parents=True, exist_ok=True)
    previous = stopped(folder)
    log = log or folder / "train.log"
    environment = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    provenance = provenance_of(shell_line(fit_command(config, overrides, folder), environment))
    code, usage = launch(fit_command(config, overrides, folder, previous.last if previous else None), log, environment)
    usage = {**usage, "seconds": round(usage["seconds"], 1), "cpu_seconds": round(usage["cpu_seconds"], 1)}
    if code != 0:
        raise RunFailed(f"train.py {failure(code, log)}; its log: {log}")
    run = stopped(folder)
    if run is None:
        raise RunFailed(f"train.py wrote no checkpoint in {folder}; its log: {log}")
    write_whole(folder / FINISHED, json.dumps({"run": str(run.directory.relative_to(folder)), "dev": run.dev(),
                                               "provenance": provenance, "usage": usage}) + "\n")
    return run


def mean_dev_las(runs: Sequence[Run]) -> float:
    """The mean best dev LAS of runs (NaN if none validated)."""
    values = [run.dev().get(MONITOR) for run in runs]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else math.nan
