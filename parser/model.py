"""The Lightning module: encoder + biaffine scorer, trained with any objective."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics.classification import MulticlassAccuracy

from objectives.conventions import IGNORE_INDEX, ConfigurationError
from objectives.mtt import marginals as arc_marginals
from objectives.objective import Objective, ObjectiveContext, Scores
from objectives.schedule import linear_warmup_decay

from . import checkpoint as checkpoint_files
from .batch import Batch, collate
from .biaffine import BiaffineScorer
from .decode import Decoding
from .encoder import Subwords, WordEncoder
from .metrics import AttachmentScore, universal_index
from .sentences import Sentence
from .vocab import Vocab, build_upos_vocab, reindex_labels


class ScoringParts(nn.Module):
    """A parser's encoder and scorer alone: what scores sentences (an EMA teacher)."""

    def __init__(self, encoder: WordEncoder, scorer: BiaffineScorer, label_vocab: Vocab):
        super().__init__()
        self.encoder, self.scorer, self.label_vocab = encoder, scorer, label_vocab

    @classmethod
    def of(cls, parser: Parser) -> ScoringParts:
        return cls(parser.encoder, parser.scorer, parser.label_vocab)

    def parts(self) -> list[Tensor]:
        """Every parameter and floating-point buffer, in a fixed order."""
        return [*self.parameters(), *(b for b in self.buffers() if b.is_floating_point())]

    def forward(self, words: list[list[str]]) -> Scores:
        return self.scorer(self.encoder(words))


def _batches(sentences: Sequence[Sentence], upos_vocab: Vocab, size: int = 256) -> Iterator[Batch]:
    """The sentences as Batches of ``size`` (gold trees and UPOS; no labels)."""
    for start in range(0, len(sentences), size):
        yield collate(sentences[start : start + size], upos_vocab, None)


@dataclass
class Parse:
    """One parsed sentence: ``heads[i]``/``labels[i]``/``tags[i]`` for word i+1 (``tags``:
    predicted UPOS, ``None`` without a tagger); ``marginals`` ``(n+1, n+1)``."""

    words: list[str]
    heads: list[int]
    labels: list[str]
    marginals: Tensor | None = None
    tags: list[str] | None = None


class Parser(LightningModule):
    """Graph-based dependency parser.

    Args:
        encoder: transformers model name or path (see ``parser.encoder.resolve_model_path``).
        pooling: subword pooling, ``first`` or ``mean``.
        encoder_dropout: dropout on the encoder's word vectors.
        freeze_encoder: keep the transformer's weights fixed (train the scorer only), or
            ``embeddings``: only its subword embedding matrix (faster steps and ~3x less
            optimizer memory for a multilingual encoder with a large vocabulary), or a
            number ``k``: its embeddings and first ``k`` layers (no backward pass below).
        max_subwords: subwords per transformer window, special tokens included (default:
            the model's limit); longer sentences are read in overlapping windows.
        window_stride: subwords shared by consecutive windows.
        layer_mix: word vectors from a learned scalar mix of all the encoder's layers
            instead of its last layer.
        characters: size of a character-level vector (a BiGRU over the word's bytes)
            concatenated to each word vector; 0 for none.
        word_dropout: in training, the probability of masking all of a word's subwords.
        lstm_layers, lstm_size: bidirectional LSTM layers (``lstm_size`` per direction)
            over the word vectors before the scorer and the tagger, as in Dozat & Manning
            (2017); 0 layers for none.
        arc_size, label_size, dropout: biaffine MLP sizes and dropout.
        tagger_weight: with a positive weight, a UPOS tagging head on the shared encoder,
            trained on the labeled words (its cross-entropy, times this weight, joins the
            supervised loss); it tags raw text in ``parse``/``parser.predict`` and gives
            objectives that need UPOS (GE) its tag distributions on untagged words.
        supervised: the objective on labeled batches (``train.py``'s default: tree
            likelihood, ``objectives.Likelihood``); ``None`` for none.
        unsupervised: the objective on unlabeled batches (entropy, KL, GE, ...), applied to
            the labeled batch's words when there is no unlabeled data.
        unsupervised_weight: lambda in ``loss = supervised + lambda * unsupervised``.
        unsupervised_warmup: steps over which lambda ramps up linearly from 0.
        unsupervised_schedule: after the warm-up, lambda stays ``constant`` or follows a
            ``linear_decay`` to 0 at the last training step (for terms whose signal is worth
            most early, like GE targets from a small sample; docs/experiments.md, section 2).
        teacher: checkpoint of this framework whose scores the unsupervised objective
            needs (distillation). It is frozen and not saved in this model's checkpoints.
        teacher_ema: instead of a teacher file, a teacher that is the exponential moving
            average of this parser's weights (``t = teacher_ema * t + (1 - teacher_ema) * s``
            after every optimiser step, starting from the parser as it begins to train):
            self-distillation that needs no labeled data beyond the run's own.
        projective: decode the best projective tree (Eisner) instead of the best
            spanning tree, for treebanks where the parser invents crossing arcs.
        crossing_margin: instead, keep a sentence's best spanning tree only where it
            outscores its best projective tree by more than this margin (a penalty on
            crossing arcs; choose it on dev with ``python -m parser.crossing_margin``).
        multiroot: decode (and score) multi-root trees instead of single-root ones.
        lr, encoder_lr, weight_decay, warmup_steps: AdamW with linear warm-up then linear
            decay to 0 over the run (``trainer.max_steps`` or the epochs' steps).
        labels: the label vocabulary; set from the data module when training starts and
            saved with the checkpoint.
        encoder_source: a directory with the encoder's config and tokenizer files to build
            it from, without pretrained weights (:meth:`load` passes the files a checkpoint
            carries); not a hyperparameter.
    """

    ADAMW_BETAS = (0.9, 0.9)  # Dozat & Manning's beta2 = 0.9: the second moment adapts fast

    def __init__(
        self,
        encoder: str = "all-MiniLM-L6-v2",
        pooling: str = "first",
        encoder_dropout: float = 0.0,
        freeze_encoder: bool | Literal["embeddings"] | int = False,
        max_subwords: int | None = None,
        window_stride: int = 128,
        layer_mix: bool = False,
        characters: int = 0,
        word_dropout: float = 0.0,
        lstm_layers: int = 0,
        lstm_size: int = 400,
        arc_size: int = 500,
        label_size: int = 100,
        dropout: float = 0.33,
        tagger_weight: float = 0.0,
        supervised: Objective | None = None,
        unsupervised: Objective | None = None,
        unsupervised_weight: float = 1.0,
        unsupervised_warmup: int = 0,
        unsupervised_schedule: Literal["constant", "linear_decay"] = "constant",
        teacher: str | None = None,
        teacher_ema: float | None = None,
        multiroot: bool = False,
        projective: bool = False,
        crossing_margin: float | None = None,
        lr: float = 2e-3,
        encoder_lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_steps: int = 200,
        labels: list[str] | None = None,
        encoder_source: str | Path | None = None,
    ):
        super().__init__()
        self.decoding = Decoding(multiroot, projective, crossing_margin)
        if unsupervised_schedule not in ("constant", "linear_decay"):
            raise ConfigurationError(f"unsupervised_schedule must be 'constant' or 'linear_decay', got {unsupervised_schedule!r}")
        self.save_hyperparameters(ignore=["supervised", "unsupervised", "encoder_source"])
        self.encoder = WordEncoder(encoder, pooling=pooling, max_length=max_subwords, stride=window_stride,
                                   dropout=encoder_dropout, freeze=freeze_encoder, layer_mix=layer_mix,
                                   characters=characters, word_dropout=word_dropout, lstm_layers=lstm_layers,
                                   lstm_size=lstm_size, source=encoder_source)
        self.supervised = supervised
        self.unsupervised = unsupervised
        self.scorer: BiaffineScorer | None = None
        self.upos_vocab = build_upos_vocab()
        self.tagger = None
        if tagger_weight > 0:
            self.tagger = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.encoder.hidden_size, len(self.upos_vocab)))
        self._teacher: list[Parser] = []  # a list keeps the teacher out of state_dict and .parameters()
        self._unlabeled_skipped = 0
        if labels is not None:
            self._build_labels(labels)

    # ----------------------------------------------------------------- setup
    def _build_labels(self, labels: list[str]) -> None:
        self.label_vocab = Vocab(labels)
        self.hparams["labels"] = list(labels)
        self.scorer = BiaffineScorer(
            self.encoder.hidden_size, len(labels), self.hparams.arc_size, self.hparams.label_size, self.hparams.dropout
        )
        universal = universal_index(labels)
        self.val_metric = AttachmentScore(universal)
        self.test_metric = AttachmentScore(universal)
        self.val_tag_accuracy = MulticlassAccuracy(len(self.upos_vocab), average="micro", ignore_index=IGNORE_INDEX)
        self.test_tag_accuracy = MulticlassAccuracy(len(self.upos_vocab), average="micro", ignore_index=IGNORE_INDEX)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if self.scorer is None:
            if datamodule is None or datamodule.label_vocab is None:
                raise RuntimeError("the parser needs a label vocabulary: train with a DependencyDataModule")
            self._build_labels(datamodule.label_vocab.itos)
        elif datamodule is not None:
            datamodule.label_vocab = self.label_vocab  # evaluate with the checkpoint's labels
        if datamodule is not None:
            datamodule.tokenize = self.encoder.subwords  # DataLoader workers tokenise while the model computes
        labeled = datamodule.train_sentences if datamodule is not None and stage == "fit" else None
        context = ObjectiveContext(
            stage=stage,
            multiroot=self.hparams.multiroot,
            tags=self.upos_vocab.itos,
            labels=self.label_vocab.itos,
            labeled_batches=None if not labeled else partial(_batches, labeled, self.upos_vocab),
            process_group=None,
            total_steps=self.total_steps() if stage == "fit" else None,
        )
        if stage == "fit" and self.supervised is None and self.unsupervised is None and self.tagger is None:
            raise ConfigurationError("nothing to train: give the parser an objective (--model.supervised, e.g. "
                             "objectives.Likelihood, or --model.unsupervised) or a tagger (--model.tagger_weight)")
        for objective in (self.supervised, self.unsupervised):
            if objective is not None:
                objective.setup(context)
        unlabeled = datamodule is not None and datamodule.has_unlabeled
        if self.unsupervised is not None and self.unsupervised.needs_gold and unlabeled:
            raise ConfigurationError(f"{type(self.unsupervised).__name__} needs gold trees, which unlabeled sentences do not "
                                     "have: give it as --model.supervised, or train without unlabeled data")
        needs_upos = self.unsupervised is not None and self.unsupervised.needs_upos and self.tagger is None
        if needs_upos and unlabeled and not datamodule.unlabeled_has_upos:
            raise ConfigurationError(
                f"{type(self.unsupervised).__name__} needs UPOS tags on the unlabeled sentences, "
                "but they have none (plain text?): give tagged CoNLL-U via --data.unlabeled, or train a "
                "tagger with --model.tagger_weight 1.0 to tag them"
            )
        if stage != "fit":
            return  # the teacher only trains: test, validate and predict do without its file
        ema = self.hparams.teacher_ema
        if self.hparams.teacher and ema is not None:
            raise ConfigurationError("give --model.teacher (a file) or --model.teacher_ema (a moving average), not both")
        needs_teacher = self.unsupervised is not None and self.unsupervised.needs_teacher
        if needs_teacher and not self.hparams.teacher and ema is None:
            raise ConfigurationError(f"{type(self.unsupervised).__name__} needs a teacher: pass --model.teacher PATH.ckpt "
                             "or --model.teacher_ema 0.999")
        if self._teacher:
            return
        if self.hparams.teacher:
            teacher = Parser.load(self.hparams.teacher)
            if teacher.hparams.multiroot != self.hparams.multiroot:
                trees = {True: "multi-root", False: "single-root"}
                raise ConfigurationError(
                    f"the teacher {self.hparams.teacher} parses {trees[teacher.hparams.multiroot]} trees, this parser "
                    f"{trees[self.hparams.multiroot]} ones: give --model.multiroot {teacher.hparams.multiroot} or "
                    "another teacher")
        elif ema is not None:
            teacher = copy.deepcopy(ScoringParts(self.encoder, self.scorer, self.label_vocab))
        else:
            return
        teacher.requires_grad_(False)
        self._teacher.append(teacher)

    # ----------------------------------------------------------------- scoring
    def forward(self, words: list[list[str]], subwords: Subwords | None = None) -> Scores:
        """Scores of a batch of word lists (``subwords``: already tokenised by the data
        pipeline): arcs ``(B, N+1, N+1)``, labels ``(B, N+1, N+1, L)``, and with a tagger
        UPOS logits ``(B, N+1, T)``."""
        vectors = self.encoder(words, subwords)
        scores = self.scorer(vectors)
        if self.tagger is not None:
            scores.tags = self.tagger(vectors).float()
        return scores

    def tag_targets(self, upos: Tensor) -> Tensor:
        """Gold UPOS ids as tagger targets: ``<pad>`` and ``<unk>`` (``_``) ignored."""
        return upos.masked_fill(upos <= self.upos_vocab.unk_index, IGNORE_INDEX)

    def predicted_tags(self, logits: Tensor) -> Tensor:
        """The best real UPOS id of each word (never ``<pad>`` or ``<unk>``): ``(B, N+1, T)`` -> ``(B, N+1)``."""
        first = self.upos_vocab.unk_index + 1
        return logits[..., first:].argmax(-1) + first

    def with_predicted_tags(self, batch: Batch, scores: Scores) -> Batch:
        """``batch`` whose untagged words (``_``) carry the tagger's distribution: UPOS as
        ``(B, N+1, T)`` probabilities, one-hot where a tag was given. Detached: objectives
        that read tags (GE) train the parser, not the tagger, which learns from gold tags."""
        if self.tagger is None or scores.tags is None:
            return batch
        given = F.one_hot(batch.upos, len(self.upos_vocab)).to(scores.tags.dtype)
        predicted = scores.tags.detach().clone()
        predicted[..., : self.upos_vocab.unk_index + 1] = float("-inf")  # never <pad> or <unk>
        unknown = (batch.upos == self.upos_vocab.unk_index).unsqueeze(-1)
        return dataclasses.replace(batch, upos=torch.where(unknown, predicted.softmax(-1), given))

    def on_fit_end(self) -> None:
        """The teacher goes where the parser went: Lightning moves the parser back to the
        CPU after ``fit``, and a teacher left on the GPU would hold its memory."""
        for teacher in self._teacher:
            teacher.to(self.device)

    @torch.no_grad()
    def teacher_scores(self, batch: Batch) -> Scores:
        """The teacher's scores, its labels in this parser's label vocabulary (by name: a
        teacher from another treebank gives no mass to labels it never saw)."""
        teacher = self._teacher[0].to(self.device).eval()
        scores = teacher(batch.words)
        return Scores(scores.arcs, reindex_labels(scores.labels, teacher.label_vocab.itos, self.label_vocab.itos))

    def decode(self, scores: Scores, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Heads and labels of ``scores`` by this parser's :class:`~parser.decode.Decoding`."""
        return self.decoding(scores.arcs, scores.labels, lengths)

    # ----------------------------------------------------------------- training
    def training_step(self, batch: Batch | dict[str, Batch], batch_idx: int) -> Tensor:
        labeled, unlabeled = (batch["labeled"], batch["unlabeled"]) if isinstance(batch, dict) else (batch, None)
        losses = {}
        needs_labeled = self.supervised is not None or self.tagger is not None or unlabeled is None
        labeled_scores = self(labeled.words, labeled.subwords) if needs_labeled else None
        if self.supervised is not None:
            losses["supervised"] = self.supervised(labeled_scores, labeled, step=self.global_step)
        if self.tagger is not None:  # mean over tagged words; 0, not NaN, when none is tagged
            targets = self.tag_targets(labeled.upos).flatten()
            total = F.cross_entropy(labeled_scores.tags.flatten(0, 1), targets, ignore_index=IGNORE_INDEX, reduction="sum")
            losses["tagger"] = total / (targets != IGNORE_INDEX).sum().clamp_min(1)
        if self.unsupervised is not None:
            raw = unlabeled if unlabeled is not None else labeled
            scores = self(raw.words, raw.subwords) if unlabeled is not None else labeled_scores
            if self.unsupervised.needs_upos:
                raw = self.with_predicted_tags(raw, scores)
            teacher = self.teacher_scores(raw) if self.unsupervised.needs_teacher else None
            losses["unsupervised"] = self.unsupervised(scores, raw, teacher, step=self.global_step)
        hp = self.hparams
        total = self.total_steps() if hp.unsupervised_schedule == "linear_decay" else None
        weight = hp.unsupervised_weight * linear_warmup_decay(self.global_step, hp.unsupervised_warmup, total)
        loss = (losses.get("supervised", 0.0) + hp.tagger_weight * losses.get("tagger", 0.0)
                + weight * losses.get("unsupervised", 0.0))
        size = labeled.lengths.shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        if unlabeled is not None:  # malformed unlabeled lines skipped so far, all processes
            self._unlabeled_skipped += unlabeled.skipped
            self.log("train/unlabeled_skipped", float(self._unlabeled_skipped), reduce_fx="sum", sync_dist=True, batch_size=size)
        if "unsupervised" in losses:
            self.log("train/lambda", weight, batch_size=size)
        for name, value in losses.items():
            self.log(f"train/{name}", value, batch_size=size)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        ema = self.hparams.teacher_ema
        if ema is not None and self._teacher:
            with torch.no_grad():
                teacher = self._teacher[0].parts()
                torch._foreach_lerp_(teacher, [p.detach() for p in ScoringParts.of(self).parts()], 1 - ema)

    def _evaluate(self, batch: Batch, metric: AttachmentScore, tag_accuracy: MulticlassAccuracy) -> None:
        scores = self(batch.words, batch.subwords)
        heads, labels = self.decode(scores, batch.lengths)
        metric.update(heads, labels, batch.heads, batch.labels, batch.lengths)
        if scores.tags is not None:
            tag_accuracy.update(scores.tags.flatten(0, 1), self.tag_targets(batch.upos).flatten())

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_metric, self.val_tag_accuracy)

    def on_validation_epoch_end(self) -> None:
        self._log_metric(self.val_metric, self.val_tag_accuracy, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_metric, self.test_tag_accuracy)

    def on_test_epoch_end(self) -> None:
        self._log_metric(self.test_metric, self.test_tag_accuracy, "test")

    def _log_metric(self, metric: AttachmentScore, tag_accuracy: MulticlassAccuracy, prefix: str) -> None:
        values = {f"{prefix}/{k}": v for k, v in metric.compute().items()}
        if self.tagger is not None:
            values[f"{prefix}/upos"] = 100 * tag_accuracy.compute()
        self.log_dict(values, prog_bar=True, sync_dist=True)  # already equal on every process (torchmetrics)
        metric.reset()
        tag_accuracy.reset()

    def predict_step(self, batch: Batch, batch_idx: int) -> list[tuple[int, list[int], list[str], list[str] | None]]:
        """``(sentence index, heads, labels, UPOS or None)`` per sentence, for writing CoNLL-U back in order."""
        scores = self(batch.words, batch.subwords)
        heads, labels = self.decode(scores, batch.lengths)
        tags = None if scores.tags is None else self.predicted_tags(scores.tags).tolist()
        out = []
        for i, n in enumerate(batch.lengths.tolist()):
            out.append((int(batch.index[i]), heads[i, 1 : n + 1].tolist(), [self.label_vocab.itos[l] for l in labels[i, 1 : n + 1].tolist()],
                        None if tags is None else [self.upos_vocab.itos[t] for t in tags[i][1 : n + 1]]))
        return out

    def total_steps(self) -> int:
        """The run's length in optimiser steps, over which the learning rate (and any
        decaying weight) falls to 0."""
        steps = self.trainer.estimated_stepping_batches
        if math.isinf(steps):
            raise ConfigurationError("training needs a finite length (trainer.max_steps or max_epochs): the learning rate decays to 0 over it")
        return max(int(steps), 1)

    def configure_optimizers(self):
        # the pretrained transformer at encoder_lr; what starts from scratch (scorer, tagger,
        # layer mix, character encoder, LSTM) at lr
        encoder = [p for p in self.encoder.model.parameters() if p.requires_grad]
        rest = [p for n, p in self.named_parameters() if p.requires_grad and not n.startswith("encoder.model.")]
        optimizer = torch.optim.AdamW(
            [{"params": rest, "lr": self.hparams.lr}, {"params": encoder, "lr": self.hparams.encoder_lr}],
            betas=self.ADAMW_BETAS,
            weight_decay=self.hparams.weight_decay,
        )
        total = self.total_steps()
        warmup = min(self.hparams.warmup_steps, total // 2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(linear_warmup_decay, warmup=warmup, total=total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ----------------------------------------------------------------- inference API
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[checkpoint_files.ENCODER_FILES] = checkpoint_files.encoder_files(self.encoder)
        checkpoint["unlabeled_skipped"] = self._unlabeled_skipped
        if self.hparams.teacher_ema is not None and self._teacher:
            checkpoint["ema_teacher"] = self._teacher[0].state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._unlabeled_skipped = checkpoint.get("unlabeled_skipped", 0)
        if "ema_teacher" in checkpoint and self._teacher:  # resuming: the average goes on
            self._teacher[0].load_state_dict(checkpoint["ema_teacher"])

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> Parser:
        """A trained parser, in eval mode, from a ``.ckpt`` file or a :meth:`save`
        directory; the encoder is rebuilt from the files saved with it (no network, no
        encoder package needed)."""
        saved = checkpoint_files.read(path, map_location)
        known = inspect.signature(cls.__init__).parameters
        kwargs = {k: v for k, v in saved.hparams.items() if k in known and k != "encoder_source"}
        with checkpoint_files.unpacked(saved.encoder_files) as source:
            parser = cls(**kwargs, encoder_source=source)
        saved.load_weights_into(parser, map_location)
        return parser.to(map_location).eval()

    def save(self, directory: str | Path) -> Path:
        """Write this parser to ``directory`` for :meth:`load` elsewhere: weights as
        safetensors, ``parser.json`` (hyperparameters, label and UPOS vocabularies) and the
        encoder's config and tokenizer files."""
        if self.scorer is None:
            raise RuntimeError("nothing to save: the parser has no label vocabulary yet (train it first)")
        hparams = {**self.hparams, "upos_tags": list(self.upos_vocab.itos)}
        return checkpoint_files.write_directory(directory, hparams, self, self.encoder)

    @torch.no_grad()
    def parse(self, sentences: list[list[str]], batch_size: int = 32, marginals: bool = False) -> list[Parse]:
        """Parse pre-tokenised sentences (each a list of words): heads, labels and, on
        request, arc marginals. A string is refused, not split: ``text.split()`` it first."""
        for sentence in [sentences] if isinstance(sentences, str) else sentences:
            if isinstance(sentence, str) or not all(isinstance(word, str) for word in sentence):
                raise TypeError(
                    "Parser.parse takes a list of sentences, each a list of words, e.g. "
                    f'[["The", "dog", "barks", "."]]; got {sentence!r}: tokenise it first (e.g. text.split())'
                )
            if not sentence:
                raise ValueError("Parser.parse: an empty sentence has nothing to parse")
        self.eval()
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths batch well
        parses: list[Parse | None] = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            ids = order[start : start + batch_size]
            chunk = [Sentence(list(sentences[i]), ["_"] * len(sentences[i]), None, None, None, "parse()") for i in ids]
            batch = collate(chunk, self.upos_vocab, None)
            lengths = batch.lengths.to(self.device)
            scores = self(batch.words)
            heads, labels = self.decode(scores, lengths)
            mu = arc_marginals(scores.arcs, lengths, self.hparams.multiroot) if marginals else None
            tags = None if scores.tags is None else self.predicted_tags(scores.tags)
            for i, n in enumerate(batch.lengths.tolist()):
                parses[ids[i]] = Parse(
                    words=list(batch.words[i]),
                    heads=heads[i, 1 : n + 1].tolist(),
                    labels=[self.label_vocab.itos[l] for l in labels[i, 1 : n + 1].tolist()],
                    marginals=None if mu is None else mu[i, : n + 1, : n + 1].cpu(),
                    tags=None if tags is None else [self.upos_vocab.itos[t] for t in tags[i, 1 : n + 1].tolist()],
                )
        return parses
