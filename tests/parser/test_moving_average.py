"""A moving average of the weights (``parser.training.callbacks.MovingAverage``): validation
scores it and ``best.ckpt`` holds it, while training goes on from the weights themselves."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from objectives.conventions import ConfigurationError
from objectives.likelihood import Likelihood
from parser.data.datamodule import DependencyDataModule
from parser.model import Parser
from parser.network import EncoderOptions, Heads
from parser.training.callbacks import MovingAverage
from parser.training.terms import Term


def _weights(parser: Parser) -> dict[str, torch.Tensor]:
    """A copy on the CPU, where the network ends a fit on any device (Lightning's teardown)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in parser.network.named_parameters()}


class Record(Callback):
    """The network's weights at the start and at the end of each training step (by step number)."""

    def __init__(self) -> None:
        self.start: dict[int, dict[str, torch.Tensor]] = {}
        self.end: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.start[trainer.global_step + 1] = _weights(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.end[trainer.global_step] = _weights(pl_module)


@pytest.mark.parametrize("freeze", [False, "embeddings"])
def test_validation_and_checkpoints_see_the_average_training_the_weights(tiny_bert_dir, small_treebank, tmp_path, freeze):
    """decay 0.75 from step 1 on, validation every 2 steps: the checkpoint after each
    validation holds the average of the steps so far, and step 3 starts from step 2's
    weights, not from the average validated between them; with frozen subword embeddings
    (which the average skips) too."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=300)
    model = Parser(encoder=str(tiny_bert_dir), encoder_options=EncoderOptions(freeze=freeze), heads=Heads(32, 16),
                   terms=[Term(Likelihood())], warmup_steps=1, lr=1e-2)
    record = Record()
    validated = ModelCheckpoint(dirpath=tmp_path, filename="{step}", monitor="val/las", mode="max", save_top_k=-1,
                                save_weights_only=True, save_on_train_epoch_end=False)
    trainer = Trainer(max_steps=4, max_epochs=-1, val_check_interval=2, check_val_every_n_epoch=None, limit_val_batches=1,
                      num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[MovingAverage(decay=0.75), record, validated])
    trainer.fit(model, data)

    end = record.end
    average = {1: end[1]}
    for step in (2, 3, 4):
        average[step] = {name: 0.75 * average[step - 1][name] + 0.25 * end[step][name] for name in end[step]}
    for step in (2, 4):
        saved = torch.load(tmp_path / f"step={step}.ckpt", weights_only=True, map_location="cpu")["state_dict"]
        for name, value in average[step].items():
            torch.testing.assert_close(saved[f"network.{name}"], value, msg=f"{name} at step {step}")
    for name in end[2]:
        assert torch.equal(record.start[3][name], end[2][name]), f"step 3 starts from the average in {name}"
        torch.testing.assert_close(model.network.state_dict()[name].cpu(), average[4][name])  # the run ends with the average
    assert any(not torch.allclose(average[2][name], end[2][name]) for name in end[2]), "the average is the weights"


@pytest.mark.parametrize("decay", [0.0, 1.0, 1.5])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises(ConfigurationError, match="decay"):
        MovingAverage(decay=decay)
