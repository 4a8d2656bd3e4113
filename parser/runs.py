"""One way to run a run: ``python train.py fit`` in a process of its own, in a folder of its own,
and what it leaves there (:class:`Run`). A folder's run that finished is reused; one that was
stopped resumes from its ``last.ckpt``."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from objectives.conventions import ConfigurationError

from parser.training.callbacks import MONITOR

TRAIN = Path(__file__).resolve().parents[1] / "train.py"
FINISHED = "finished.json"  # written in a run's folder when train.py ended well


class RunFailed(RuntimeError):
    """train.py ended with an error; the message names its log."""


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
        return self.given or self.directory / "checkpoints" / "best.ckpt"

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


def fit_command(config: str | Path, overrides: Sequence[str], folder: Path, resume: Path | None = None) -> list[str]:
    """The ``train.py fit`` command of a run in ``folder`` (resuming from ``resume``)."""
    return [sys.executable, str(TRAIN), "fit", "--config", str(config), *overrides,
            "--trainer.default_root_dir", str(folder), *(["--ckpt_path", str(resume)] if resume else [])]


def finished(folder: Path) -> Run | None:
    """The run that finished in ``folder``, if one did."""
    marker = folder / FINISHED
    return Run(folder / json.loads(marker.read_text())["run"]) if marker.is_file() else None


def stopped(folder: Path) -> Run | None:
    """The newest run in ``folder`` that left a ``last.ckpt`` to resume from, if any."""
    runs = sorted(folder.glob("*/version_*/checkpoints/last.ckpt"), key=lambda p: int(p.parents[1].name.split("_")[1]))
    return Run(runs[-1].parents[1]) if runs else None


def fit(config: str | Path, overrides: Sequence[str], folder: str | Path, log: Path | None = None,
        threads: int | None = None) -> Run:
    """Train in ``folder`` unless a run finished there (then that run); a run stopped there
    goes on from its ``last.ckpt``. ``train.py``'s output goes to ``log`` (default
    ``folder/train.log``, appended); RunFailed names it when the run fails."""
    folder = Path(folder)
    if (done := finished(folder)) is not None:
        return done
    if not Path(config).is_file():
        raise ConfigurationError(f"no config file {config}")
    folder.mkdir(parents=True, exist_ok=True)
    previous = stopped(folder)
    log = log or folder / "train.log"
    environment = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    start = time.monotonic()
    command = fit_command(config, overrides, folder, previous.last if previous else None)
    with open(log, "a") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)
        _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        raise RunFailed(f"train.py exited with {code} ({tail[0] if tail else 'no output'}); its log: {log}")
    run = stopped(folder)
    if run is None:
        raise RunFailed(f"train.py wrote no checkpoint in {folder}; its log: {log}")
    cost = {"wall_minutes": round((time.monotonic() - start) / 60, 2),
            "cpu_minutes": round((usage.ru_utime + usage.ru_stime) / 60, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}  # this process, not any it resumed
    command = shlex.join(["python", "train.py", *command[2:]])
    (folder / FINISHED).write_text(json.dumps({"run": str(run.directory.relative_to(folder)), "dev": run.dev(),
                                               "command": command, **cost}) + "\n")
    return run


def cost(folder: Path) -> dict[str, float]:
    """What a finished run in ``folder`` cost: wall and CPU minutes, peak RSS (MiB); {} if unknown."""
    marker = folder / FINISHED
    if not marker.is_file():
        return {}
    return {k: v for k, v in json.loads(marker.read_text()).items() if k in ("wall_minutes", "cpu_minutes", "peak_rss_mib")}


def mean_dev_las(runs: Sequence[Run]) -> float:
    """The mean best dev LAS of runs (NaN if none validated)."""
    values = [run.dev().get(MONITOR) for run in runs]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else math.nan
