"""Training callbacks that keep a run honest with its user: validate before stopping, say
where the run writes and what it found, and show step-limited progress; and one a user adds,
a moving average of the weights (``--trainer.callbacks+=parser.training.callbacks.MovingAverage``)."""

from __future__ import annotations

import copy
import random
import shlex
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.utilities import rank_zero_info

from objectives.conventions import ConfigurationError

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


LAST_CHECKPOINT_MINUTES = 10.0  # a long run writes last.ckpt at least this often: a SIGKILL loses minutes, not an epoch


def default_callbacks(last_every_minutes: float = LAST_CHECKPOINT_MINUTES) -> list[Callback]:
    """Model selection on dev LAS (``best.ckpt``, weights only), ``last.ckpt`` with the
    optimizer and random states for resuming, validation before stopping, the summary."""
    return [
        ModelCheckpoint(monitor=MONITOR, mode=MODE, filename="best", save_weights_only=True, save_on_train_epoch_end=False),
        LastCheckpoint(every_minutes=last_every_minutes),
        ValidateAtEnd(),
        ResumeRandomState(),
        RunSummary(),
    ]


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``, the point a run resumes from (``--ckpt_path``): written after each
    validation, once ``every_minutes`` have passed since the last one (0: never on time
    alone), at the end of training, and when the run receives SIGTERM or SIGINT (Ctrl-C),
    after which it stops with exit status 128 + the signal's number and says where the
    checkpoint is. A second Ctrl-C stops at once, without a checkpoint.

    Every write happens at the end of a training step, or of the validation that follows
    it when one does (so that a resumed run has seen that validation too): places where a
    checkpoint resumes the run exactly (``ResumeRandomState``). On several processes the
    decisions are taken together: a signal to any process stops them all.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, every_minutes: float = LAST_CHECKPOINT_MINUTES) -> None:
        super().__init__(save_last=True, save_top_k=0, save_on_train_epoch_end=False)
        if every_minutes < 0:
            raise ConfigurationError(f"last_checkpoint_minutes must be 0 (only at validations) or more, not {every_minutes}")
        self.every_seconds = 60.0 * every_minutes
        self._saved_at = 0.0
        self._received: int | None = None  # the stop signal received, if any
        self._previous_handlers: dict[int, object] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._saved_at = time.monotonic()
        # installed after Lightning's own SIGTERM handler, which stops a run without a checkpoint
        for signum in self.SIGNALS:
            self._previous_handlers[signum] = signal.signal(signum, self._receive)

    def _receive(self, signum: int, frame) -> None:
        if self._received == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: the user does not want to wait for the step to end
        self._received = signum
        print(f"\nreceived {signal.Signals(signum).name}: saving last.ckpt at the end of this step, then stopping",
              file=sys.stderr, flush=True)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        strategy = trainer.strategy
        stop = strategy.reduce_boolean_decision(self._received is not None, all=False)
        due = self.every_seconds > 0 and strategy.reduce_boolean_decision(
            time.monotonic() - self._saved_at >= self.every_seconds, all=False)
        loop = trainer.fit_loop  # Lightning's own test of whether a validation follows this step
        if (stop or due) and not loop.epoch_loop._should_check_val_fx(loop._data_fetcher):
            self._save_last(trainer, stop)
        # else on_validation_end saves (a checkpoint taken before a validation resumes past it
        # without running it, and model selection would miss that score), and stops the run

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last(trainer, trainer.strategy.reduce_boolean_decision(self._received is not None, all=False))

    def _save_last(self, trainer: Trainer, stop: bool) -> None:
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            self._saved_at = time.monotonic()
        if stop:
            signum = self._received or signal.SIGTERM  # or another process received it
            rank_zero_info(f"stopped by {signal.Signals(signum).name} after {trainer.global_step} steps; "
                           f"last checkpoint (resume with --ckpt_path): {self.last_model_path}")
            raise SystemExit(128 + signum)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._restore_handlers()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)
        self._restore_handlers()
        if self.last_model_path and not isinstance(exception, SystemExit):  # what a failed run leaves to resume from
            print(f"last checkpoint (resume with --ckpt_path): {self.last_model_path}", file=sys.stderr, flush=True)

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}


class MovingAverage(Callback):
    """Validate, select and save an exponential moving average of the network's weights
    (Polyak averaging), training going on with the weights themselves.

    From training step ``start`` on, the average follows the weights after every step
    (``decay``: the weight of the average so far). Each validation scores the average,
    and the checkpoints written after it (``best.ckpt``, the parser a run gives) hold it;
    the next step trains the weights again. ``last.ckpt`` also keeps the other of the two,
    so a resumed run is the same run. Before ``start`` the weights themselves are validated.

    Lightning's own ``WeightAveraging`` copies the module before it is set up, and its
    weights-only checkpoints (``best.ckpt``) keep the weights, not the average: the parser
    builds its network in ``setup`` from the data, and a run's result is its ``best.ckpt``.
    """

    def __init__(self, decay: float = 0.99, start: int = 0) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigurationError(f"the moving average's decay must lie in (0, 1), not {decay}")
        self.decay, self.start = decay, start
        self._average = None  # a copy of the network, made at the first update
        self._swapped = False  # the network holds the average, the copy the weights
        self._restored: dict | None = None  # a checkpoint's state, applied when fit starts (it needs the module)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if self._swapped:
            pl_module.network.swap(self._average)
            self._swapped = False

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step <= self.start:
            return
        if self._average is None:
            self._average = copy.deepcopy(pl_module.network)
        else:
            self._average.follow(pl_module.network, self.decay)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._average is not None and not self._swapped and not trainer.sanity_checking:
            pl_module.network.swap(self._average)
            self._swapped = True

    def state_dict(self) -> dict:
        return {"swapped": self._swapped, "average": None if self._average is None else self._average.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = state_dict

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._restored is None:
            return
        self._swapped = self._restored["swapped"]
        if self._restored["average"] is not None:
            self._average = copy.deepcopy(pl_module.network)
            self._average.load_state_dict(self._restored["average"])
        self._restored = None


class ResumeRandomState(Callback):
    """Training's random stream (Python, NumPy, torch CPU and CUDA) continues from one
    training step to the next whatever happens between them, and a resumed run continues
    it from its checkpoint: the run is the same run, bit for bit, from any checkpoint.

    Between two training steps Lightning validates, starts the next epoch's data loader and
    writes checkpoints; some of that draws from the global generators (a ``DataLoader``
    iterator draws its base seed from torch's), and a resumed run does those at other
    moments (it starts a loader where the uninterrupted run was mid-epoch). So the state at
    the end of each step is kept, put back before the next step and saved in checkpoints:
    dropout and everything random in a step see the same numbers in every run.
    """

    def __init__(self) -> None:
        self._state: dict | None = None  # the random states at the end of the last training step

    def state_dict(self) -> dict:
        return self._state if self._state is not None else _random_states()

    def load_state_dict(self, state_dict: dict) -> None:
        self._state = state_dict

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if self._state is not None:
            _set_random_states(self._state)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self._state = _random_states()


def _random_states() -> dict:
    """The Python, NumPy and torch (CPU and every CUDA device) random states."""
    numpy_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (numpy_state[0], torch.from_numpy(numpy_state[1].copy()), *numpy_state[2:]),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_random_states(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
