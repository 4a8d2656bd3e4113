"""Train, validate, test or predict with a LightningCLI.

    python train.py fit --config configs/likelihood.yaml [--trainer.max_steps 100 ...]
    python train.py --objective ge [overrides ...]     # = fit --config configs/ge.yaml
    treeexp train fit --config configs/ge.yaml         # installed: shipped configs by name, from any folder
    python train.py test --config configs/likelihood.yaml --ckpt_path runs/likelihood/version_0/checkpoints/best.ckpt

A ``fit`` writes everything under ``<default_root_dir>/<config name>/version_N/``: CSV and
TensorBoard logs, ``config.yaml`` and ``checkpoints/{best,last}.ckpt``. Bad input ends
with one ``error:`` line; ``--debug`` (anywhere) shows the traceback instead.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import warnings
from importlib.util import find_spec
from pathlib import Path

import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from jsonargparse import Namespace
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_info

from objectives.conventions import ConfigurationError
from objectives.ge import FAMILIES

from parser.training.callbacks import LAST_CHECKPOINT_MINUTES, MODE, MONITOR, StepProgressBar, default_callbacks
from parser.cli import run_reporting_errors
from parser.training.precision import resolve_precision
from parser.data.datamodule import DependencyDataModule
from parser.model import Parser
from parser.network.pretrained import resolve_model_path
from parser.runs import RECIPES, config_path, recipe
from parser.training.checkpoint import AtomicCheckpointIO, check_readable
from parser.training.teacher import TeacherOptions

STATISTICS = "statistics"  # a GE term's constraints that are the file of --statistics
OBJECTIVE_CONFIGS = RECIPES  # one name per shipped recipe (parser.runs), in CONFIGS
SUBCOMMANDS = ("fit", "validate", "test", "predict")
EARLY_STOPPING_PATIENCE = 5  # validations without a better dev LAS before training stops
LEGACY_TEACHER = {"teacher_ema": "ema", "teacher_cache_mib": "cache_mib"}  # --model.OLD: --model.teacher.NEW
GRADIENT_CLIP_NORM = 5.0  # the gradient's global 2-norm is clipped to this
LOG_EVERY_N_STEPS = 10  # Lightning logs every 50 by default: too rare for the 43-step epochs of small treebanks
# Lightning counts the steps it logs at across epochs, so epochs shorter than
# LOG_EVERY_N_STEPS (6 batches of 100 labeled sentences) are logged all the same: its
# warning that they would not be is wrong here.
warnings.filterwarnings("ignore", message=r"The number of training batches .* is smaller than the logging interval")
# `treeexp train` hands LightningCLI the arguments after its command word; the rest of sys.argv is no mistake
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended to run from within Python")


def expand_objective(argv: list[str]) -> list[str]:
    """``--objective NAME`` anywhere in ``argv`` -> ``--config configs/<NAME>.yaml`` right
    after the subcommand (``fit`` when there is none), before every other override; every
    config by the file :func:`~parser.runs.config_path` finds (:func:`find_configs`)."""
    argv = find_configs(argv)
    for i, arg in enumerate(argv):
        if arg == "--objective" or arg.startswith("--objective="):
            if "=" in arg:
                name, rest = arg.split("=", 1)[1], argv[:i] + argv[i + 1 :]
            else:
                name, rest = (argv[i + 1] if i + 1 < len(argv) else ""), argv[:i] + argv[i + 2 :]
            break
    else:
        return argv
    if name not in OBJECTIVE_CONFIGS:
        raise ConfigurationError(f"--objective must be one of {', '.join(OBJECTIVE_CONFIGS)}, not {name!r}")
    command, rest = (rest[0], rest[1:]) if rest and rest[0] in SUBCOMMANDS else ("fit", rest)
    return [command, "--config", str(recipe(name)), *rest]


def find_configs(argv: list[str]) -> list[str]:
    """Each ``--config NAME`` (or ``--config=NAME``) of ``argv`` as the file
    :func:`~parser.runs.config_path` finds (``configs/ge.yaml`` from any folder); any other
    value (a missing file, YAML given inline) as it is."""
    found: list[str] = []
    for arg in argv:
        key = "--config=" if arg.startswith("--config=") else "" if found[-1:] == ["--config"] else None
        path = None if key is None else config_path(arg.removeprefix(key))
        found.append(key + str(path) if path is not None and path.is_file() else arg)
    return found


def statistics_file(statistics: str | None, reader: str) -> str:
    """The file of ``--statistics``, which ``reader`` reads (its one-line error where none was given)."""
    if statistics is None:
        raise ConfigurationError(f"{reader} reads the language's statistics: give --statistics FILE (a statistics "
                                 "or facts file, docs/usage.md#a-languages-statistics)")
    return str(config_path(statistics))


def find_rules(terms: list | None, statistics: str | None = None) -> None:
    """Each term's rules file (an objective's ``constraints`` that name no feature family) as
    :func:`~parser.runs.config_path` finds it: ``configs/rules/naseem_ud.yaml`` from any folder;
    ``statistics`` (:data:`STATISTICS`) stands for the file of ``--statistics``."""
    def found(item):
        if item == STATISTICS:
            return statistics_file(statistics, "a GE term")
        return str(config_path(item)) if isinstance(item, str) and item not in FAMILIES else item

    for term in terms or []:
        objective = term.get("objective")
        arguments = objective.get("init_args") if isinstance(objective, Namespace) else None
        given = arguments.get("constraints") if arguments else None
        if given is not None:
            arguments["constraints"] = [found(item) for item in given] if isinstance(given, list) else found(given)


def run_name(config_paths: list) -> str:
    """A fit's run name: the stem of its last config file (``likelihood``, ``ge``, ...)."""
    return Path(str(config_paths[-1])).stem if config_paths else "run"


class ParserCLI(LightningCLI):
    """LightningCLI with the parser's defaults: a fit logs (CSV and TensorBoard) and
    checkpoints into one run directory; other subcommands create none."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--objective", choices=sorted(OBJECTIVE_CONFIGS), default=None,
            help="shortcut for --config configs/<config of NAME>.yaml, given anywhere on the command line "
                 f"({', '.join(f'{k}: {v}' for k, v in OBJECTIVE_CONFIGS.items())}); `fit` when no subcommand is given",
        )
        parser.add_argument(
            "--last_checkpoint_minutes", type=float, default=LAST_CHECKPOINT_MINUTES,
            help="a fit writes last.ckpt (the point --ckpt_path resumes from) after every validation, when it "
                 "receives SIGTERM or SIGINT, and at the end of a training step once this many minutes have "
                 "passed since the last one (0: only at validations and signals)",
        )
        parser.add_argument(
            "--statistics", type=str | None, default=None,
            help="the language's statistics or facts file (treeexp statistics; configs/facts/): the constraints of "
                 "every GE term whose constraints are `statistics`, and its words the lexicon of `--data.lexicon statistics` "
                 "(configs/no_treebank.yaml)",
        )
        parser.add_argument(
            "--precision_auto", type=bool, default=False,
            help="choose --trainer.precision when the run starts: bf16-mixed where the processor does bf16 "
                 "arithmetic (a CPU with AVX512-BF16 or AMX, a GPU that has it), 32-true elsewhere (bf16 "
                 "emulated on a CPU without them is several times slower); the run's first lines say which",
        )
        # the CLI's default recipe (the model names no objective): tree likelihood on labeled batches
        parser.set_defaults({"model.terms": [{"objective": {"class_path": "objectives.Likelihood"}}]})
        # the teacher's settings before they were one value: recorded commands, older checkpoints' hyperparameters
        for old, new in LEGACY_TEACHER.items():
            parser.add_argument(f"--model.{old}", type=float | None, default=None, help=f"older spelling of --model.teacher.{new}")

    def init_parser(self, **kwargs) -> LightningArgumentParser:
        parser = super().init_parser(**kwargs)
        parser.exit_on_error = False  # a bad option value raises: parser.cli reports it in one line
        return parser

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        check_encoder(config["model"]["encoder"])
        find_rules(config["model"]["terms"], config.get("statistics"))
        if config["data"].get("lexicon") == STATISTICS:  # the words of the language's facts file
            config["data"]["lexicon"] = statistics_file(config.get("statistics"), "--data.lexicon statistics")
        fold_legacy_teacher(config["model"])
        validate_every_dev_tree(config)
        if config.get("precision_auto"):
            accelerator = str(config["trainer"].get("accelerator") or "auto")
            device = "cuda" if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()) else "cpu"
            config["trainer"]["precision"], line = resolve_precision("auto", device)
            rank_zero_info(line)

    def _parse_ckpt_path(self) -> None:
        """Lightning reads the model's settings from ``--ckpt_path`` first: a file that is not
        a whole checkpoint stops here, in one line."""
        subcommand = self.config.get("subcommand")
        path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if path and Path(path).is_file():
            check_readable(path)
        super()._parse_ckpt_path()

    def instantiate_trainer(self, **kwargs):
        """The trainer with the user's callbacks (``--trainer.callbacks``, YAML) and the
        defaults beside them: a default is added, never put in the place of a user's setting."""
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True) and "logger" not in kwargs:
            kwargs["logger"] = self._loggers(config) if self.subcommand in (None, "fit") else False
        plugins = config.get("plugins") or []
        plugins = plugins if isinstance(plugins, list) else [plugins]
        if "plugins" not in kwargs and not any(isinstance(p, CheckpointIO) for p in plugins):
            kwargs["plugins"] = [*plugins, AtomicCheckpointIO()]  # a kill or a full disk during a save loses nothing
        configured = config.get("callbacks") or []
        configured = configured if isinstance(configured, list) else [configured]
        callbacks = [
            *default_callbacks(self._get(self.config_init, "last_checkpoint_minutes", default=LAST_CHECKPOINT_MINUTES)),
            EarlyStopping(monitor=MONITOR, mode=MODE, patience=EARLY_STOPPING_PATIENCE, check_on_train_epoch_end=False),
            LearningRateMonitor(logging_interval="step"),
        ]
        own_bar = any(isinstance(c, ProgressBar) for c in configured)
        if config.get("enable_progress_bar", True) is not False and not own_bar and find_spec("rich") is not None:
            callbacks.append(StepProgressBar())
        # Lightning refuses to start with a learning-rate monitor but no logger, or a checkpoint
        # callback with checkpointing off: the defaults the user's settings switch off step aside
        switched_off = ((LearningRateMonitor,) if kwargs.get("logger", config.get("logger")) is False else ()) + (
            (ModelCheckpoint,) if config.get("enable_checkpointing") is False else ())
        self.trainer_defaults = {**self.trainer_defaults,
                                 "callbacks": [c for c in callbacks if not isinstance(c, switched_off)]}
        return super().instantiate_trainer(**kwargs)

    def _loggers(self, trainer_config: dict) -> list:
        root = Path(trainer_config.get("default_root_dir") or "runs")
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        name = run_name(config.get("config") or [])
        version = _next_version(root / name)
        return [CSVLogger(root, name=name, version=version), TensorBoardLogger(root, name=name, version=version, default_hp_metric=False)]


def validate_every_dev_tree(config: Namespace) -> None:
    """``--data.dev_size K`` asks for K dev trees: each validation reads all of them (a share
    ``--trainer.limit_val_batches`` < 1 of a config written for a whole dev file would read
    a few, or none, and Lightning would refuse to start)."""
    share = config["trainer"].get("limit_val_batches")
    if config["data"].get("dev_size") and isinstance(share, float) and share < 1.0:
        config["trainer"]["limit_val_batches"] = 1.0
        rank_zero_info(f"--data.dev_size {config['data']['dev_size']}: every validation reads all of its trees "
                       f"(--trainer.limit_val_batches 1.0, not {share})")


def fold_legacy_teacher(model: Namespace) -> None:
    """``--model.teacher_ema`` and ``--model.teacher_cache_mib`` (when given) into
    ``model.teacher``, the :class:`~parser.training.teacher.TeacherOptions` they now belong to;
    settings that cannot work stop here, in one line (inside the union of ``teacher``'s types
    they would end in a traceback)."""
    given = {new: model.pop(old, None) for old, new in LEGACY_TEACHER.items()}
    teacher = model["teacher"].as_dict() if isinstance(model["teacher"], Namespace) else model["teacher"]
    options = TeacherOptions.of(teacher, **given)
    if any(value is not None for value in given.values()):
        model["teacher"] = dataclasses.asdict(options)


def check_encoder(name: str) -> None:
    """``--model.encoder`` is an offline name, a directory or a hub name: a path to nowhere
    raises ``FileNotFoundError`` before anything is built."""
    if Path(resolve_model_path(name)).expanduser().is_dir():
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise FileNotFoundError(2, "no such encoder directory (nor an encoder name)", name) from None


def _next_version(directory: Path) -> int:
    """One more than the largest N of the ``version_N`` folders in ``directory`` (0 if none)."""
    taken = [int(p.name.split("_")[1]) for p in directory.glob("version_*") if p.name.split("_")[1].isdigit()]
    return max(taken, default=-1) + 1


def release_process_group() -> None:
    """Destroy the ``torch.distributed`` group a many-process run leaves open.

    Lightning destroys only NCCL groups at exit; with gloo (CPU) the group's worker threads
    can outlive the interpreter and abort the process after a finished run (exit -6,
    "terminate called without an active exception", pytorch/pytorch#179291).
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def main(argv: list[str] | None = None, run: bool = True) -> LightningCLI:
    """Run the CLI on ``argv`` (default: ``sys.argv``, already expanded); ``run=False`` only instantiates."""
    return ParserCLI(
        Parser,
        DependencyDataModule,
        args=None if argv is None else expand_objective(argv),
        run=run,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "default_root_dir": "runs",
            "max_epochs": 10,
            "log_every_n_steps": LOG_EVERY_N_STEPS,
            "gradient_clip_val": GRADIENT_CLIP_NORM,
        },  # the default callbacks join the user's in ParserCLI.instantiate_trainer
    )


def command_line(first: int = 1) -> None:
    """``python train.py ...`` (or ``treeexp train ...``: ``sys.argv[first:]`` are the arguments);
    every process Lightning starts reruns ``sys.argv``, so they are expanded there."""
    if "--debug" in sys.argv:  # tracebacks for user errors (parser.cli), not a LightningCLI option
        sys.argv.remove("--debug")
        os.environ["TREEEXP_DEBUG"] = "1"
    atexit.register(release_process_group)  # every process Lightning starts runs this too

    def expanded_main() -> LightningCLI:
        sys.argv[first:] = expand_objective(sys.argv[first:])
        return main(None if first == 1 else sys.argv[first:])

    run_reporting_errors(expanded_main)


if __name__ == "__main__":
    command_line()
