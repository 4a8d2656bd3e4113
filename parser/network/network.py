"""The network: encoder, biaffine scorer and optional UPOS tagger, built once the labels are known."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from objectives.conventions import IGNORE_INDEX
from objectives.objective import Scores

from parser.data.batch import Batch
from parser.data.vocab import LabelVocab, build_upos_vocab, universal_deprel
from parser.network.biaffine import BiaffineScorer
from parser.network.encoder import Subwords, WordEncoder


@dataclass(frozen=True)
class EncoderOptions:
    """How the encoder makes word vectors (the arguments of :class:`~parser.network.encoder.WordEncoder`
    beside the model's name).

    Attributes:
        pooling: a word's vector from its ``first`` subword or the ``mean`` of them.
        max_length: subwords per transformer window, special tokens included (default:
            the model's limit); longer sentences are read in overlapping windows.
        stride: subwords shared by consecutive windows.
        dropout: dropout on the word vectors.
        freeze: keep the transformer fixed (train what is on top), or ``embeddings``: only
            its subword embedding matrix (faster steps and ~3x less optimizer memory for a
            multilingual encoder with a large vocabulary), or a number ``k``: its
            embeddings and first ``k`` layers (no backward pass below).
        layer_mix: word vectors from a learned scalar mix of all layers instead of the last.
        characters: size of a character-level vector (a BiGRU over the word's bytes)
            concatenated to each word vector; 0 for none.
        word_dropout: in training, the probability of masking all of a word's subwords.
        lstm_layers, lstm_size: bidirectional LSTM layers (``lstm_size`` per direction)
            over the word vectors, as in Dozat & Manning (2017); 0 layers for none.
        treebank_embedding: a learned vector per training treebank added to the word
            vectors (before the LSTM); a sentence of a treebank not trained on, and one in
            ten training sentences, gets the ``<other>`` vector (``Batch.treebanks``;
            ``Parser.parse(treebank=...)`` and ``parser.predict --treebank`` name one).
        word_vectors: a word2vec text file of the language's words (``treeexp vectors``),
            fixed, projected onto the word vectors (before the LSTM) by a projection that
            starts at zero; saved inside the parser (the file is needed only to train).
    """

    pooling: Literal["first", "mean"] = "first"
    max_length: int | None = None
    stride: int = 128
    dropout: float = 0.0
    freeze: bool | Literal["embeddings"] | int = False
    layer_mix: bool = False
    characters: int = 0
    word_dropout: float = 0.0
    lstm_layers: int = 0
    lstm_size: int = 400
    treebank_embedding: bool = False
    word_vectors: str | None = None


class VocabularyRows(NamedTuple):
    """A parameter with a row per name of a vocabulary (dimension 0): the hyperparameter that
    saves the names, the names, and the name whose row a new name starts from."""

    hparam: str
    names: list[str]
    fallback: Callable[[str], str]


@dataclass(frozen=True)
class Heads:
    """The heads on the word vectors: biaffine MLP sizes and dropout, and whether a UPOS
    tagger (dropout + linear) scores tags too (it does whenever a training term needs tag
    scores)."""

    arc_size: int = 500
    label_size: int = 100
    dropout: float = 0.33
    tagger: bool = False


class Network(nn.Module):
    """Sentences -> :class:`Scores`: arcs ``(B, N+1, N+1)``, labels ``(B, N+1, N+1, L)`` and,
    with a tagger, UPOS logits ``(B, N+1, T)``.

    ``encoder``: transformers model name or path; ``source``: a directory with the encoder's config and tokenizer files to build it from,
    without pretrained weights (a checkpoint supplies them); ``treebanks``: those with a
    vector of their own (``EncoderOptions.treebank_embedding``).
    """

    def __init__(self, encoder: str, options: EncoderOptions, heads: Heads, labels: Sequence[str],
                 source: str | Path | None = None, treebanks: Sequence[str] = ()):
        super().__init__()
        self.label_vocab = LabelVocab(labels)
        self.upos_vocab = build_upos_vocab()
        self.encoder = WordEncoder(encoder, **dataclasses.asdict(options), treebanks=treebanks, source=source)
        self.tagger = None
        if heads.tagger:
            self.tagger = nn.Sequential(nn.Dropout(heads.dropout), nn.Linear(self.encoder.hidden_size, len(self.upos_vocab)))
        self.scorer = BiaffineScorer(self.encoder.hidden_size, len(labels), heads.arc_size, heads.label_size, heads.dropout)

    def forward(self, words: list[list[str]], subwords: Subwords | None = None,
                treebanks: Sequence[str | None] | None = None) -> Scores:
        """Scores of a batch of word lists (``subwords``: already tokenised by the data
        pipeline; ``treebanks``: each sentence's, for the treebank vectors)."""
        vectors = self.encoder(words, subwords, treebanks)
        scores = self.scorer(vectors)
        if self.tagger is not None:
            scores.tags = self.tagger(vectors).float()
        return scores

    def vocabulary_rows(self) -> dict[str, VocabularyRows]:
        """The parameters whose rows belong to names (see ``parser.training.warm_start``):
        the label scorer's, one per label, a new label starting from its universal part; the
        treebank vectors, a new treebank starting from the ``<other>`` vector."""
        rows = {"scorer.label.weight": VocabularyRows("labels", self.label_vocab.itos, universal_deprel)}
        if self.encoder.treebanks is not None:
            rows["encoder.treebank_vectors.weight"] = VocabularyRows(
                "treebanks", self.encoder.treebanks.itos, lambda name: self.encoder.treebanks.unk)
        return rows

    def character_inputs(self) -> list[str]:
        """The weights that read the character vectors, in their columns after the transformer's:
        the first LSTM layer's (none without characters or an LSTM)."""
        if self.encoder.characters is None or self.encoder.lstm is None:
            return []
        return [f"encoder.lstm.lstm.weight_ih_l0{side}" for side in ("", "_reverse")]

    def parts(self) -> list[Tensor]:
        """Every parameter and floating-point buffer, in a fixed order (a moving average's)."""
        return [*self.parameters(), *(b for b in self.buffers() if b.is_floating_point())]

    def changing_parts(self, other: Network) -> list[tuple[Tensor, Tensor]]:
        """This network's and ``other``'s parts (one a copy of the other) that training can change,
        pair by pair: ``other``'s trainable parameters and floating-point buffers (a frozen
        weight, the subword embeddings of ``freeze: embeddings``, is the same in both)."""
        trainable = {id(p) for p in other.parameters() if p.requires_grad}
        return [(own, theirs) for own, theirs in zip(self.parts(), other.parts(), strict=True)
                if id(theirs) in trainable or not isinstance(theirs, nn.Parameter)]

    @torch.no_grad()
    def follow(self, other: Network, decay: float) -> None:
        """One step of a moving average of ``other``'s weights (this network, a copy of it):
        every part becomes ``decay * own + (1 - decay) * other's``."""
        pairs = self.changing_parts(other)
        torch._foreach_lerp_([own for own, _ in pairs], [theirs.detach() for _, theirs in pairs], 1 - decay)

    @torch.no_grad()
    def swap(self, other: Network) -> None:
        """Exchange every changing part's values with ``other``'s (a copy of this network)."""
        for own, theirs in self.changing_parts(other):
            kept = own.clone()
            own.copy_(theirs)
            theirs.copy_(kept)

    def tag_targets(self, upos: Tensor) -> Tensor:
        """Gold UPOS ids for accuracy: ``<pad>`` and ``<unk>`` (``_``) become the ignore index."""
        return upos.masked_fill(upos <= self.upos_vocab.unk_index, IGNORE_INDEX)

    def best_tags(self, logits: Tensor) -> Tensor:
        """The best real UPOS id of each word (never ``<pad>`` or ``<unk>``): ``(B, N+1, T)`` -> ``(B, N+1)``."""
        first = self.upos_vocab.unk_index + 1
        return logits[..., first:].argmax(-1) + first

    def with_predicted_tags(self, batch: Batch, scores: Scores) -> Batch:
        """``batch`` whose untagged words (``_``) carry the tagger's distribution: UPOS as
        ``(B, N+1, T)`` probabilities, one-hot where a tag was given. With the tagger's graph:
        a term that reads tags (GE) detaches them unless it trains the tagger (``train_tags``)."""
        if scores.tags is None:
            return batch
        given = F.one_hot(batch.upos, len(self.upos_vocab)).to(scores.tags.dtype)
        predicted = scores.tags.clone()
        predicted[..., : self.upos_vocab.unk_index + 1] = float("-inf")  # never <pad> or <unk>
        unknown = (batch.upos == self.upos_vocab.unk_index).unsqueeze(-1)
        return dataclasses.replace(batch, upos=torch.where(unknown, predicted.softmax(-1), given))
