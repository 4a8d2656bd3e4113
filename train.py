"""Train, validate, test or predict with a LightningCLI.

    python train.py fit --config configs/likelihood.yaml [--trainer.max_steps 100 ...]
    python train.py --objective ge [overrides ...]     # = fit --config configs/ge.yaml
    python train.py test --config configs/likelihood.yaml --ckpt_path runs/.../best.ckpt
"""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from parser.datamodule import DependencyDataModule
from parser.model import Parser

CONFIGS = Path(__file__).resolve().parent / "configs"
OBJECTIVE_CONFIGS = {
    "likelihood": "likelihood.yaml",
    "risk": "risk.yaml",
    "entropy": "entropy.yaml",
    "kl": "distill.yaml",
    "ge": "ge.yaml",
}


def expand_objective(argv: list[str]) -> list[str]:
    """``--objective NAME [overrides]`` -> ``fit --config configs/<NAME>.yaml [overrides]``."""
    if not argv or not argv[0].startswith("--objective"):
        return argv
    name, rest = (argv[0].split("=", 1)[1], argv[1:]) if "=" in argv[0] else (argv[1] if len(argv) > 1 else "", argv[2:])
    if name not in OBJECTIVE_CONFIGS:
        raise SystemExit(f"--objective must be one of {', '.join(OBJECTIVE_CONFIGS)}, not {name!r}")
    return ["fit", "--config", str(CONFIGS / OBJECTIVE_CONFIGS[name]), *rest]


class ParserCLI(LightningCLI):
    """LightningCLI whose default loggers (TensorBoard and CSV) live under ``default_root_dir``."""

    def instantiate_trainer(self, **kwargs):
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True) and "logger" not in kwargs:
            root = config.get("default_root_dir") or "runs"
            kwargs["logger"] = [TensorBoardLogger(root, name="tensorboard"), CSVLogger(root, name="csv")]
        return super().instantiate_trainer(**kwargs)


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
            "gradient_clip_val": 5.0,
            "callbacks": [
                ModelCheckpoint(monitor="val/las", mode="max", filename="best", save_last=True),
                EarlyStopping(monitor="val/las", mode="max", patience=5),
                LearningRateMonitor(logging_interval="step"),
            ],
        },
    )


if __name__ == "__main__":
    sys.argv[1:] = expand_objective(sys.argv[1:])
    main()
