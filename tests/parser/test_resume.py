"""Resuming from any checkpoint Lightning writes during a run continues the same run, bit
for bit on CPU: batch order, unlabeled stream position, random states (dropout),
learning-rate and lambda schedules, GE targets, whatever ran between the checkpoint and
the next step (validation, a new epoch's data loader)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import GeneralizedExpectation
from objectives.kl import Distillation
from objectives.likelihood import Likelihood
from objectives.schedule import Schedule
from parser.training.callbacks import MovingAverage, ResumeRandomState
from parser.training.teacher import Teacher, TeacherOptions
from parser.data.datamodule import DependencyDataModule
from parser.data.sentences import read_conllu
from parser.model import Parser
from parser.network import Heads
from parser.training.terms import Term

STEPS, EVERY = 9, 3  # validation and a checkpoint every 3 steps; an epoch of labeled batches is 5 or 6 steps


@pytest.fixture()
def treebank(ud_dir: Path, tmp_path: Path) -> Path:
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:60]
    path = tmp_path / "small.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def _first(treebank: Path, sentences: int, path: Path) -> Path:
    """``path``: the first ``sentences`` sentences of ``treebank``."""
    path.write_text("\n\n".join(treebank.read_text(encoding="utf-8").split("\n\n")[:sentences]) + "\n\n", encoding="utf-8")
    return path


def _objective(name: str):
    if name == "entropy":
        return EntropyRegularizer()
    if name == "ge":
        return GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=2)
    if name == "distill":
        return Distillation(labeled=True)
    return None


def _teacher(tiny_bert_dir, treebank, root: Path) -> str:
    """An untrained parser of the treebank's labels with random scores, saved."""
    torch.manual_seed(1)
    teacher = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16),
                     labels=sorted({label for s in read_conllu(treebank) for label in s.deprels}))
    for parameter in teacher.network.scorer.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    return str(teacher.save(root / "teacher"))


def _fit(tiny_bert_dir, treebank, root: Path, objective: str, ckpt_path: Path | None = None,
         teacher_cache_mib: float = 64, steps: int = STEPS, *extra: Callback) -> Trainer:
    """Likelihood (with ``objective`` on the rest of the file as unlabeled text) for ``steps``
    steps, validating every EVERY; checkpoints every EVERY steps (before validation), at
    each validation's end and at each epoch's end, all kept. ``distill``: the teacher keeps
    its scores of each sentence (a resumed run's cache starts empty). ``extra``: more callbacks."""
    teacher = TeacherOptions(_teacher(tiny_bert_dir, treebank, root), cache_mib=teacher_cache_mib) if objective == "distill" else None
    seed_everything(0)
    labeled_only = objective == "likelihood"
    data = DependencyDataModule(treebank=None, train=str(treebank), dev=str(treebank), seed=3,
                                batch_tokens=300 if labeled_only else 120, labeled_size=None if labeled_only else 20)
    unlabeled = _objective(objective)
    terms = [Term(Likelihood())] + ([Term(unlabeled, "unlabeled", Schedule(0.5, warmup=2, decay="linear"))] if unlabeled else [])
    model = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), terms=terms, teacher=teacher, warmup_steps=2)
    checkpoints = [
        ModelCheckpoint(dirpath=root, filename="{step}", every_n_train_steps=EVERY, save_top_k=-1),
        ModelCheckpoint(dirpath=root, filename="validated-{step}", monitor="val/las", mode="max", save_top_k=-1,
                        save_on_train_epoch_end=False),
        ModelCheckpoint(dirpath=root, filename="epoch-{epoch}-{step}", save_top_k=-1, save_on_train_epoch_end=True),
    ]
    trainer = Trainer(max_steps=steps, max_epochs=-1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, val_check_interval=EVERY, check_val_every_n_epoch=None,
                      limit_val_batches=2, num_sanity_val_steps=0, callbacks=[*checkpoints, ResumeRandomState(), *extra])
    trainer.fit(model, data, ckpt_path=ckpt_path)
    assert trainer.global_step == steps
    return trainer


def _assert_same_parameters(straight: Parser, resumed: Parser, checkpoint: Path) -> None:
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming from {checkpoint.name}"


def test_resume_from_every_kind_of_checkpoint_is_exact(tiny_bert_dir, treebank, tmp_path):
    """Labeled batches only (the shipped likelihood config): from the step-3 checkpoint,
    taken before the validation at step 3 (the crash-recovery case), from the end of that
    validation, and from the end of the first epoch (step 6, the next epoch's loader)."""
    straight = _fit(tiny_bert_dir, treebank, tmp_path / "straight", "likelihood")
    assert straight.num_training_batches == 6
    written = {p.name for p in (tmp_path / "straight").glob("*.ckpt")}
    assert {"step=3.ckpt", "validated-step=3.ckpt", "epoch-epoch=0-step=6.ckpt"} <= written
    for name in ("step=3.ckpt", "validated-step=3.ckpt", "epoch-epoch=0-step=6.ckpt"):
        checkpoint = tmp_path / "straight" / name
        resumed = _fit(tiny_bert_dir, treebank, tmp_path / f"from-{name}", "likelihood", ckpt_path=checkpoint)
        _assert_same_parameters(straight.lightning_module, resumed.lightning_module, checkpoint)


def test_resume_with_a_moving_average_is_exact(tiny_bert_dir, treebank, tmp_path):
    """From before the validation at step 3 (the network holds the weights, the callback
    the average) and from after it (the other way round): the same weights and the same
    average at the end (the run ends on a validation: the network holds the average)."""
    straight = _fit(tiny_bert_dir, treebank, tmp_path / "straight", "likelihood", None, 64, STEPS, MovingAverage(0.5, 1))
    for name in ("step=3.ckpt", "validated-step=3.ckpt"):
        checkpoint = tmp_path / "straight" / name
        callback = MovingAverage(0.5, 1)
        resumed = _fit(tiny_bert_dir, treebank, tmp_path / f"from-{name}", "likelihood", checkpoint, 64, STEPS, callback)
        _assert_same_parameters(straight.lightning_module, resumed.lightning_module, checkpoint)
        assert callback._swapped
        _assert_same_parameters(_callback(straight, MovingAverage)._average, callback._average, checkpoint)


def _callback(trainer: Trainer, kind: type[Callback]) -> Callback:
    return next(c for c in trainer.callbacks if isinstance(c, kind))


@pytest.mark.parametrize("objective", ["entropy", "ge", "distill"])
def test_resume_with_an_unlabeled_stream_from_a_mid_epoch_checkpoint_is_exact(objective, tiny_bert_dir, treebank,
                                                                                tmp_path):
    straight = _fit(tiny_bert_dir, treebank, tmp_path / "straight", objective)
    checkpoint = tmp_path / "straight" / f"step={EVERY}.ckpt"
    state = torch.load(checkpoint, weights_only=False)
    assert state["global_step"] == EVERY
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0, "the checkpoint must be mid-epoch"
    resumed = _fit(tiny_bert_dir, treebank, tmp_path / "resumed", objective, ckpt_path=checkpoint)
    _assert_same_parameters(straight.lightning_module, resumed.lightning_module, checkpoint)


def test_resume_of_an_epoch_based_run_from_an_epoch_end_checkpoint_is_exact(tiny_bert_dir, treebank, tmp_path):
    """``max_epochs`` 3, no validation, a checkpoint at each epoch's end: the resumed run
    shuffles the next epoch as the uninterrupted one and stops after the same 18 steps."""
    def fit(root: Path, ckpt_path: Path | None = None) -> Trainer:
        seed_everything(0)
        data = DependencyDataModule(treebank=None, train=str(treebank), dev=str(treebank), seed=3, batch_tokens=300)
        model = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), terms=[Term(Likelihood())], warmup_steps=2)
        every_epoch = ModelCheckpoint(dirpath=root, filename="{epoch}", save_top_k=-1, save_on_train_epoch_end=True)
        trainer = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          limit_val_batches=0, num_sanity_val_steps=0, callbacks=[every_epoch, ResumeRandomState()])
        trainer.fit(model, data, ckpt_path=ckpt_path)
        assert trainer.global_step == 18
        return trainer

    straight = fit(tmp_path / "straight")
    checkpoint = tmp_path / "straight" / "epoch=0.ckpt"
    resumed = fit(tmp_path / "resumed", checkpoint)
    _assert_same_parameters(straight.lightning_module, resumed.lightning_module, checkpoint)


def test_a_teacher_with_a_cache_teaches_as_one_without(tiny_bert_dir, treebank, tmp_path, monkeypatch):
    """The cache (scores of the sentences seen in earlier batches, zeros as padding) changes
    nothing the student learns, and spares the teacher the sentences that come again."""
    asked, scored = [], []
    ask, score = Teacher.scores, Teacher._mean_scores
    monkeypatch.setattr(Teacher, "scores", lambda self, words, *a: asked.extend(words) or ask(self, words, *a))
    monkeypatch.setattr(Teacher, "_mean_scores", lambda self, words, *a: scored.extend(words) or score(self, words, *a))
    small = _first(treebank, 30, tmp_path / "30.conllu")  # 20 labeled, 10 unlabeled sentences, ~4 a step: again from step 3
    cached = _fit(tiny_bert_dir, small, tmp_path / "cached", "distill", steps=6)
    model = cached.lightning_module
    assert len(scored) == len(model._teacher.cache) < len(asked), "some unlabeled sentence must come again"
    plain = _fit(tiny_bert_dir, small, tmp_path / "plain", "distill", teacher_cache_mib=0, steps=6)
    assert plain.lightning_module._teacher.cache is None
    for (name, a), (_, b) in zip(model.named_parameters(), plain.lightning_module.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
