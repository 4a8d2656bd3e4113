"""Training callbacks that keep a run honest with its user: validate before stopping, say
where the run writes and what it found, and show step-limited progress."""

from __future__ import annotations

import random
import shlex
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.utilities import rank_zero_info

MONITOR, MODE = "val/las", "max"  # model selection: best dev LAS


class ValidateAtEnd(Callback):
    """Validate after the last training step when the schedule would not.

    A run whose ``max_steps`` (or last epoch) ends between two validations otherwise ends
    with no dev score, no ``best.ckpt`` and, with early stopping, an error. Setting
    ``trainer.should_stop`` on the last step makes Lightning's own loop run validation
    (and with it checkpointing) before it stops.
    """

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.should_stop or not trainer.enable_validation:
            return
        loop = trainer.fit_loop
        last_step = 0 < trainer.max_steps <= trainer.global_step
        last_epoch = trainer.max_epochs is not None and 0 <= trainer.max_epochs <= trainer.current_epoch + 1
        if last_step or (last_epoch and loop.epoch_loop.batch_progress.is_last_batch):
            trainer.should_stop = True


class RunSummary(Callback):
    """One line naming the run directory when ``fit`` starts; at its end the best dev
    scores and their step, the checkpoints, and the commands to run next."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        rank_zero_info(f"run directory: {run_directory(trainer)}")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if MONITOR in metrics and metrics[MONITOR] >= self.best.get(MONITOR, float("-inf")):
            self.best = {**metrics, "step": trainer.global_step}

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        best = next((c for c in trainer.checkpoint_callbacks if c.monitor == MONITOR), None)
        last = next((c for c in trainer.checkpoint_callbacks if c.save_last), None)
        lines = [f"finished after {trainer.global_step} steps; run directory: {run_directory(trainer)}"]
        if self.best:
            lines.append(f"best dev: UAS {self.best.get('val/uas', float('nan')):.2f} LAS {self.best[MONITOR]:.2f} at step {self.best['step']}")
        else:
            lines.append("no validation ran, so there is no best checkpoint")
        skipped = int(trainer.callback_metrics.get("train/unlabeled_skipped", 0))
        if skipped:
            lines.append(f"skipped {skipped} malformed unlabeled lines (each is in the log with its file and line)")
        if best is not None and best.best_model_path:
            lines.append(f"best checkpoint: {best.best_model_path}")
        if last is not None and last.last_model_path:
            lines.append(f"last checkpoint (resume with --ckpt_path): {last.last_model_path}")
        chosen = (best.best_model_path if best is not None else "") or (last.last_model_path if last is not None else "")
        if chosen:
            quoted = shlex.quote(chosen)
            lines += ["next:", f"  python -m parser.predict {quoted} IN.conllu OUT.conllu",
                      "  python -m parser.evaluate GOLD.conllu OUT.conllu"]
        rank_zero_info("\n".join(lines))


def run_directory(trainer: Trainer) -> Path:
    """Where this run's logs and checkpoints go: the first logger's directory."""
    return Path(trainer.log_dir or trainer.default_root_dir)


class StepProgressBar(RichProgressBar):
    """Rich progress bar that shows ``Step s/max_steps`` for step-limited runs instead of
    Lightning's ``Epoch 0/-2`` (``max_epochs`` of -1)."""

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        if trainer.max_epochs is not None and trainer.max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        description = f"Epoch {current_epoch}, step {trainer.global_step}/{trainer.max_steps}"
        return f"{description:{len(self.validation_description)}}"


def default_callbacks() -> list[Callback]:
    """Model selection on dev LAS (``best.ckpt``, weights only), ``last.ckpt`` with the
    optimizer and random states for resuming, validation before stopping, the summary."""
    return [
        ModelCheckpoint(monitor=MONITOR, mode=MODE, filename="best", save_weights_only=True, save_on_train_epoch_end=False),
        ModelCheckpoint(save_last=True, save_top_k=0, save_on_train_epoch_end=False),
        ValidateAtEnd(),
        ResumeRandomState(),
        RunSummary(),
    ]


class ResumeRandomState(Callback):
    """Saves the Python, NumPy and torch (CPU and CUDA) random states with each checkpoint
    and restores them before the first training batch after resuming, so dropout and
    anything else random continue exactly as in the uninterrupted run."""

    def __init__(self) -> None:
        self._pending: dict | None = None

    def state_dict(self) -> dict:
        numpy_state = np.random.get_state()
        return {
            "python": random.getstate(),
            "numpy": (numpy_state[0], torch.from_numpy(numpy_state[1].copy()), *numpy_state[2:]),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self._pending = state_dict

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if self._pending is None:
            return
        state, self._pending = self._pending, None
        random.setstate(state["python"])
        kind, keys, *rest = state["numpy"]
        np.random.set_state((kind, keys.numpy(), *rest))
        torch.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
