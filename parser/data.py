"""CoNLL-U input and output, vocabularies, batching and the Lightning data module.

Tensor conventions follow docs/architecture.md. Label vocabulary choice: it holds the
full DEPRELs (e.g. ``nmod:poss``) of the labeled training sentences and has no
``<unk>`` entry; a DEPREL unseen in training maps to -100, the ignore index, so the loss
skips it and ``parser.metrics.AttachmentScore`` counts it as a LAS error.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, TextIO

import conllu
import torch
from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_id_value, parse_int_value
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import CombinedLoader
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from .fetch import default_root

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
UPOS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART",
             "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
# Keep comments without " = value" (conllu drops them by default) so output reproduces them.
_KEEP_ALL_COMMENTS = {"__fallback__": lambda key, value: (key, value)}


class ConlluError(ValueError):
    """Malformed CoNLL-U or text input; the message starts with ``path:line:``."""


@dataclass
class Sentence:
    """One sentence of syntactic words (multiword-token lines and empty nodes excluded).

    ``heads``/``deprels`` are None when the input has no (used) trees. ``tokenlist`` is
    the whole sentence as read, every column kept as its original string except ID
    (int, or a tuple for ``3-4`` / ``5.1``) and HEAD (int, None for ``_``), so that
    ``write_conllu`` reproduces the input exactly. ``source`` is ``"path:LINE"``.
    """

    words: list[str]
    upos: list[str]
    heads: list[int] | None
    deprels: list[str] | None
    tokenlist: conllu.TokenList
    source: str

    def __len__(self) -> int:
        return len(self.words)


def read_conllu(path: str | os.PathLike, trees: bool = True,
                on_invalid: Literal["raise", "skip"] = "raise") -> list[Sentence]:
    """Read a CoNLL-U file with gold tokenisation.

    With ``trees`` every word needs an integer HEAD and the heads must form a tree
    (one word attached to the root, no cycle); otherwise HEAD and DEPREL are ignored
    (they may be ``_``, a given HEAD must still be in range) and ``heads``/``deprels``
    are None. An invalid tree raises, or
    with ``on_invalid="skip"`` the sentence is dropped and the count logged as a
    warning. Any other malformed input raises ``ConlluError`` naming file and line.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', not {on_invalid!r}")
    sentences, skipped = [], 0
    for start, lines in _blocks(path):
        sentence = _parse_block(path, start, lines, trees)
        problem = _tree_problem(sentence.heads) if trees else None
        if problem is None:
            sentences.append(sentence)
        elif on_invalid == "skip":
            skipped += 1
        else:
            raise ConlluError(f"{sentence.source}: invalid tree: {problem}")
    if not sentences and not skipped:
        raise ConlluError(f"{path}:1: empty file, no sentences")
    if skipped:
        log.warning("%s: skipped %d sentences with invalid trees", path, skipped)
    return sentences


def _blocks(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield (1-based number of the first line, lines) for each blank-line-separated block."""
    block: list[str] = []
    start = 0
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n")
            if line.strip():
                if not block:
                    start = number
                block.append(line)
            elif block:
                yield start, block
                block = []
    if block:
        yield start, block


def _parse_block(path: str | os.PathLike, start: int, lines: list[str], trees: bool) -> Sentence:
    """Parse and check one sentence block; ``start`` is the line number of ``lines[0]``."""
    metadata = conllu.Metadata()
    tokens: list[conllu.Token] = []
    words: list[tuple[int, conllu.Token]] = []  # (line number, token) of syntactic words
    for number, line in enumerate(lines, start):
        where = f"{path}:{number}"
        if line.startswith("#"):
            if tokens:
                raise ConlluError(f"{where}: comment line after the first token line")
            metadata.update(parse_comment_line(line, _KEEP_ALL_COMMENTS))
            continue
        columns = line.split("\t")
        if len(columns) != len(FIELDS):
            raise ConlluError(f"{where}: expected 10 tab-separated columns, found {len(columns)}")
        token = conllu.Token(zip(FIELDS, columns))
        try:
            token["id"] = parse_id_value(columns[0])
        except ParseException:
            token["id"] = None
        if token["id"] is None:
            raise ConlluError(f"{where}: invalid ID {columns[0]!r}")
        try:
            token["head"] = parse_int_value(columns[6])
        except ParseException:
            raise ConlluError(f"{where}: HEAD {columns[6]!r} is not an integer") from None
        tokens.append(token)
        if isinstance(token["id"], int):
            if token["id"] != len(words) + 1:
                expected = len(words) + 1
                raise ConlluError(f"{where}: word ID {columns[0]} where {expected} was expected")
            words.append((number, token))
    if not words:
        raise ConlluError(f"{path}:{start}: sentence without word lines")

    for number, token in words:
        head = token["head"]
        if head is None and trees:
            raise ConlluError(f"{path}:{number}: missing HEAD")
        if head is not None and not 0 <= head <= len(words):
            raise ConlluError(f"{path}:{number}: HEAD {head} outside 0..{len(words)}")
    return Sentence(
        words=[token["form"] for _, token in words],
        upos=[token["upos"] for _, token in words],
        heads=[token["head"] for _, token in words] if trees else None,
        deprels=[token["deprel"] for _, token in words] if trees else None,
        tokenlist=conllu.TokenList(tokens, metadata),
        source=f"{path}:{start}",
    )


def _tree_problem(heads: list[int]) -> str | None:
    """Why ``heads`` (head of word m at ``heads[m-1]``) is not a tree, or None."""
    roots = heads.count(0)
    if roots > 1:
        return f"{roots} words attached to the root"
    reaches_root = {0}
    for word in range(1, len(heads) + 1):
        path: list[int] = []
        while word not in reaches_root:
            if word in path:
                return f"cycle through word {word}"
            path.append(word)
            word = heads[word - 1]
        reaches_root.update(path)
    return None


def read_text(path: str | os.PathLike) -> list[Sentence]:
    """Read one pre-tokenised sentence per line (whitespace-separated words).

    Words get UPOS ``_`` and no trees; each sentence gets a TokenList (with a
    ``# text`` comment) so predictions can be written as CoNLL-U. A blank line raises.
    """
    with open(path, encoding="utf-8") as file:
        lines = file.read().split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise ConlluError(f"{path}:1: empty file, no sentences")
    sentences = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            raise ConlluError(f"{path}:{number}: blank line (expected one sentence per line)")
        tokens = [conllu.Token(zip(FIELDS, (i, word, "_", "_", "_", "_", None, "_", "_", "_")))
                  for i, word in enumerate(words, 1)]
        metadata = conllu.Metadata(text=" ".join(words))
        sentences.append(Sentence(words, ["_"] * len(words), None, None,
                                  conllu.TokenList(tokens, metadata), f"{path}:{number}"))
    return sentences


def read_sentences(path: str | os.PathLike) -> list[Sentence]:
    """Sentences to parse or to learn from without trees: ``.txt`` as text, else CoNLL-U."""
    return read_text(path) if str(path).endswith(".txt") else read_conllu(path, trees=False)


def has_upos(sentences: Sequence[Sentence]) -> bool:
    """Whether there are sentences and all their words carry a UPOS tag (not ``_``)."""
    return bool(sentences) and all("_" not in s.upos for s in sentences)


def write_conllu(sentences: Sequence[Sentence], path_or_file: str | os.PathLike | TextIO,
                 heads: Sequence[Sequence[int]] | None = None,
                 deprels: Sequence[Sequence[str]] | None = None) -> None:
    """Write sentences as CoNLL-U, HEAD and DEPREL replaced by the given predictions.

    ``heads[i]`` / ``deprels[i]`` align with ``sentences[i].words``; when omitted the
    column is written as read. Everything else (comments, multiword-token lines, empty
    nodes, DEPS, ...) is written unchanged, so ``read_conllu`` then ``write_conllu``
    reproduces a UD file byte for byte.
    """
    for name, predictions in (("heads", heads), ("deprels", deprels)):
        if predictions is not None and len(predictions) != len(sentences):
            raise ValueError(f"{len(predictions)} {name} for {len(sentences)} sentences")
    if isinstance(path_or_file, (str, os.PathLike)):
        output = open(path_or_file, "w", encoding="utf-8")
    else:
        output = nullcontext(path_or_file)
    with output as file:
        for i, sentence in enumerate(sentences):
            tokenlist = sentence.tokenlist
            if heads is not None or deprels is not None:
                tokenlist = _with_predictions(sentence, None if heads is None else heads[i],
                                              None if deprels is None else deprels[i])
            file.write(tokenlist.serialize())


def _with_predictions(sentence: Sentence, heads: Sequence[int] | None,
                      deprels: Sequence[str] | None) -> conllu.TokenList:
    """A copy of the sentence's TokenList with the words' HEAD and/or DEPREL replaced."""
    for name, values in (("heads", heads), ("deprels", deprels)):
        if values is not None and len(values) != len(sentence):
            raise ValueError(f"{sentence.source}: {len(values)} {name} for {len(sentence)} words")
    tokens = []
    for token in sentence.tokenlist:
        token = conllu.Token(token)
        if isinstance(token["id"], int):
            if heads is not None:
                token["head"] = int(heads[token["id"] - 1])
            if deprels is not None:
                token["deprel"] = deprels[token["id"] - 1]
        tokens.append(token)
    return conllu.TokenList(tokens, sentence.tokenlist.metadata)


class Vocab:
    """Strings <-> indices. ``index`` of an unknown string is the index of ``unk``, or
    -100 (the ignore index) for a vocabulary without ``unk``.

    Plain lists inside, so it pickles; ``state_dict``/``from_state_dict`` give a
    JSON/YAML-friendly form for checkpoints and hyperparameters.
    """

    def __init__(self, itos: Iterable[str], unk: str | None = None):
        self.itos = list(itos)
        self.unk = unk
        self._stoi = {s: i for i, s in enumerate(self.itos)}
        if len(self._stoi) != len(self.itos):
            raise ValueError("vocabulary entries must be unique")
        self.unk_index = IGNORE_INDEX if unk is None else self._stoi[unk]

    @classmethod
    def from_iterable(cls, items: Iterable[str], specials: Sequence[str] = (),
                      unk: str | None = None) -> Vocab:
        """``specials`` first (in order), then the other distinct items sorted."""
        return cls([*specials, *sorted(set(items) - set(specials))], unk)

    def index(self, s: str) -> int:
        return self._stoi.get(s, self.unk_index)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, s: object) -> bool:
        return s in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and (self.itos, self.unk) == (other.itos, other.unk)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} entries, unk={self.unk!r})"

    def state_dict(self) -> dict:
        return {"itos": list(self.itos), "unk": self.unk}

    @classmethod
    def from_state_dict(cls, state: dict) -> Vocab:
        return cls(state["itos"], state["unk"])


def build_upos_vocab() -> Vocab:
    """The 17 UD UPOS tags after ``<pad>`` = 0 and ``<unk>`` = 1 (used for ``_`` too)."""
    return Vocab(["<pad>", "<unk>", *UPOS_TAGS], unk="<unk>")


def build_label_vocab(sentences: Iterable[Sentence]) -> Vocab:
    """The full DEPRELs of the sentences, sorted; no ``<unk>`` (unseen labels -> -100)."""
    return Vocab.from_iterable(d for s in sentences for d in s.deprels)


@dataclass
class Batch:
    """Padded sentences, as in docs/architecture.md (``N`` = longest sentence).

    words: per sentence its words; lengths: (B,); upos: (B, N+1); heads, labels:
    (B, N+1) or None for sentences without trees; index: (B,) position of each
    sentence in its dataset.
    """

    words: list[list[str]]
    lengths: Tensor
    upos: Tensor
    heads: Tensor | None
    labels: Tensor | None
    index: Tensor


def collate(sentences: Sequence[Sentence], upos_vocab: Vocab, label_vocab: Vocab | None,
            index: Sequence[int] | None = None) -> Batch:
    """Pad sentences into a Batch. Heads/labels only if every sentence has them (labels
    also need ``label_vocab``); ``index`` defaults to 0..B-1."""
    lengths = torch.tensor([len(s) for s in sentences])
    shape = (len(sentences), int(lengths.max()) + 1)
    upos = torch.zeros(shape, dtype=torch.long)
    has_trees = all(s.heads is not None for s in sentences)
    heads = torch.zeros(shape, dtype=torch.long) if has_trees else None
    labels = torch.full(shape, IGNORE_INDEX) if has_trees and label_vocab is not None else None
    for b, sentence in enumerate(sentences):
        n = len(sentence)
        upos[b, 1:n + 1] = torch.tensor([upos_vocab.index(t) for t in sentence.upos])
        if heads is not None:
            heads[b, 1:n + 1] = torch.tensor(sentence.heads)
        if labels is not None:
            labels[b, 1:n + 1] = torch.tensor([label_vocab.index(d) for d in sentence.deprels])
    index = torch.arange(len(sentences)) if index is None else torch.as_tensor(index)
    return Batch([list(s.words) for s in sentences], lengths, upos, heads, labels, index)


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of indices of sentences of similar length.

    Sentences are sorted by length and cut greedily into batches of at most
    ``max_sentences`` sentences and ``batch_tokens`` padded words (batch size x longest
    length); a longer sentence gets a batch of its own. With ``shuffle``, ties in length
    and the order of the batches are reshuffled on every iteration (seeded with ``seed``
    plus the iteration count); without, the order is fixed.
    """

    def __init__(self, lengths: Sequence[int], batch_tokens: int = 2000, max_sentences: int = 128,
                 shuffle: bool = False, seed: int = 0):
        if batch_tokens < 1 or max_sentences < 1:
            raise ValueError("batch_tokens and max_sentences must be positive")
        self.lengths = list(lengths)
        self.batch_tokens = batch_tokens
        self.max_sentences = max_sentences
        self.shuffle = shuffle
        self.seed = seed
        self._iterations = 0
        self._sorted_batches = self._cut(range(len(self.lengths)))

    def _cut(self, order: Iterable[int]) -> list[list[int]]:
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for i in sorted(order, key=self.lengths.__getitem__):
            longest = max(longest, self.lengths[i])
            too_many = len(batch) == self.max_sentences
            too_long = longest * (len(batch) + 1) > self.batch_tokens
            if batch and (too_many or too_long):
                batches.append(batch)
                batch, longest = [], self.lengths[i]
            batch.append(i)
        if batch:
            batches.append(batch)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            yield from self._sorted_batches
            return
        generator = torch.Generator().manual_seed(self.seed + self._iterations)
        self._iterations += 1
        batches = self._cut(torch.randperm(len(self.lengths), generator=generator).tolist())
        for i in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[i]

    def __len__(self) -> int:
        return len(self._sorted_batches)


class _IndexedSentences(Dataset):
    """Map-style dataset of ``(position, sentence)`` pairs."""

    def __init__(self, sentences: Sequence[Sentence]):
        self.sentences = sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> tuple[int, Sentence]:
        return i, self.sentences[i]


def _collate_indexed(items: Sequence[tuple[int, Sentence]], upos_vocab: Vocab,
                     label_vocab: Vocab | None) -> Batch:
    index, sentences = zip(*items)
    return collate(sentences, upos_vocab, label_vocab, index)


class DependencyDataModule(LightningDataModule):
    """UD treebank splits (plus optional unlabeled sentences) as Batches.

    Args:
        treebank: UD treebank directory name under ``root``, e.g. ``UD_English-EWT``; its
            files are found as ``*-ud-{train,dev,test}.conllu``.
        root: directory holding UD treebanks (default: ``$UD_DIR``, else ``data/ud``).
        train: training CoNLL-U file, overriding the treebank's.
        dev: development CoNLL-U file, overriding the treebank's.
        test: test CoNLL-U file, overriding the treebank's.
        unlabeled: extra sentences without trees: CoNLL-U (trees ignored) or ``.txt``
            (one tokenised sentence per line).
        labeled_size: keep only the first K training sentences labeled; the rest of the
            training file joins the unlabeled sentences (without their trees).
        predict: file to parse in ``predict`` (CoNLL-U or ``.txt``).
        batch_tokens: most padded words per batch.
        max_batch_sentences: most sentences per batch.
        num_workers: DataLoader worker processes.
        skip_invalid_trees: drop sentences whose gold HEADs are not a tree (logged)
            instead of failing; applies to train, dev and test.
        seed: seed of the training batch order.

    After ``setup``: ``train_sentences``, ``unlabeled_sentences``, ``dev_sentences``,
    ``test_sentences``, ``predict_sentences`` (Batch ``index`` points into these),
    ``upos_vocab`` and ``label_vocab`` (built from the labeled training sentences, or
    restored from a checkpoint through ``load_state_dict``).
    """

    def __init__(self, treebank: str | None = "UD_English-EWT", root: str | None = None,
                 train: str | None = None, dev: str | None = None, test: str | None = None,
                 unlabeled: str | None = None, labeled_size: int | None = None,
                 predict: str | None = None, batch_tokens: int = 2000,
                 max_batch_sentences: int = 128, num_workers: int = 0,
                 skip_invalid_trees: bool = False, seed: int = 0):
        super().__init__()
        if labeled_size is not None and labeled_size < 1:
            raise ValueError(f"labeled_size must be at least 1, not {labeled_size}")
        self.save_hyperparameters()
        self.treebank = treebank
        self.root = Path(root) if root is not None else default_root()
        self.train, self.dev, self.test = train, dev, test
        self.unlabeled = unlabeled
        self.labeled_size = labeled_size
        self.predict = predict
        self.batch_tokens = batch_tokens
        self.max_batch_sentences = max_batch_sentences
        self.num_workers = num_workers
        self.skip_invalid_trees = skip_invalid_trees
        self.seed = seed

        self.upos_vocab = build_upos_vocab()
        self.label_vocab: Vocab | None = None
        self.train_sentences: list[Sentence] = []
        self.unlabeled_sentences: list[Sentence] = []
        self.dev_sentences: list[Sentence] = []
        self.test_sentences: list[Sentence] = []
        self.predict_sentences: list[Sentence] = []

    @property
    def has_upos(self) -> bool:
        """Whether there are unlabeled sentences and all carry UPOS tags (False for text)."""
        return has_upos(self.unlabeled_sentences)

    def path(self, split: Literal["train", "dev", "test"]) -> Path:
        """The file of a split: the explicit path, else the treebank's; must exist."""
        explicit = getattr(self, split)
        if explicit is not None:
            if not os.path.isfile(explicit):
                raise FileNotFoundError(f"{split} file {explicit} not found")
            return Path(explicit)
        if self.treebank is None:
            raise FileNotFoundError(f"no {split} file: set --data.treebank or --data.{split}")
        pattern = self.root / self.treebank / f"*-ud-{split}.conllu"
        found = sorted(glob.glob(str(pattern)))
        if not found:
            raise FileNotFoundError(
                f"no {split} file: looked for {pattern}; download the treebank with"
                f" `python -m parser.fetch {self.treebank} --root {self.root}`"
                f" or pass --data.{split} PATH")
        if len(found) > 1:
            raise FileNotFoundError(f"several {split} files match {pattern}: {found}")
        return Path(found[0])

    def setup(self, stage: str | None = None) -> None:
        """Read the files the stage needs; build ``label_vocab`` when training."""
        on_invalid = "skip" if self.skip_invalid_trees else "raise"
        if stage in ("fit", None):
            train = read_conllu(self.path("train"), on_invalid=on_invalid)
            unlabeled = read_sentences(self.unlabeled) if self.unlabeled else []
            if self.labeled_size is not None:
                rest = [dataclasses.replace(s, heads=None, deprels=None)
                        for s in train[self.labeled_size:]]
                train, unlabeled = train[:self.labeled_size], rest + unlabeled
            self.train_sentences, self.unlabeled_sentences = train, unlabeled
            self.label_vocab = build_label_vocab(train)
        if stage in ("fit", "validate", None):
            self.dev_sentences = read_conllu(self.path("dev"), on_invalid=on_invalid)
        if stage in ("test", None):
            self.test_sentences = read_conllu(self.path("test"), on_invalid=on_invalid)
        if stage == "predict" and not self.predict:
            raise FileNotFoundError("nothing to predict: set --data.predict PATH")
        if stage in ("predict", None) and self.predict:
            self.predict_sentences = read_sentences(self.predict)

    def state_dict(self) -> dict:
        return {} if self.label_vocab is None else {"label_vocab": self.label_vocab.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if "label_vocab" in state_dict:
            self.label_vocab = Vocab.from_state_dict(state_dict["label_vocab"])

    def _check_label_vocab(self) -> None:
        if self.label_vocab is None:
            raise RuntimeError("no label vocabulary: fit first or restore a checkpoint (ckpt_path)")

    def _loader(self, sentences: Sequence[Sentence], shuffle: bool = False,
                seed: int = 0) -> DataLoader:
        if not sentences:
            raise RuntimeError("no sentences loaded; call setup() with the right stage first")
        sampler = BucketBatchSampler([len(s) for s in sentences], self.batch_tokens,
                                     self.max_batch_sentences, shuffle=shuffle, seed=seed)
        collate_fn = partial(_collate_indexed, upos_vocab=self.upos_vocab,
                             label_vocab=self.label_vocab)
        return DataLoader(_IndexedSentences(sentences), batch_sampler=sampler,
                          collate_fn=collate_fn, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader | CombinedLoader:
        """Labeled Batches, or with unlabeled sentences a CombinedLoader whose steps are
        ``{"labeled": Batch, "unlabeled": Batch}`` (the shorter side cycles)."""
        labeled = self._loader(self.train_sentences, shuffle=True, seed=self.seed)
        if not self.unlabeled_sentences:
            return labeled
        unlabeled = self._loader(self.unlabeled_sentences, shuffle=True, seed=self.seed + 1)
        return CombinedLoader({"labeled": labeled, "unlabeled": unlabeled}, mode="max_size_cycle")

    def val_dataloader(self) -> DataLoader:
        self._check_label_vocab()
        return self._loader(self.dev_sentences)

    def test_dataloader(self) -> DataLoader:
        self._check_label_vocab()
        return self._loader(self.test_sentences)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_sentences)
