"""bf16 mixed precision in the full model: every objective's loss and gradients stay finite
and close to float32 (the engine itself runs in float64 with autocast off)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch import Callback, Trainer, seed_everything

from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import GeneralizedExpectation
from objectives.kl import Distillation
from objectives.likelihood import Likelihood
from objectives.objective import ObjectiveContext
from objectives.risk import Risk
from parser.data.batch import collate
from parser.data.datamodule import DependencyDataModule
from parser.model import Parser
from parser.network import Heads
from parser.predict import predict
from parser.training.terms import Term
from parser.data.sentences import read_conllu
from parser.data.vocab import build_label_vocab

# bf16 keeps 8 bits of mantissa in the encoder; the scorer and the engine run in float32/64.
LOSS_RTOL = 1e-2
GRADIENT_COSINE = 0.99

OBJECTIVES = {
    "likelihood": Likelihood,
    "risk": lambda: Risk(temperature=0.5),
    "entropy": EntropyRegularizer,
    "kl": Distillation,
    "ge": lambda: GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=1),
}


@pytest.fixture(scope="module")
def setup(tiny_bert_dir, ud_dir):
    sentences = read_conllu(ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu")[:12]
    labels = build_label_vocab(sentences)
    torch.manual_seed(0)
    # eval mode: no dropout anywhere (the encoder has its own), so both steps see the same network
    model = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=labels.itos).eval()
    teacher = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=labels.itos).eval()
    for parser in (model, teacher):  # biaffine weights start at zero: uniform trees, zero entropy gradient
        for biaffine in (parser.network.scorer.arc, parser.network.scorer.label):
            torch.nn.init.normal_(biaffine.weight, std=0.3)
    return model, teacher, collate(sentences, model.network.upos_vocab, model.network.label_vocab)


def _step(model: Parser, objective, batch, teacher_scores, dtype: torch.dtype | None) -> tuple[float, torch.Tensor]:
    model.zero_grad()
    with torch.autocast(model.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = objective(model(batch.words), batch, teacher_scores)
    loss.backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return float(loss), gradient


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_bf16_step_matches_float32(name, setup, device):
    model, teacher, batch = setup
    model, teacher = model.to(device), teacher.to(device)
    batch = move_data_to_device(batch, device)
    objective = OBJECTIVES[name]().to(device)  # GE keeps its constraint indices in buffers
    objective.setup(ObjectiveContext(stage="fit", tags=model.network.upos_vocab.itos, labels=model.network.label_vocab.itos,
                                     labeled_batches=lambda: [batch]))
    with torch.no_grad():
        teacher_scores = teacher(batch.words) if objective.needs_teacher else None
    loss32, grad32 = _step(model, objective, batch, teacher_scores, None)
    loss16, grad16 = _step(model, objective, batch, teacher_scores, torch.bfloat16)
    assert math.isfinite(loss16) and torch.isfinite(grad16).all()
    assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL, abs=1e-3)
    assert torch.nn.functional.cosine_similarity(grad16, grad32, dim=0) > GRADIENT_COSINE


class GradientNorms(Callback):
    """The gradients' total norm after each optimiser step (clipped, not yet zeroed)."""

    def __init__(self):
        self.norms, self.fused = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        grads = [p.grad.flatten().float() for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.cat(grads).norm()))
        self.fused.append(trainer.optimizers[0].defaults["fused"])


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", pytest.param("16-mixed", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="Lightning turns 16-mixed into bf16-mixed on a CPU"))])
def test_trainer_mixed_precision_run_is_finite_and_clipped(precision, tiny_bert_dir, ud_dir, tmp_path: Path):
    """Every precision trains with train.py's gradient clipping (Lightning refuses to clip a
    fused optimiser under mixed precision: the parser clips itself), finite and clipped;
    the optimiser is fused but where a gradient scaler (16-mixed) must unscale first."""
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:30]
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small), dev=str(small), labeled_size=10, batch_tokens=200)
    model = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), terms=[Term(Likelihood()), Term(EntropyRegularizer(), "unlabeled")],
                   warmup_steps=1)
    clip, norms = 1e-3, GradientNorms()  # far below any gradient's norm here: every step is clipped
    trainer = Trainer(max_steps=3, precision=precision, gradient_clip_val=clip, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, limit_val_batches=2, callbacks=[norms])
    trainer.fit(model, data)
    assert all(math.isfinite(float(trainer.callback_metrics[k])) for k in ("train/loss", "val/las"))
    assert len(norms.norms) == 3 and all(0 < norm <= clip * (1 + 1e-3) for norm in norms.norms)
    assert norms.fused == [precision != "16-mixed"] * 3


def test_predict_bf16_mixed_parses_like_float32(setup, ud_dir, tmp_path: Path, monkeypatch):
    """``parser.predict --precision bf16-mixed``: parsing runs under bf16 autocast, every
    sentence is written, heads and labels as in float32 but for near ties (the encoder's
    vectors carry 8 bits of mantissa)."""
    model, _, _ = setup
    autocast = []
    parse = Parser.parse
    monkeypatch.setattr(Parser, "parse", lambda self, *a, **k: autocast.append(
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu")) or parse(self, *a, **k))
    saved = model.cpu().save(tmp_path / "parser")
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:12]
    source = tmp_path / "in.conllu"
    source.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    outputs = {}
    for precision in ("32-true", "bf16-mixed"):
        predict(str(saved), str(source), str(tmp_path / f"{precision}.conllu"), device="cpu", precision=precision)
        outputs[precision] = read_conllu(tmp_path / f"{precision}.conllu")
    words = [(w, h, d) for s in outputs["32-true"] for w, h, d in zip(s.words, s.heads, s.deprels)]
    half = [(w, h, d) for s in outputs["bf16-mixed"] for w, h, d in zip(s.words, s.heads, s.deprels)]
    assert autocast == [False, torch.bfloat16]
    assert len(half) == len(words) == sum(len(s.words) for s in read_conllu(source))
    assert sum(a == b for a, b in zip(words, half)) >= 0.9 * len(words)
