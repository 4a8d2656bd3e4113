"""Two CPU processes (DDP over gloo) through train.py: fit (likelihood; entropy with an
unlabeled stream), validate equal to one process, predict writing every sentence once."""

from __future__ import annotations

import csv
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

import train
from parser.data.sentences import read_conllu
from parser.runs import CONFIGS

REPO = Path(train.__file__).resolve().parent


def run(*args: str, processes: int = 2, root: Path) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` on ``processes`` CPU processes; fails the test on a non-zero exit."""
    command = [sys.executable, str(REPO / "train.py"), *args, "--trainer.accelerator", "cpu",
               "--trainer.devices", str(processes), "--trainer.default_root_dir", str(root),
               "--trainer.enable_progress_bar", "false"]
    if processes > 1:
        command += ["--trainer.strategy", "ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def small(ud_dir, tmp_path_factory) -> Path:
    """40 EWT dev sentences (train, dev and input to parse)."""
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")
    path = tmp_path_factory.mktemp("ddp") / "small.conllu"
    path.write_text("\n\n".join(blocks[:40]) + "\n\n", encoding="utf-8")
    return path


def common(tiny_bert_dir: Path, small: Path, config: str = "likelihood.yaml") -> list[str]:
    return ["--config", str(CONFIGS / config), "--model.encoder", str(tiny_bert_dir),
            "--data.train", str(small), "--data.dev", str(small), "--data.batch_tokens", "300"]


@pytest.fixture(scope="module")
def checkpoint(tiny_bert_dir, small) -> Path:
    """A likelihood parser trained for 4 steps on two processes."""
    root = small.parent / "fit"
    root.mkdir()
    run("fit", *common(tiny_bert_dir, small), "--trainer.max_steps", "4", "--trainer.val_check_interval", "2",
        root=root)
    return next(root.glob("likelihood/version_0/checkpoints/last.ckpt"))


def test_entropy_with_unlabeled_text_trains_on_two_processes(tiny_bert_dir, small, tmp_path):
    text = tmp_path / "unlabeled.txt.gz"
    text.write_bytes(gzip.compress("".join(" ".join(s.words) + "\n" for s in read_conllu(small)).encode()))
    done = run("fit", *common(tiny_bert_dir, small, "entropy.yaml"), "--data.labeled_size", "10",
               "--data.unlabeled", str(text), "--data.shuffle_buffer", "8", "--trainer.max_steps", "3",
               "--trainer.limit_val_batches", "1", root=tmp_path)
    assert "finished after 3 steps" in done.stdout + done.stderr


def test_validate_on_two_processes_equals_one(tiny_bert_dir, small, checkpoint, tmp_path):
    args = [*common(tiny_bert_dir, small), "--ckpt_path", str(checkpoint)]
    run("validate", *args, "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(tmp_path), root=tmp_path)
    rows = list(csv.DictReader((tmp_path / "lightning_logs/version_0/metrics.csv").open()))
    two = {k: float(v) for k, v in rows[-1].items() if k.startswith("val/") and v}
    cli = train.main(["validate", *args, "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                      "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)])
    one = {k: float(v) for k, v in cli.trainer.callback_metrics.items() if k.startswith("val/")}
    assert {"val/uas", "val/las"} <= set(one) and one == two
    # the fit validated the same weights on two processes, its model wrapped in DDP
    rows = list(csv.DictReader(next(checkpoint.parents[1].glob("metrics.csv")).open()))
    during_fit = [row for row in rows if row.get("val/las")][-1]
    assert {k: float(during_fit[k]) for k in two} == two


def test_predict_on_two_processes_writes_every_sentence_once_in_order(tiny_bert_dir, small, checkpoint, tmp_path):
    out = tmp_path / "out.conllu"
    run("predict", *common(tiny_bert_dir, small), "--ckpt_path", str(checkpoint), "--data.predict", str(small),
        "--trainer.callbacks+=parser.predict.ConlluWriter", "--trainer.callbacks.output", str(out), root=tmp_path)
    parsed, given = read_conllu(out), read_conllu(small)  # trees=True: every output is a tree
    assert [s.tokenlist.metadata["sent_id"] for s in parsed] == [s.tokenlist.metadata["sent_id"] for s in given]
