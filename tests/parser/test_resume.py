"""Resuming from a checkpoint written mid-epoch continues the same run, bit for bit on CPU:
batch order, unlabeled stream position, random states (dropout), learning-rate and lambda
schedules, GE targets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import GeneralizedExpectation
from parser.callbacks import ResumeRandomState
from parser.datamodule import DependencyDataModule
from parser.model import Parser

STEPS, SAVED_AT = 6, 3


@pytest.fixture()
def treebank(ud_dir: Path, tmp_path: Path) -> Path:
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:60]
    path = tmp_path / "small.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def _fit(tiny_bert_dir, treebank, root: Path, unsupervised, ckpt_path: Path | None = None) -> Parser:
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(treebank), dev=str(treebank), labeled_size=20,
                                batch_tokens=120, seed=3)
    model = Parser(encoder=str(tiny_bert_dir), arc_size=32, label_size=16, warmup_steps=2, unsupervised=unsupervised,
                   unsupervised_weight=0.5, unsupervised_warmup=2, unsupervised_schedule="linear_decay")
    every = ModelCheckpoint(dirpath=root, filename="{step}", every_n_train_steps=SAVED_AT, save_top_k=-1)
    trainer = Trainer(max_steps=STEPS, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0, num_sanity_val_steps=0, callbacks=[every, ResumeRandomState()])
    trainer.fit(model, data, ckpt_path=ckpt_path)
    assert trainer.global_step == STEPS
    return model


@pytest.mark.parametrize("objective", ["entropy", "ge"])
def test_resume_from_a_mid_epoch_checkpoint_is_exact(objective, tiny_bert_dir, treebank, tmp_path):
    def make():
        if objective == "entropy":
            return EntropyRegularizer()
        return GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=2)

    straight = _fit(tiny_bert_dir, treebank, tmp_path / "straight", make())
    checkpoint = tmp_path / "straight" / f"step={SAVED_AT}.ckpt"
    state = torch.load(checkpoint, weights_only=False)
    assert state["global_step"] == SAVED_AT
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0, "the checkpoint must be mid-epoch"
    resumed = _fit(tiny_bert_dir, treebank, tmp_path / "resumed", make(), ckpt_path=checkpoint)
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming"
