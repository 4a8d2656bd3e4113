"""The Lightning data module: UD treebank splits and unlabeled sentences as Batches."""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Literal

from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader, Dataset

from .batch import Batch, collate
from .fetch import default_root
from .sampler import BucketBatchSampler
from .sentences import Sentence, has_upos, read_conllu, read_sentences
from .vocab import Vocab, build_label_vocab, build_upos_vocab


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
