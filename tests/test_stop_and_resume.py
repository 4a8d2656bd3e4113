"""A fit stopped by SIGTERM or SIGINT writes last.ckpt at the end of its step and says
where; one killed by SIGKILL leaves the last.ckpt of its timed saves, also when killed while
writing the next one; a full disk during a save ends the run in one line and leaves the
previous last.ckpt. Each resumes (``--ckpt_path``) to the same parameters as the run that
was never stopped, bit for bit."""

from __future__ import annotations

import builtins
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback

import train

REPO = Path(train.__file__).resolve().parent
STEPS = 6  # validation at steps 3 and 6


class PauseAfter(Callback):
    """After training step ``step``: write ``marker`` and wait until the file ``go`` exists
    (the test sends its signal in between), or with ``kill`` end the process by SIGKILL
    (with ``rank``, only that process of several)."""

    def __init__(self, step: int, marker: str, go: str = "", kill: bool = False, rank: int | None = None):
        self.step, self.marker, self.go, self.kill, self.rank = step, Path(marker), Path(go), kill, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or self.rank not in (None, trainer.global_rank):
            return
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        self.marker.touch()
        deadline = time.monotonic() + 120
        while not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class FailCheckpointWrites(Callback):
    """From training step ``step`` on, writing a checkpoint file fails after ``after_bytes``
    bytes: with ``fault`` "kill" the process ends by SIGKILL, with "full" the write raises
    ENOSPC as on a full disk."""

    def __init__(self, step: int, fault: str = "kill", after_bytes: int = 100_000):
        self.step, self.fault, self.after_bytes = step, fault, after_bytes

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            real_open = builtins.open

            def failing_open(file, mode="r", *args, **kwargs):
                opened = real_open(file, mode, *args, **kwargs)
                return _FailingFile(opened, self) if "w" in mode and ".ckpt" in os.fspath(file) else opened

            builtins.open = failing_open


class _FailingFile:
    def __init__(self, file, fault: FailCheckpointWrites):
        self.file, self.fault, self.written = file, fault, 0

    def write(self, data) -> int:
        room = self.fault.after_bytes - self.written
        if len(data) > room:
            self.file.write(bytes(data)[:room])
            self.file.flush()
            if self.fault.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


@pytest.fixture(scope="module")
def small(ud_dir, tmp_path_factory) -> Path:
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:30]
    path = tmp_path_factory.mktemp("stop") / "small.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def _args(tiny_bert_dir: Path, small: Path, root: Path) -> list[str]:
    return ["fit", "--model.encoder", str(tiny_bert_dir), "--model.heads.arc_size", "32", "--model.heads.label_size", "16",
            "--data.train", str(small), "--data.dev", str(small), "--data.batch_tokens", "300",
            "--trainer.max_steps", str(STEPS), "--trainer.max_epochs", "-1", "--trainer.val_check_interval", "3",
            "--trainer.check_val_every_n_epoch", "null", "--trainer.limit_val_batches", "2",
            "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(root)]


def _parameters(cli) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in cli.model.state_dict().items()}


@pytest.fixture(scope="module")
def straight(tiny_bert_dir, small) -> dict[str, torch.Tensor]:
    """The final parameters of the run nobody stopped."""
    return _parameters(train.main([*_args(tiny_bert_dir, small, small.parent / "straight"),
                                   "--trainer.enable_progress_bar", "false"]))


def _start(tiny_bert_dir: Path, small: Path, root: Path, *extra: str) -> subprocess.Popen:
    # the same intra-op threads as the runs in this process: a sum over other threads rounds differently
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(REPO / "train.py"), *_args(tiny_bert_dir, small, root), *extra],
                            cwd=root.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _resume(tiny_bert_dir: Path, small: Path, root: Path, checkpoint: Path) -> dict[str, torch.Tensor]:
    cli = train.main([*_args(tiny_bert_dir, small, root), "--ckpt_path", str(checkpoint),
                      "--trainer.enable_progress_bar", "false"])
    assert cli.trainer.global_step == STEPS
    return _parameters(cli)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_last_ckpt_that_resumes_exactly(signum, tiny_bert_dir, small, straight, tmp_path):
    root, marker, go = tmp_path / "stopped", tmp_path / "paused", tmp_path / "go"
    process = _start(tiny_bert_dir, small, root, "--trainer.callbacks+=tests.test_stop_and_resume.PauseAfter",
                     "--trainer.callbacks.step=4", f"--trainer.callbacks.marker={marker}", f"--trainer.callbacks.go={go}")
    deadline = time.monotonic() + 300
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), process.communicate()[0][-3000:]
    process.send_signal(signum)
    go.touch()
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 128 + signum, output[-3000:]
    last = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    assert f"stopped by {signal.Signals(signum).name} after 4 steps" in output and str(last) in output, output[-3000:]
    assert torch.load(last, weights_only=False)["global_step"] == 4
    resumed = _resume(tiny_bert_dir, small, tmp_path / "resumed", last)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight), "the resumed run differs"


def test_a_killed_run_resumes_exactly_from_its_last_timed_checkpoint(tiny_bert_dir, small, straight, tmp_path):
    """``--last_checkpoint_minutes`` tiny: last.ckpt after every step; SIGKILL after step 5
    (before its save) leaves the one of step 4, between two validations."""
    root = tmp_path / "killed"
    process = _start(tiny_bert_dir, small, root, "--last_checkpoint_minutes", "1e-9",
                     "--trainer.callbacks+=tests.test_stop_and_resume.PauseAfter", "--trainer.callbacks.step=5",
                     f"--trainer.callbacks.marker={tmp_path / 'unused'}", "--trainer.callbacks.kill=true")
    output = process.communicate(timeout=300)[0]
    assert process.returncode == -signal.SIGKILL, output[-3000:]
    last = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 4
    resumed = _resume(tiny_bert_dir, small, tmp_path / "resumed", last)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight), "the resumed run differs"



def test_a_run_killed_while_writing_last_ckpt_keeps_the_previous_one(tiny_bert_dir, small, straight, tmp_path):
    """SIGKILL in the middle of the save after step 5: last.ckpt is still the whole one of
    step 4 (the new one was written beside it) and resumes exactly."""
    root = tmp_path / "killed"
    process = _start(tiny_bert_dir, small, root, "--last_checkpoint_minutes", "1e-9",
                     "--trainer.callbacks+=tests.test_stop_and_resume.FailCheckpointWrites",
                     "--trainer.callbacks.step=5", "--trainer.callbacks.fault=kill")
    output = process.communicate(timeout=300)[0]
    assert process.returncode == -signal.SIGKILL, output[-3000:]
    last = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    assert last.with_name("last.ckpt.tmp").stat().st_size == 100_000  # the kill came during the write
    assert torch.load(last, weights_only=False)["global_step"] == 4
    resumed = _resume(tiny_bert_dir, small, tmp_path / "resumed", last)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight), "the resumed run differs"


def test_a_full_disk_during_a_save_ends_the_run_in_one_line_and_keeps_the_previous_checkpoint(
        tiny_bert_dir, small, tmp_path):
    root = tmp_path / "full"
    process = _start(tiny_bert_dir, small, root, "--last_checkpoint_minutes", "1e-9",
                     "--trainer.callbacks+=tests.test_stop_and_resume.FailCheckpointWrites",
                     "--trainer.callbacks.step=5", "--trainer.callbacks.fault=full")
    output = process.communicate(timeout=300)[0]
    last = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert process.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert errors == [f"error: {last}: No space left on device; the checkpoint was not written (any earlier one is "
                      "unchanged)"], output[-3000:]
    assert torch.load(last, weights_only=False)["global_step"] == 4
    assert not last.with_name("last.ckpt.tmp").exists()  # a full disk is not filled further


@pytest.mark.slow
def test_a_lost_process_stops_the_other_in_one_line_and_the_run_resumes(tiny_bert_dir, small, tmp_path):
    """Two processes (gloo); process 1 killed after step 4: process 0 stops at its next
    collective (gloo sees the connection reset) instead of waiting, says so in one line
    and names last.ckpt (of the validation at step 3), from which two processes finish."""
    ddp = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
           "--trainer.enable_progress_bar", "false"]
    process = _start(tiny_bert_dir, small, tmp_path / "lost", *ddp,
                     "--trainer.callbacks+=tests.test_stop_and_resume.PauseAfter", "--trainer.callbacks.step=4",
                     f"--trainer.callbacks.marker={tmp_path / 'unused'}", "--trainer.callbacks.kill=true",
                     "--trainer.callbacks.rank=1")
    output = process.communicate(timeout=180)[0]  # a process left waiting would end the test here
    last = tmp_path / "lost" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert process.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert len(errors) == 1 and "another process of this run stopped or cannot be reached" in errors[0], output[-3000:]
    assert f"last checkpoint (resume with --ckpt_path): {last}" in output
    assert torch.load(last, weights_only=False)["global_step"] == 3
    resumed = _start(tiny_bert_dir, small, tmp_path / "resumed", *ddp, "--ckpt_path", str(last))
    output = resumed.communicate(timeout=180)[0]
    assert resumed.returncode == 0 and "finished after 6 steps" in output, output[-3000:]
