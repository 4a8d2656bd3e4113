"""Pretrained subword transformer -> one vector per word, plus a sentence vector for the root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

from objectives.conventions import ConfigurationError

from parser.data.vocab import Vocab
from parser.network.characters import CharacterEncoder
from parser.network.word_vectors import VOCABULARY, WordVectors
from parser.network.pretrained import resolve_model_path
from parser.network.sentence_lstm import SentenceLSTM


OTHER_TREEBANK = "<other>"  # the vector of a treebank not trained on
TREEBANK_DROPOUT = 0.1  # training sentences given the other vector (Stymne et al. 2018 train no such vector)


def _load_backbone(path: str, weights: bool = True) -> nn.Module:
    """``AutoModel`` without its pooler, if it has one (unused here; unused trainable
    parameters also break DDP). With ``weights`` the pretrained weights are loaded:
    checkpoint entries the backbone does not use (pooler, pretraining heads) are dropped
    quietly, weights missing from it are an error. Without, only ``config.json`` is read
    (the weights come from a parser checkpoint)."""
    if not weights:
        config = AutoConfig.from_pretrained(path)
        try:
            return AutoModel.from_config(config, add_pooling_layer=False)
        except TypeError as err:
            if "add_pooling_layer" not in str(err):
                raise
            return AutoModel.from_config(config)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report would list the dropped entries
    try:
        model, info = AutoModel.from_pretrained(
            path, add_pooling_layer=False, output_loading_info=True
        )
    except TypeError as err:
        if "add_pooling_layer" not in str(err):
            raise
        model, info = AutoModel.from_pretrained(path, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    if info["missing_keys"]:
        raise ValueError(f"{path}: checkpoint lacks weights {sorted(info['missing_keys'])}")
    return model


def _transformer_layers(model: nn.Module) -> nn.ModuleList:
    """The backbone's stack of ``num_hidden_layers`` transformer layers, bottom first
    (``encoder.layer`` in BERT-like models)."""
    count = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__} has no list of {count} layers: freeze it whole or its embeddings")


@dataclass
class Subwords:
    """A tokenised batch: W transformer windows and T subwords that feed word vectors."""

    input_ids: Tensor  # (W, L) window ids with special tokens, padded
    attention_mask: Tensor  # (W, L)
    window_target: Tensor  # (W,) flat root index b * (N+1) of each window's sentence
    window_weight: Tensor  # (W,) 1 / number of windows of that sentence
    token_window: Tensor  # (T,) window each subword is read from
    token_column: Tensor  # (T,) its column in that window
    token_target: Tensor  # (T,) flat word index b * (N+1) + word (1-based word)
    token_weight: Tensor  # (T,) pooling weight
    column_word: Tensor  # (W, L) flat word index b * (N+1) + word of each window column, -1 for special tokens and padding

    def to(self, device: torch.device) -> Subwords:
        return Subwords(*(getattr(self, f.name).to(device) for f in fields(self)))


class SubwordTokenizer:
    """Words -> transformer windows (:class:`Subwords`), with no model attached: it pickles,
    so DataLoader workers tokenise batches while the model computes.

    Args:
        tokenizer: a fast Hugging Face tokenizer (word alignment needs one).
        limit: the model's most positions per window.
        pooling: ``"first"`` subword or ``"mean"`` over a word's subwords.
        max_length: subwords per window, special tokens included (default: ``limit``).
        stride: subwords shared by consecutive windows (capped at half a window).
    """

    def __init__(self, tokenizer, limit: int, pooling: str = "first", max_length: int | None = None, stride: int = 128):
        if pooling not in ("first", "mean"):
            raise ConfigurationError(f"pooling must be 'first' or 'mean', got {pooling!r}")
        if not tokenizer.is_fast:
            raise ValueError(f"{tokenizer.name_or_path}: a fast tokenizer is required for word alignment")
        self.tokenizer = tokenizer
        self.pooling = pooling
        probe = tokenizer("a", return_special_tokens_mask=True)
        ids, special = probe["input_ids"], probe["special_tokens_mask"]
        n_suffix = special[::-1].index(0)
        self._prefix = ids[: special.index(0)]  # e.g. [CLS]
        self._suffix = ids[len(ids) - n_suffix :]  # e.g. [SEP]
        self.max_length = max_length or limit
        self.window = self.max_length - len(self._prefix) - len(self._suffix)
        if self.window < 1 or self.max_length > limit:
            raise ConfigurationError(f"max_length={max_length}: need room for subwords and <= {limit}")
        self.stride = min(stride, self.window // 2)

    def _subword_ids(self, words: list[list[str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Subword ids and their 0-based word indices per sentence; every word gets one or more."""
        kwargs = {"is_split_into_words": True, "add_special_tokens": False, "verbose": False}
        encoding = self.tokenizer(words, **kwargs)
        ids = encoding["input_ids"]
        word_ids = [encoding.word_ids(b) for b in range(len(words))]
        # words that vanish (control or zero-width characters only) become the unknown token
        patched, unk = {}, self.tokenizer.unk_token
        for b, sentence in enumerate(words):
            present = set(word_ids[b])
            if len(present) < len(sentence):
                patched[b] = [w if i in present else unk for i, w in enumerate(sentence)]
        if patched:
            encoding = self.tokenizer(list(patched.values()), **kwargs)
            for j, b in enumerate(patched):
                ids[b], word_ids[b] = encoding["input_ids"][j], encoding.word_ids(j)
                if len(set(word_ids[b])) < len(words[b]):
                    raise ValueError(f"cannot tokenize a word of {words[b]!r}")
        return ids, word_ids

    def _window_starts(self, n: int) -> list[int]:
        """Starts of the windows over n subwords: a single one if they fit, else windows
        advancing by ``window - stride``, the last one flush with the end."""
        if n <= self.window:
            return [0]
        return [*range(0, n - self.window, self.window - self.stride), n - self.window]

    def __call__(self, words: list[list[str]], n_words: int | None = None) -> Subwords:
        """Tokenise B sentences (padded to ``n_words``, default their longest), cut them
        into windows and index every pooled subword (on CPU)."""
        n_words = n_words or max(map(len, words))
        ids, word_ids = self._subword_ids([list(sentence) for sentence in words])
        starts = [self._window_starts(len(x)) for x in ids]
        windows = [x[s : s + self.window] for x, ss in zip(ids, starts) for s in ss]
        window_words = [[b * (n_words + 1) + w + 1 for w in x[s : s + self.window]]
                        for b, (x, ss) in enumerate(zip(word_ids, starts)) for s in ss]
        window_start = torch.tensor([s for ss in starts for s in ss])
        window_len = torch.tensor([len(w) for w in windows])
        n_windows = torch.tensor([len(ss) for ss in starts])
        first_window = torch.cumsum(n_windows, 0) - n_windows
        window_sentence = torch.repeat_interleave(torch.arange(len(ids)), n_windows)

        # flat subwords: sentence, position in sentence, flat target index of their word
        lengths = torch.tensor([len(x) for x in ids])
        sentence = torch.repeat_interleave(torch.arange(len(ids)), lengths)
        position = torch.arange(len(sentence)) - (torch.cumsum(lengths, 0) - lengths)[sentence]
        word = torch.tensor([w for x in word_ids for w in x], dtype=torch.long)
        target = sentence * (n_words + 1) + word + 1
        if self.pooling == "first":
            keep = torch.ones_like(target, dtype=torch.bool)
            keep[1:] = target[1:] != target[:-1]
            sentence, position, target = sentence[keep], position[keep], target[keep]
            weight = torch.ones(len(target))
        else:
            weight = 1.0 / torch.bincount(target)[target]

        # each subword is read from the window where it is farthest from an edge
        candidates = first_window[sentence, None] + torch.arange(int(n_windows.max()))  # (T, K)
        valid = candidates < (first_window + n_windows)[sentence, None]
        candidates = candidates.clamp(max=len(windows) - 1)
        offset = position[:, None] - window_start[candidates]
        centrality = torch.minimum(offset, window_len[candidates] - 1 - offset)
        best = centrality.masked_fill(~valid, -1).argmax(1, keepdim=True)
        token_window = candidates.gather(1, best).squeeze(1)

        pad = self.tokenizer.pad_token_id or 0
        windows = [self._prefix + w + self._suffix for w in windows]
        width = max(map(len, windows))
        outside = [-1] * len(self._prefix)
        window_words = [outside + w + [-1] * (width - len(w) - len(outside)) for w in window_words]
        return Subwords(
            input_ids=torch.tensor([w + [pad] * (width - len(w)) for w in windows]),
            attention_mask=torch.tensor([[1] * len(w) + [0] * (width - len(w)) for w in windows]),
            window_target=window_sentence * (n_words + 1),
            window_weight=1.0 / n_windows[window_sentence],
            token_window=token_window,
            token_column=len(self._prefix) + position - window_start[token_window],
            token_target=target,
            token_weight=weight,
            column_word=torch.tensor(window_words),
        )


class WordEncoder(nn.Module):
    """Word vectors from any Hugging Face encoder with a fast tokenizer.

    Args:
        model: hub name or local path; see :func:`resolve_model_path` for the offline names.
        pooling: ``"first"`` subword or ``"mean"`` over a word's subwords.
        max_length: subwords per transformer window, special tokens included
            (default: the model's limit). Longer sentences are split into overlapping
            windows, never truncated.
        stride: subwords shared by consecutive windows (capped at half a window).
        dropout: dropout on the output vectors.
        freeze: keep the transformer fixed (no gradients, always in eval mode); or
            ``"embeddings"``: keep only its subword embedding matrix fixed (most of a
            multilingual model's weights: multilingual-e5-small has 96M of its 118M there,
            and AdamW updates every row each step, used or not); or a number of layers
            ``k``: keep the embeddings and the first ``k`` transformer layers fixed, so that
            backpropagation stops at layer ``k + 1`` (a cheaper step; the layers still run,
            with dropout, in training).
        layer_mix: word vectors from a learned scalar mix of every layer instead of the
            last layer alone.
        characters: with a positive size, each word vector also holds a character-level
            vector of that size (:class:`CharacterEncoder`), concatenated.
        word_dropout: in training, the probability that a word's subwords are all replaced
            by the mask (or unknown) token, so that the parser learns to use the context
            (the character-level vector still reads the word).
        lstm_layers: with a positive number, that many bidirectional LSTM layers
            (:class:`SentenceLSTM`, ``lstm_size`` per direction) read the word vectors
            (transformer and characters, after ``dropout``) and give the output.
        treebank_embedding: a learned vector for each of ``treebanks`` (and one for any
            other) added to every word's transformer vector (Stymne et al. 2018): a
            multi-treebank parser tells its treebanks apart.
        word_vectors: a word2vec text file of the language's words (``treeexp vectors``),
            kept fixed and projected onto every word's transformer vector, the projection
            starting at zero (:class:`~parser.network.word_vectors.WordVectors`).
        source: a directory with the encoder's ``config.json`` and tokenizer files (as
            written by :meth:`save_files`) to build from instead of ``model``, without
            pretrained weights: a parser checkpoint supplies them.
    """

    PADDED_SUBWORDS_PER_CHUNK = 4096  # transformer positions per forward call (see _run_windows)

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        pooling: str = "first",
        max_length: int | None = None,
        stride: int = 128,
        dropout: float = 0.0,
        freeze: bool | Literal["embeddings"] | int = False,
        layer_mix: bool = False,
        characters: int = 0,
        word_dropout: float = 0.0,
        lstm_layers: int = 0,
        lstm_size: int = 400,
        treebank_embedding: bool = False,
        treebanks: Sequence[str] = (),
        word_vectors: str | None = None,
        source: str | Path | None = None,
    ) -> None:
        super().__init__()
        path = str(source) if source is not None else resolve_model_path(model)
        self.model = _load_backbone(path, weights=source is None)
        tokenizer = AutoTokenizer.from_pretrained(path)
        limit = min(self.model.config.max_position_embeddings, tokenizer.model_max_length)
        self.subwords = SubwordTokenizer(tokenizer, limit, pooling, max_length, stride)
        layers = self.model.config.num_hidden_layers
        if not (isinstance(freeze, bool) or freeze == "embeddings" or (type(freeze) is int and 0 < freeze < layers)):
            raise ConfigurationError(f"freeze must be true, false, 'embeddings' or a number of layers from 1 to {layers - 1}, "
                             f"got {freeze!r}")
        self.freeze = freeze is True
        self.dropout = nn.Dropout(dropout)
        self.mix_weights = self.mix_gamma = None
        if layer_mix:  # uniform over the embeddings and every layer at the start
            self.mix_weights = nn.Parameter(torch.zeros(self.model.config.num_hidden_layers + 1))
            self.mix_gamma = nn.Parameter(torch.ones(()))
        self.characters = CharacterEncoder(characters) if characters > 0 else None
        if not 0.0 <= word_dropout < 1.0:
            raise ConfigurationError(f"word_dropout must be in [0, 1), got {word_dropout}")
        self.word_dropout = word_dropout
        self.treebanks = self.treebank_vectors = None
        if treebank_embedding:  # zeros: a run starts as without them
            self.treebanks = Vocab([OTHER_TREEBANK, *(t for t in treebanks if t != OTHER_TREEBANK)], unk=OTHER_TREEBANK)
            self.treebank_vectors = nn.Embedding(len(self.treebanks), self.model.config.hidden_size)
            nn.init.zeros_(self.treebank_vectors.weight)
        self.word_vectors = None
        if word_vectors:  # a saved parser's vocabulary (its table comes with its weights), else the file's
            saved = Path(source) / VOCABULARY if source is not None else None
            hidden = self.model.config.hidden_size
            self.word_vectors = (WordVectors.from_vocabulary(saved, hidden) if saved is not None and saved.is_file()
                                 else WordVectors.from_file(word_vectors, hidden))
        self.lstm = None
        self._size = self.model.config.hidden_size + (self.characters.size if self.characters is not None else 0)
        if lstm_layers > 0:
            self.lstm = SentenceLSTM(self._size, lstm_size, lstm_layers)
            self._size = self.lstm.size
        mask = tokenizer.mask_token_id
        self._dropped_word_id = mask if mask is not None else tokenizer.unk_token_id
        if freeze is True:
            self.model.requires_grad_(False)
        elif freeze == "embeddings":
            self.model.get_input_embeddings().requires_grad_(False)
        elif freeze is not False:
            self.model.requires_grad_(False)
            _transformer_layers(self.model)[freeze:].requires_grad_(True)
        self.train()  # from_pretrained returns eval mode; modules start in training mode

    @property
    def tokenizer(self):
        """The Hugging Face tokenizer."""
        return self.subwords.tokenizer

    def save_files(self, directory: str | Path) -> None:
        """Write what rebuilds this encoder without its package or network: the model's
        ``config.json``, the tokenizer files and the word vectors' vocabulary (no weights; see ``source``)."""
        self.model.config.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if self.word_vectors is not None:
            self.word_vectors.save_vocabulary(directory)

    @property
    def hidden_size(self) -> int:
        """The size of a word vector."""
        return self._size

    def train(self, mode: bool = True) -> WordEncoder:
        super().train(mode)
        if self.freeze:
            self.model.eval()
        return self

    def forward(self, words: list[list[str]], subwords: Subwords | None = None,
                treebanks: Sequence[str | None] | None = None) -> Tensor:
        """Encode B sentences of up to N words -> (B, N+1, H).

        Position 0 is the sentence vector (the first token, e.g. [CLS], averaged over
        windows), positions 1..n the words, zeros beyond. ``subwords``: the words already
        tokenised by :attr:`subwords` (in the data pipeline), else they are tokenised here.
        ``treebanks``: each sentence's treebank, for the treebank vectors (None, or a
        treebank not trained on: the ``other`` vector).
        """
        batch, n_words = len(words), max(map(len, words))
        sub = (subwords if subwords is not None else self.subwords(words, n_words)).to(self.model.device)
        input_ids = sub.input_ids
        if self.training and self.word_dropout > 0:
            input_ids = self._drop_words(sub, batch * (n_words + 1))
        hidden = self._run_windows(input_ids, sub.attention_mask)  # (W, L, H)
        out = hidden.new_zeros(batch * (n_words + 1), hidden.size(-1))
        tokens = hidden[sub.token_window, sub.token_column]  # (T, H)
        out.index_add_(0, sub.token_target, tokens * sub.token_weight.to(tokens.dtype)[:, None])
        roots = hidden[:, 0] * sub.window_weight.to(hidden.dtype)[:, None]  # (W, H)
        out.index_add_(0, sub.window_target, roots)
        out = out.view(batch, n_words + 1, -1)
        if self.treebank_vectors is not None:
            out = out + self.treebank_vectors(self._treebank_ids(treebanks, batch, out.device)).to(out.dtype)[:, None]
        if self.word_vectors is not None:
            out = out + self.word_vectors(words, n_words).to(out.dtype)
        if self.characters is not None:
            out = torch.cat([out, self.characters(words, n_words).to(out.dtype)], dim=-1)
        out = self.dropout(out)
        if self.lstm is not None:
            out = self.dropout(self.lstm(out, torch.tensor([len(w) for w in words])))
        return out

    def _treebank_ids(self, treebanks: Sequence[str | None] | None, batch: int, device: torch.device) -> Tensor:
        """Each sentence's treebank vector: (B,); in training a share ``TREEBANK_DROPOUT`` of
        them gets the ``other`` vector, which so learns to stand for any treebank."""
        ids = torch.tensor([self.treebanks.index(t) for t in (treebanks or [None] * batch)], device=device)
        if self.training:
            ids = ids.masked_fill(torch.rand(batch, device=device) < TREEBANK_DROPOUT, self.treebanks.unk_index)
        return ids

    def _drop_words(self, sub: Subwords, n_flat: int) -> Tensor:
        """``sub.input_ids`` with every subword of each dropped word (probability
        ``word_dropout``) replaced by the mask token."""
        dropped = torch.rand(n_flat, device=sub.input_ids.device) < self.word_dropout
        hit = dropped[sub.column_word.clamp(min=0)] & (sub.column_word >= 0)
        return sub.input_ids.masked_fill(hit, self._dropped_word_id)

    def _hidden(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """``(W, L, H)``: the last layer, or with ``layer_mix`` the learned scalar mix of all
        layers (embeddings included), ``gamma * sum_l softmax(w)_l h_l`` (Peters et al. 2018)."""
        if self.mix_weights is None:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        layers = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        weights = self.mix_weights.softmax(0).to(layers[-1].dtype)
        return self.mix_gamma * sum(w * h for w, h in zip(weights, layers))

    def _run_windows(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The transformer's last hidden states ``(W, L, H)`` for windows ``(W, L)``, run
        in chunks of similar length so that padding stays small.

        One window of many subwords (a URL) in a batch of short ones would otherwise pad
        every window to its length: the worst EWT training batch held 1,129 subwords in
        20,480 padded positions. Windows are sorted by length and cut so that a chunk holds
        at most ``PADDED_SUBWORDS_PER_CHUNK`` padded positions (or a single window).
        """
        lengths = attention_mask.sum(1)
        order = torch.argsort(lengths, stable=True)
        sorted_lengths = lengths[order].tolist()
        hidden = None
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * sorted_lengths[end] <= self.PADDED_SUBWORDS_PER_CHUNK:
                end += 1
            rows, width = order[start:end], sorted_lengths[end - 1]
            chunk = self._hidden(input_ids[rows, :width], attention_mask[rows, :width])
            if hidden is None:
                hidden = chunk.new_zeros(*input_ids.shape, chunk.shape[-1])
            hidden = hidden.index_put((rows,), F.pad(chunk, (0, 0, 0, input_ids.shape[1] - width)))
            start = end
        return hidden
