"""Encoder adaptation: masked-language-model training of the encoder on the target text.

Before parsing, the pretrained encoder keeps learning its own pretraining task on the text
of the language to parse (Gururangan et al. 2020, "Don't stop pretraining"; Chau, Lin &
Smith 2020, "Parsing with multilingual BERT, a small corpus, and a small treebank"). The
text is what the parsing run reads, through the same data options: the training file
(every sentence, trees ignored) and the ``--data.unlabeled`` files, streamed; MLM loss on
the dev sentences is the validation score. The result is a ``from_pretrained`` directory
that ``--model.encoder DIR`` takes::

    python -m parser.adapt --data.treebank UD_Wolof-WTB --model.encoder multilingual-e5-small \\
        --trainer.max_steps 400 --output runs/adapt/wolof-e5
    python train.py fit --config configs/likelihood_low_resource.yaml --data.treebank UD_Wolof-WTB \\
        --model.encoder runs/adapt/wolof-e5

``--ckpt_path .../checkpoints/last.ckpt`` resumes an interrupted run exactly (weights,
optimizer, the stream's position, random states); ``--output`` is written when it ends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor, nn
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import AutoModelForMaskedLM, AutoTokenizer
from transformers.utils import logging as hf_logging


from parser.cli import run_reporting_errors
from parser.data.batch import Batch
from parser.data.datamodule import DependencyDataModule
from parser.data.stream import Continuing, SentenceStream, Source
from parser.network.encoder import Subwords, SubwordTokenizer
from parser.network.pretrained import resolve_model_path
from parser.training.callbacks import ResumeRandomState, ValidateAtEnd
from parser.training.optimizer import adamw_linear

MONITOR = "val/mlm_loss"


class TextDataModule(DependencyDataModule):
    """The text of a parsing run's data, for encoder adaptation: training batches stream
    every sentence of the training file (trees ignored, ``labeled_size`` or not) and of the
    ``unlabeled`` files, pass after pass; validation batches are the dev sentences. Same
    options as :class:`DependencyDataModule`."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if stage in ("fit", None):
            train = [str(path) for path in self.paths("train")]
            tail = [s for s in self.unlabeled_sources if s.path not in train]
            self.unlabeled_sources = [*(Source(path) for path in train), *tail]

    def train_dataloader(self) -> Unending:
        stream = SentenceStream(self.unlabeled_sources, self.upos_vocab, self.batch_tokens, self.max_batch_sentences,
                                self.shuffle_buffer, self.seed + 1, self.on_bad_unlabeled, tokenize=self.tokenize,
                                upos=False)
        return Unending(StatefulDataLoader(stream, batch_size=None, num_workers=self.num_workers))


class Unending(Continuing):
    """The endless stream as one epoch with a length: Lightning reads a batch ahead of an
    iterable of unknown length, and a checkpoint would then count that batch as used."""

    def __len__(self) -> int:
        return sys.maxsize


def _load_masked_lm(path: str) -> nn.Module:
    """``AutoModelForMaskedLM`` of ``path``; a model saved without its MLM head (the sentence
    encoders we ship) gets a fresh one, its output projection tied to the input embeddings."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report would list the fresh head's weights
    try:
        return AutoModelForMaskedLM.from_pretrained(path)
    finally:
        hf_logging.set_verbosity(verbosity)


class MaskedLanguageModel(LightningModule):
    """A pretrained encoder with its masked-language-model head, trained on words.

    Whole-word masking: each word is chosen with probability ``mask_probability`` (at
    least one per batch); of the chosen words' subwords 80% become the mask token, 10% a
    random token and 10% stay, and the loss is the cross-entropy of the original subword
    at each of them. The masks come from ``(mask_seed, step)`` alone, so a resumed run masks as
    the uninterrupted one did; validation masks from ``(mask_seed, batch)``, the same each time.

    Args:
        encoder: hub name, local directory or offline name (:func:`resolve_model_path`).
        mask_probability: share of words masked.
        lr: AdamW learning rate of the pretrained weights (embeddings included).
        head_lr: learning rate of the MLM head's own weights (new ones when the encoder
            came without a head); its output projection is the input embeddings, at ``lr``.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up, then linear decay to 0 at ``max_steps``.
        max_length: subwords per window (default: the model's limit); longer sentences are
            cut into overlapping windows, as the parser does.
        mask_seed: seed of the masks (``--seed_everything`` on the command line).
    """

    ADAMW_BETAS = (0.9, 0.98)

    def __init__(self, encoder: str = "multilingual-e5-small", mask_probability: float = 0.15, lr: float = 5e-5,
                 head_lr: float = 1e-3, weight_decay: float = 0.01, warmup_steps: int = 50,
                 max_length: int | None = None, mask_seed: int = 0) -> None:
        super().__init__()
        if not 0.0 < mask_probability < 1.0:
            raise ValueError(f"mask_probability must be in (0, 1), got {mask_probability}")
        self.save_hyperparameters()
        path = resolve_model_path(encoder)
        self.model = _load_masked_lm(path)
        heads = [m for name, m in self.model.named_children() if name != self.model.base_model_prefix]
        if len(heads) != 1:
            raise ValueError(f"{encoder}: expected one MLM head module beside the encoder, found {len(heads)}")
        self.head = heads[0]
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.mask_token_id is None:
            raise ValueError(f"{encoder}: its tokenizer has no mask token")
        limit = min(self.model.config.max_position_embeddings, tokenizer.model_max_length)
        self.subwords = SubwordTokenizer(tokenizer, limit, max_length=max_length)
        self.train()  # from_pretrained returns eval mode; modules start in training mode

    @property
    def tokenizer(self):
        return self.subwords.tokenizer

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None:
            datamodule.tokenize = self.subwords  # DataLoader workers tokenise while the model computes

    def mask(self, sub: Subwords, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(input ids with the chosen words masked ``(W, L)``, boolean ``(W, L)`` of the
        positions to predict), drawn on CPU from ``generator``."""
        columns = sub.column_word.cpu()
        is_word = columns >= 0
        n_flat = int(columns.max()) + 1
        draw = torch.rand(n_flat, generator=generator)
        chosen = draw < self.hparams.mask_probability
        present = torch.zeros(n_flat, dtype=torch.bool)
        present[columns[is_word]] = True
        if not (chosen & present).any():  # at least one word per batch
            chosen[draw.masked_fill(~present, 2.0).argmin()] = True
        target = is_word & chosen[columns.clamp(min=0)]
        action = torch.rand(columns.shape, generator=generator)
        random_ids = torch.randint(self.model.get_input_embeddings().num_embeddings, columns.shape, generator=generator)
        ids = sub.input_ids.cpu().clone()
        ids = torch.where(target & (action < 0.8), self.tokenizer.mask_token_id, ids)
        ids = torch.where(target & (action >= 0.8) & (action < 0.9), random_ids, ids)
        return ids.to(self.device), target.to(self.device)

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """Mean cross-entropy of the original subwords at the masked positions; the
        vocabulary projection runs at those positions only."""
        sub = batch.subwords if batch.subwords is not None else self.subwords(batch.words)
        sub = sub.to(self.device)
        ids, target = self.mask(sub, generator)
        hidden = self.model.base_model(input_ids=ids, attention_mask=sub.attention_mask).last_hidden_state
        logits = self.head(hidden[target])  # (masked, vocabulary)
        return nn.functional.cross_entropy(logits.float(), sub.input_ids[target])

    def _generator(self, *key: int) -> torch.Generator:
        return torch.Generator().manual_seed(hash((self.hparams.mask_seed, *key)) % 2**63)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = self.loss(batch, self._generator(0, self.global_step))
        self.log("train/mlm_loss", loss, batch_size=len(batch.words), prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss = self.loss(batch, self._generator(1, batch_idx))
        self.log(MONITOR, loss, batch_size=len(batch.words), prog_bar=True)

    def configure_optimizers(self):
        total = self.trainer.max_steps
        if total is None or total < 1:
            raise MisconfigurationException("adaptation needs --trainer.max_steps: the text is streamed without end "
                             "and the learning rate decays to 0 over the steps")
        embeddings = {id(p) for p in self.model.get_input_embeddings().parameters()}
        head = [p for p in self.head.parameters() if id(p) not in embeddings]
        encoder = list(self.model.base_model.parameters())
        groups = [{"params": encoder, "lr": self.hparams.lr}, {"params": head, "lr": self.hparams.head_lr}]
        return adamw_linear(groups, self.ADAMW_BETAS, self.hparams.weight_decay, self.hparams.warmup_steps, total,
                            self.device)

    def save(self, directory: str | Path) -> None:
        """Write the adapted encoder (with its MLM head) and its tokenizer as a
        ``from_pretrained`` directory: ``--model.encoder DIRECTORY`` parses with it."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


class AdaptCLI(LightningCLI):
    """``python -m parser.adapt``: fit a :class:`MaskedLanguageModel` on a
    :class:`TextDataModule`, then write the encoder to ``--output``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--output", required=True, help="directory for the adapted encoder (from_pretrained form)")
        parser.add_argument("--ckpt_path", default=None, help="a last.ckpt of this stage to resume from")
        parser.link_arguments("seed_everything", "model.mask_seed")

    def instantiate_trainer(self, **kwargs):
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True) and "logger" not in kwargs:
            kwargs["logger"] = CSVLogger(Path(config.get("default_root_dir") or "runs"), name="adapt")
        return super().instantiate_trainer(**kwargs)


def main(argv: list[str] | None = None) -> Path:
    """Run the adaptation stage on ``argv`` (default ``sys.argv``); the output directory."""
    cli = AdaptCLI(
        MaskedLanguageModel,
        TextDataModule,
        args=argv,
        run=False,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "default_root_dir": "runs",
            "max_epochs": -1,
            "val_check_interval": 100,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 10,
            "gradient_clip_val": 5.0,
            "callbacks": [
                ModelCheckpoint(save_last=True, save_top_k=0, save_on_train_epoch_end=False),
                ValidateAtEnd(),
                ResumeRandomState(),
                LearningRateMonitor(logging_interval="step"),
            ],
        },
    )
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=cli.config.ckpt_path)
    output = Path(cli.config.output)
    if cli.trainer.is_global_zero:
        cli.model.save(output)
        print(f"adapted encoder after {cli.trainer.global_step} steps: {output}\n"
              f"next: python train.py fit ... --model.encoder {output}", file=sys.stderr)
    return output


if __name__ == "__main__":
    if "--debug" in sys.argv:  # tracebacks for user errors (parser.cli), not a LightningCLI option
        sys.argv.remove("--debug")
        os.environ["TREEEXP_DEBUG"] = "1"
    run_reporting_errors(main)
