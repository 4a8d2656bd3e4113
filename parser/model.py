"""The Lightning module: a network trained with a list of loss terms, decoded by one policy."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn

from objectives.conventions import ConfigurationError
from objectives.objective import ObjectiveContext, Scores

from parser.data.batch import Batch
from parser.data.vocab import build_label_vocab
from parser.decoding.decode import Decoding, root_label
from parser.decoding.parsing import Parse, parse_batch, parse_words
from parser.network import EncoderOptions, Heads, Network
from parser.training import checkpoint as checkpoint_files
from parser.training.metrics import ParseScores
from parser.training.optimizer import adamw_linear, check_finite_gradients, clip_gradients, parameter_groups
from parser.training.teacher import Teacher, TeacherOptions
from parser.training.terms import Term, TermSet
from parser.training.warm_start import start_from

EVALUATED = {"fit": ("val", "dev"), "validate": ("val", "dev"), "test": ("test", "test")}  # stage: (scores, data split)


class Parser(LightningModule):
    """Graph-based dependency parser: a :class:`~parser.network.Network` trained with
    :class:`~parser.training.terms.Term` s.

    Args:
        encoder: transformers model name or path (see ``parser.network.pretrained.resolve_model_path``).
        encoder_options: how the encoder makes word vectors (:class:`~parser.network.EncoderOptions`).
        heads: biaffine sizes and dropout, and the UPOS tagger (built whenever a term needs
            tag scores; :class:`~parser.network.Heads`).
        terms: the training loss, a list of terms (objective, data, weight); ``train.py``'s
            default is tree likelihood on the labeled sentences.
        teacher: whose scores the terms that need a teacher read (distillation): a saved parser, a
            list of them (an ensemble), or :class:`~parser.training.teacher.TeacherOptions` (also
            ``ema``, a moving average of this parser's weights instead, and ``cache_mib``).
        decoding: trees from scores (:class:`~parser.decoding.decode.Decoding`: tree set, projective,
            crossing margin); its tree set (``multiroot``) is every term's too.
        lr, encoder_lr, weight_decay, warmup_steps: AdamW with linear warm-up then linear
            decay to 0 over the run (the transformer at ``encoder_lr``, the rest at ``lr``).
        labels: the label vocabulary; set from the data module when training starts and
            saved with the checkpoint.
        init: a saved parser (``.ckpt`` or :meth:`save` directory) whose network this one
            starts from, labels matched by name (:mod:`parser.training.warm_start`): fine-tuning a
            base parser; unlike ``--ckpt_path`` (resume) the run, optimiser and data start anew.
    """

    ADAMW_BETAS = (0.9, 0.9)  # Dozat & Manning's beta2 = 0.9: the second moment adapts fast

    def __init__(self, encoder: str = "all-MiniLM-L6-v2", encoder_options: EncoderOptions = EncoderOptions(),
                 heads: Heads = Heads(), terms: list[Term] | None = None,
                 teacher: str | list[str] | TeacherOptions | None = None, decoding: Decoding = Decoding(),
                 lr: float = 2e-3, encoder_lr: float = 5e-5, weight_decay: float = 0.01, warmup_steps: int = 200,
                 labels: list[str] | None = None, init: str | None = None):
        super().__init__()
        self.terms = TermSet(terms or [])
        heads = dataclasses.replace(heads, tagger=heads.tagger or self.terms.needs("tag_scores"))
        self.encoder_options, self.heads, self.decoding = encoder_options, heads, decoding
        self.teacher = TeacherOptions.of(teacher)
        self.save_hyperparameters({"encoder": encoder, "encoder_options": asdict(encoder_options), "heads": asdict(heads),
                                   "teacher": asdict(self.teacher), "decoding": asdict(decoding), "lr": lr,
                                   "encoder_lr": encoder_lr, "weight_decay": weight_decay, "warmup_steps": warmup_steps,
                                   "labels": labels, "init": init})
        self.network: Network | None = None
        self._teacher: Teacher | None = None  # not a submodule: outside state_dict and the optimiser
        self._unlabeled_skipped = 0
        self._step_terms: dict[str, Tensor] = {}  # this step's loss and terms, named when its gradient is not finite
        if labels is not None:
            self.build(labels)

    def build(self, labels: list[str], source: str | Path | None = None, treebanks: list[str] = ()) -> None:
        """The network, once the labels (and the training treebanks) are known (``source``: the
        encoder's files, no weights)."""
        self.network = Network(self.hparams.encoder, self.encoder_options, self.heads, labels, source, treebanks)
        self.hparams["labels"] = list(labels)
        if self.network.encoder.treebanks is not None:
            self.hparams["treebanks"] = list(self.network.encoder.treebanks.itos)
        self.split_scores = nn.ModuleDict({"val": ParseScores(self.network), "test": ParseScores(self.network)})

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        fit = stage == "fit"
        if self.network is None:
            own = [] if data is None or data.label_vocab is None else data.label_vocab.itos
            treebanks = data.treebanks("train") if data is not None and self.encoder_options.treebank_embedding else ()
            if self.hparams.init:  # resuming builds the same network, then restores its own weights
                self._start_from(self.hparams.init, own, treebanks)
            elif not own:
                raise ConfigurationError("the parser needs labels: train it on labeled trees (--data.labeled_size 1 "
                                         "or more), or start it from a parser that has them (--model.init PATH)")
            else:
                self.build(own, treebanks=treebanks)
        if data is not None:
            data.label_vocab = self.network.label_vocab  # the network's labels: the checkpoint's, or the union
        if data is not None:
            data.tokenize = self.network.encoder.subwords  # DataLoader workers tokenise while the model computes
            if stage in EVALUATED:  # with several treebanks in the split, a score for each
                self.split_scores[EVALUATED[stage][0]] = ParseScores(self.network, data.treebanks(EVALUATED[stage][1]))
        self.terms.setup(ObjectiveContext(
            stage=stage, multiroot=self.decoding.multiroot, tags=self.network.upos_vocab.itos,
            labels=self.network.label_vocab.itos, labeled_batches=data.gold_batches if fit and data and data.train_sentences else None,
            total_steps=self.total_steps() if fit else None))
        if not fit:
            return  # the teacher only trains: test, validate and predict do without its file
        unlabeled = data is not None and data.has_unlabeled
        labeled = data is None or bool(data.train_sentences)
        self.terms.check(labeled, unlabeled, unlabeled and data.unlabeled_has_upos, self.network.tagger is not None,
                         self.teacher.given)
        if self._teacher is None and self.terms.needs("teacher"):
            self._teacher = self.teacher.build(self.network, self.decoding.multiroot, _network_of)

    def _start_from(self, path: str, labels: list[str], treebanks: list[str]) -> None:
        """The network built from the saved parser's encoder files and started from its weights;
        it keeps every label and treebank vector the saved parser has, ``labels`` and
        ``treebanks`` (the training data's) added."""
        saved = checkpoint_files.read(path)
        labels = build_label_vocab((), [*(saved.hparams.get("labels") or []), *labels]).itos
        with checkpoint_files.unpacked(saved.encoder_files) as source:
            self.build(labels, source, [*(saved.hparams.get("treebanks") or []), *treebanks])
        start_from(self.network, self.hparams.encoder, saved, path)

    def forward(self, words: list[list[str]], subwords=None, treebanks=None) -> Scores:
        """The network's scores of a batch of word lists (see :class:`~parser.network.Network`)."""
        return self.network(words, subwords, treebanks)

    def on_fit_end(self) -> None:
        """The teacher goes where the parser went: Lightning moves the parser back to the
        CPU after ``fit``, and a teacher left on the GPU would hold its memory."""
        if self._teacher is not None:
            self._teacher.to(self.device)

    # ----------------------------------------------------------------- training
    def training_step(self, batch: Batch | dict[str, Batch], batch_idx: int) -> Tensor:
        labeled, unlabeled = (batch.get("labeled"), batch["unlabeled"]) if isinstance(batch, dict) else (batch, None)
        loss, values, weights = self.terms(labeled, unlabeled, self.global_step, lambda b: self(b.words, b.subwords, b.treebanks),
                                           self.network.with_predicted_tags, self._teacher_scores)
        size = (labeled or unlabeled).lengths.shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        if unlabeled is not None:  # malformed unlabeled lines skipped so far, all processes
            self._unlabeled_skipped += unlabeled.skipped
            self.log("train/unlabeled_skipped", float(self._unlabeled_skipped), reduce_fx="sum", sync_dist=True, batch_size=size)
        self._step_terms = {"loss": loss.detach(), **values}
        for name, value in values.items():
            self.log(f"train/{name}", value, batch_size=size)
        for name, weight in weights.items():
            self.log(f"train/weight/{name}", weight, batch_size=size)
        return loss

    def _teacher_scores(self, batch: Batch) -> Scores:
        return self._teacher.scores(batch.words, self.network.label_vocab.itos, self.device, batch.treebanks)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self._teacher is not None:
            self._teacher.follow(self.network)

    def total_steps(self) -> int:
        """The run's length in optimiser steps, over which the learning rate (and any
        decaying weight) falls to 0."""
        steps = self.trainer.estimated_stepping_batches
        if math.isinf(steps):
            raise ConfigurationError("training needs a finite length (trainer.max_steps or max_epochs): the learning rate decays to 0 over it")
        return max(int(steps), 1)

    def configure_optimizers(self):
        groups = parameter_groups(self.network, self.hparams.lr, self.hparams.encoder_lr)
        # fused unless a gradient scaler (16-mixed) must unscale the gradients before clipping
        scaled = getattr(self.trainer.precision_plugin, "scaler", None) is not None
        return adamw_linear(groups, self.ADAMW_BETAS, self.hparams.weight_decay, self.hparams.warmup_steps,
                            self.total_steps(), self.device, fuse=not scaled)

    def on_before_optimizer_step(self, optimizer) -> None:
        if getattr(self.trainer.precision_plugin, "scaler", None) is None:  # 16-mixed: the scaler skips such steps
            check_finite_gradients(list(self.parameters()), self.global_step, self._step_terms)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """``trainer.gradient_clip_val``, clipped here because Lightning's mixed-precision plugin
        refuses any fused optimiser, even under bf16-mixed, which has no scaler; under 16-mixed
        the optimiser is not fused and its gradients arrive unscaled."""
        clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ----------------------------------------------------------------- evaluation
    def _evaluate(self, batch: Batch, split: str) -> None:
        scores = self(batch.words, batch.subwords, batch.treebanks)
        heads, labels = self.decoding(scores.arcs, scores.labels, batch.lengths, root_label(self.network.label_vocab.itos))
        self.split_scores[split].update(batch, heads, labels, scores.tags, self.network.tag_targets(batch.upos))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._log_scores("test")

    def _log_scores(self, split: str) -> None:
        values = {f"{split}/{k}": v for k, v in self.split_scores[split].compute().items()}
        each = {k: v for k, v in values.items() if k.count("/") > 1}  # per treebank: logged, not shown
        self.log_dict({k: v for k, v in values.items() if k not in each}, prog_bar=True, sync_dist=True)
        self.log_dict(each, sync_dist=True)  # already equal on every process (torchmetrics)
        self.split_scores[split].reset()

    # ----------------------------------------------------------------- parsing
    def predict_step(self, batch: Batch, batch_idx: int) -> list[tuple[int, Parse]]:
        """``(sentence index, parse)`` per sentence, for writing CoNLL-U back in order."""
        return list(zip(batch.index.tolist(), parse_batch(self.network, self.decoding, batch)))

    def parse(self, sentences: list[list[str]], batch_size: int = 32, marginals: bool = False,
              treebank: str | list[str | None] | None = None, progress: Callable[[int], object] | None = None
              ) -> list[Parse]:
        """Parse pre-tokenised sentences (each a list of words): heads, labels, with a
        tagger UPOS and, on request, arc marginals; ``treebank``: theirs, for treebank
        vectors; ``progress``: told each batch's size (:func:`~parser.decoding.parsing.parse_words`)."""
        return parse_words(self.network, self.decoding, sentences, batch_size, marginals, treebank, progress)

    # ----------------------------------------------------------------- files
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[checkpoint_files.ENCODER_FILES] = checkpoint_files.encoder_files(self.network.encoder)
        checkpoint["unlabeled_skipped"] = self._unlabeled_skipped
        if self._teacher is not None and self._teacher.state_dict() is not None:
            checkpoint["ema_teacher"] = self._teacher.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._unlabeled_skipped = checkpoint.get("unlabeled_skipped", 0)
        if "ema_teacher" in checkpoint and self._teacher is not None:  # resuming: the average goes on
            self._teacher.load_state_dict(checkpoint["ema_teacher"])

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> Parser:
        """A trained parser, in eval mode, from a ``.ckpt`` file or a :meth:`save`
        directory; the encoder is rebuilt from the files saved with it (no network, no
        encoder package needed). Its terms are not saved: a loaded parser parses."""
        saved = checkpoint_files.read(path, map_location)
        parser = cls.unweighted(saved)
        saved.load_weights_into(parser, map_location)
        return parser.to(map_location).eval()

    @classmethod
    def unweighted(cls, saved: checkpoint_files.SavedParser, labels: Sequence[str] | None = None,
                   treebanks: Sequence[str] | None = None) -> Parser:
        """A parser of ``saved``'s settings and encoder, its weights not loaded; ``labels`` and
        ``treebanks``: other vocabularies than the saved parser's."""
        h = saved.hparams
        parser = cls(h["encoder"], EncoderOptions(**h["encoder_options"]), Heads(**h["heads"]),
                     teacher=TeacherOptions.of(h["teacher"], h.get("teacher_ema"), h.get("teacher_cache_mib")),
                     decoding=Decoding(**h["decoding"]))
        with checkpoint_files.unpacked(saved.encoder_files) as source:
            parser.build(list(h["labels"] if labels is None else labels), source,
                         list(h.get("treebanks") or () if treebanks is None else treebanks))
        return parser

    def save(self, directory: str | Path) -> Path:
        """Write this parser to ``directory`` for :meth:`load` elsewhere: weights as
        safetensors, ``parser.json`` (hyperparameters, label and UPOS vocabularies) and the
        encoder's config and tokenizer files."""
        if self.network is None:
            raise RuntimeError("nothing to save: the parser has no label vocabulary yet (train it first)")
        hparams = {**self.hparams, "upos_tags": list(self.network.upos_vocab.itos)}
        return checkpoint_files.write_directory(directory, hparams, self, self.network.encoder)


def _network_of(path: str) -> tuple[Network, bool]:
    """A saved parser's network and whether it parses multi-root trees (what a teacher reads of it)."""
    parser = Parser.load(path)
    return parser.network, parser.decoding.multiroot
