"""A fit stopped by SIGTERM or SIGINT writes last.ckpt at the end of its step and says
where; one killed by SIGKILL leaves the last.ckpt of its timed saves. Either resumes
(``--ckpt_path``) to the same parameters as the run that was never stopped, bit for bit."""

from __future__ import annotations

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
    (the test sends its signal in between), or with ``kill`` end the process by SIGKILL."""

    def __init__(self, step: int, marker: str, go: str = "", kill: bool = False):
        self.step, self.marker, self.go, self.kill = step, Path(marker), Path(go), kill

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        self.marker.touch()
        deadline = time.monotonic() + 120
        while not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


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
