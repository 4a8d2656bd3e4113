"""The Lightning data module: UD treebank splits and a stream of unlabeled sentences as Batches."""

from __future__ import annotations

import glob
from collections import Counter
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from objectives.conventions import ConfigurationError

from parser.data.batch import Batch, collate
from parser.data.lexicon import read_lexicon
from parser.data.sampler import BucketBatchSampler, group_shares
from parser.data.sentences import ConlluError, Sentence, has_upos, read_conllu, read_sentences
from parser.data.stream import Continuing, SentenceStream, Source
from parser.data.vocab import LabelVocab, Vocab, build_label_vocab, build_upos_vocab
from parser.fetch import default_root

log = logging.getLogger(__name__)

# torchdata 0.11 calls a torch function that newer torch deprecates, once per loader.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)


class _IndexedSentences(Dataset):
    """Map-style dataset: a list of positions -> their ``(position, sentence)`` pairs."""

    def __init__(self, sentences: Sequence[Sentence]):
        self.sentences = sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, indices: list[int]) -> list[tuple[int, Sentence]]:
        return [(i, self.sentences[i]) for i in indices]


def _collate_indexed(items: Sequence[tuple[int, Sentence]], upos_vocab: Vocab,
                     label_vocab: Vocab | None, tokenize=None) -> Batch:
    index, sentences = zip(*items)
    return collate(sentences, upos_vocab, label_vocab, index, tokenize=tokenize)


def treebank_file(treebank: str, split: str, root: str | os.PathLike | None = None) -> Path:
    """A UD treebank's file of a split, ``ROOT/<treebank>/*-ud-<split>.conllu`` (``root``: default
    ``$UD_DIR``, else ``data/ud``); FileNotFoundError says how to get it when there is none."""
    root = Path(root) if root is not None else default_root()
    pattern = root / treebank / f"*-ud-{split}.conllu"
    found = sorted(glob.glob(str(pattern)))
    if not found:
        raise FileNotFoundError(
            f"no {split} file: looked for {pattern}; download the treebank with"
            f" `python -m parser.fetch {treebank} --root {root}`"
            f" or pass --data.{split} PATH")
    if len(found) > 1:
        raise FileNotFoundError(f"several {split} files match {pattern}: {found}")
    return Path(found[0])


SPLITS = ("train", "dev", "test")


def split_order(path: Path) -> int:
    """Where a file's split comes in ``SPLITS`` (after them for a file of none)."""
    return next((i for i, split in enumerate(SPLITS) if f"-{split}." in path.name), len(SPLITS))


def treebank_files(folder: Path) -> list[Path]:
    """Every CoNLL-U file of a treebank folder, train, dev then test (a treebank that is not the
    target is training material, a test-only release included); ConfigurationError for none."""
    files = sorted(folder.glob("*.conllu"), key=split_order)
    if not files:
        raise ConfigurationError(f"{folder}: no .conllu file" if folder.is_dir() else f"no treebank folder {folder}")
    return files


def expand_files(patterns: str | Sequence[str]) -> list[str]:
    """Files named by a path, a glob or a list of both (each glob's matches sorted);
    FileNotFoundError for a missing file or a glob matching none."""
    files = []
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        if any(c in pattern for c in "*?["):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise FileNotFoundError(f"unlabeled files: nothing matches {pattern}")
            files += matches
        elif not os.path.isfile(pattern):
            raise FileNotFoundError(f"unlabeled file {pattern} not found")
        else:
            files.append(pattern)
    return files


class DependencyDataModule(LightningDataModule):
    """UD treebank splits (plus optional unlabeled sentences) as Batches.

    Args:
        treebank: UD treebank directory name under ``root``, e.g. ``UD_English-EWT``; its
            files are found as ``*-ud-{train,dev,test}.conllu``. A list of treebanks reads
            each split as their files one after the other (a multilingual parser); a
            treebank without a dev (or test) file is left out of that split, logged. A
            sentence's treebank is its file's folder (``Sentence.treebank``): with several
            of them in dev, ``val/las/<treebank>`` (and UAS) are logged each and
            ``val/las`` is their macro-average, the selection metric.
        root: directory holding UD treebanks (default: ``$UD_DIR``, else ``data/ud``).
        train: training CoNLL-U file (or list of files), overriding the treebank's.
        dev: development CoNLL-U file (or list), overriding the treebank's.
        test: test CoNLL-U file (or list), overriding the treebank's.
        unlabeled: extra sentences without trees, read as a stream (never whole): a file,
            a glob or a list of both; CoNLL-U (trees ignored) or ``.txt`` (one tokenised
            sentence per line), each maybe ``.gz``; raw text with ``unlabeled_tokenizer``.
        unlabeled_tokenizer: a tokenizer file (``treeexp tokenizer train``): the unlabeled
            files are then raw text (paragraphs separated by blank lines) that it splits
            into sentences and tokenises as the stream reads them.
        labeled_size: keep only the first K training sentences labeled; the rest of the
            training files joins the unlabeled stream (without their trees). With 0 every
            step reads only unlabeled text (every term then needs ``data: unlabeled``, and
            the parser its labels from ``--model.init``).
        lexicon: a facts file whose ``words`` list the language's closed classes (UPOS tag ->
            word forms, :mod:`parser.data.lexicon`): the unlabeled words found there are
            tagged so (where their tag is ``_``), for the terms that read tags.
        unlabeled_tags: ``keep`` the UPOS tags the unlabeled files have, or ``drop`` them
            (raw text, as a low-resource user has it: objectives that need tags then read
            the model's tagger; with ``labeled_size`` the rest of a treebank keeps no gold
            annotation at all).
        dev_size: keep only the first K dev sentences: selection with as few dev trees as
            labeled ones, as a user with K trees has (ESR's protocol).
        predict: file to parse in ``predict`` (CoNLL-U or ``.txt``).
        batch_tokens: most padded words per batch.
        max_batch_sentences: most sentences per batch.
        num_workers: DataLoader worker processes.
        skip_invalid_trees: drop sentences whose gold HEADs are not a tree (logged)
            instead of failing; applies to train, dev and test.
        partial: the training file may leave heads unknown (HEAD ``_``, DEPREL ignored
            there): partially annotated trees, trained on with the probability of all the
            trees that agree with the given arcs (``objectives.Likelihood``); dev and test
            still need whole trees.
        sampling_alpha: with several training treebanks, an epoch draws from treebank
            ``i`` a share ``p_i ~ n_i ** alpha`` of its sentences (UDify's and MaChAmp's
            smoothing; ``BucketBatchSampler``): 1 reads each sentence once (the plain
            concatenation), 0 draws each treebank equally often, 0.5 smooths.
        max_treebank_sentences: keep only the first K training sentences of each treebank (with
            ``labeled_size``: of each relative, the target's first ``labeled_size`` being its own).
        relatives: treebanks (folders, or their names under ``root``) trained on beside ``treebank``, each
            with its share of a training epoch's sentences, e.g. ``{UD_Irish-IDT: 0.25}`` (the
            target's treebanks share the rest, by ``sampling_alpha``): all their trees, train,
            dev and test files, labeled (``labeled_size`` counts only the target's), none
            validated on. With ``labeled_size`` 0 they are all the trees (the target's file its
            raw text), and their shares sum to 1.
        seed: seed of the batch orders (training, evaluation, unlabeled stream).
        shuffle_buffer: unlabeled sentences bucketed by length together (per worker).
        on_bad_unlabeled: a malformed unlabeled sentence is skipped (logged, counted in
            ``Batch.skipped``), or with ``error`` stops the run.

    After ``setup``: ``train_sentences``, ``dev_sentences``, ``test_sentences``,
    ``predict_sentences`` (Batch ``index`` points into these), ``unlabeled_sources``
    (``has_unlabeled``, ``unlabeled_has_upos``), ``upos_vocab`` and ``label_vocab`` (built
    from the labeled training sentences, or restored from a checkpoint through
    ``load_state_dict``). Batches are split across processes (``BucketBatchSampler``,
    ``SentenceStream``); the training loaders' positions are saved in checkpoints by
    Lightning and restored on resume, down to the batch.
    """

    def __init__(self, treebank: str | list[str] | None = "UD_English-EWT", root: str | None = None,
                 train: str | list[str] | None = None, dev: str | list[str] | None = None,
                 test: str | list[str] | None = None,
                 unlabeled: str | list[str] | None = None, labeled_size: int | None = None,
                 dev_size: int | None = None, predict: str | None = None, batch_tokens: int = 2000,
                 max_batch_sentences: int = 128, num_workers: int = 0,
                 skip_invalid_trees: bool = False, seed: int = 0, shuffle_buffer: int = 10_000,
                 on_bad_unlabeled: Literal["skip", "error"] = "skip",
                 unlabeled_tags: Literal["keep", "drop"] = "keep", partial: bool = False,
                 sampling_alpha: float = 1.0, max_treebank_sentences: int | None = None,
                 unlabeled_tokenizer: str | None = None, lexicon: str | None = None,
                 relatives: dict[str, float] | None = None):
        super().__init__()
        if labeled_size is not None and labeled_size < 0:
            raise ConfigurationError(f"labeled_size must be at least 0, not {labeled_size}")
        if dev_size is not None and dev_size < 1:
            raise ConfigurationError(f"dev_size must be at least 1, not {dev_size} (without dev trees, train a fixed "
                                     "number of steps with --trainer.limit_val_batches 0 and keep last.ckpt)")
        if max_treebank_sentences is not None and max_treebank_sentences < 1:
            raise ConfigurationError(f"max_treebank_sentences must be at least 1, not {max_treebank_sentences}")
        if sampling_alpha < 0:
            raise ConfigurationError(f"sampling_alpha must be at least 0, not {sampling_alpha}")
        self.save_hyperparameters()
        self.relatives = {str(name): float(share) for name, share in (relatives or {}).items()}
        if self.relatives:  # checks the shares: beside the target's trees, or (labeled_size 0) all the trees
            target = [] if labeled_size == 0 else [None]
            group_shares([1] * (len(self.relatives) + len(target)), 1.0, [*target, *self.relatives.values()])
        self.treebank = treebank
        self.root = Path(root) if root is not None else default_root()
        self.train, self.dev, self.test = train, dev, test
        self.unlabeled = unlabeled
        self.unlabeled_tokenizer = unlabeled_tokenizer
        self.lexicon = read_lexicon(lexicon) if lexicon else {}
        self.labeled_size = labeled_size
        self.dev_size = dev_size
        self.predict = predict
        self.batch_tokens = batch_tokens
        self.max_batch_sentences = max_batch_sentences
        self.num_workers = num_workers
        self.skip_invalid_trees = skip_invalid_trees
        self.partial = partial
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.on_bad_unlabeled = on_bad_unlabeled
        self.sampling_alpha = sampling_alpha
        self.max_treebank_sentences = max_treebank_sentences
        if unlabeled_tags not in ("keep", "drop"):
            raise ConfigurationError(f"unlabeled_tags must be 'keep' or 'drop', not {unlabeled_tags!r}")
        self.unlabeled_tags = unlabeled_tags

        self.upos_vocab = build_upos_vocab()
        self.label_vocab: Vocab | None = None
        # the encoder's SubwordTokenizer, set by the model: batches arrive tokenised
        self.tokenize: Callable[[list[list[str]]], Any] | None = None
        self.train_sentences: list[Sentence] = []
        self.unlabeled_sources: list[Source] = []
        self.unlabeled_has_upos = False
        self.dev_sentences: list[Sentence] = []
        self.test_sentences: list[Sentence] = []
        self.predict_sentences: list[Sentence] = []
        self._train_loaders: list[StatefulDataLoader] = []  # whose workers teardown stops

    @property
    def has_unlabeled(self) -> bool:
        """Whether training has unlabeled sentences (``unlabeled`` or ``labeled_size``)."""
        return bool(self.unlabeled_sources)

    def gold_batches(self, size: int = 256) -> Iterator[Batch]:
        """The labeled training sentences as batches of ``size`` (gold trees, labels and UPOS),
        for objectives that estimate something from them."""
        for start in range(0, len(self.train_sentences), size):
            yield collate(self.train_sentences[start : start + size], self.upos_vocab, self.label_vocab)

    def path(self, split: Literal["train", "dev", "test"]) -> Path:
        """The file of a split (see :meth:`paths`), which must be one file."""
        paths = self.paths(split)
        if len(paths) > 1:
            raise ConfigurationError(f"the {split} split has several files ({', '.join(map(str, paths))}): use paths()")
        return paths[0]

    def paths(self, split: Literal["train", "dev", "test"]) -> list[Path]:
        """The files of a split, in order: the explicit paths, else each treebank's; must
        exist, except a dev or test file some of several treebanks lack (left out, logged)."""
        explicit = getattr(self, split)
        if explicit is not None:
            files = [explicit] if isinstance(explicit, str) else list(explicit)
            for file in files:
                if not os.path.isfile(file):
                    raise FileNotFoundError(f"{split} file {file} not found")
            return [Path(file) for file in files]
        if self.treebank is None:
            raise FileNotFoundError(f"no {split} file: set --data.treebank or --data.{split}")
        treebanks = [self.treebank] if isinstance(self.treebank, str) else list(self.treebank)
        if split == "train" or len(treebanks) == 1:
            return [self._treebank_file(treebank, split) for treebank in treebanks]
        found, missing = [], []
        for treebank in treebanks:
            try:
                found.append(self._treebank_file(treebank, split))
            except FileNotFoundError as error:
                missing.append((treebank, error))
        if not found:
            raise missing[0][1]
        if missing:
            log.info("no %s file in %s: %s left out of %s", split, ", ".join(t for t, _ in missing),
                     "they are" if len(missing) > 1 else "it is", split)
        return found

    def treebanks(self, split: Literal["train", "dev", "test"]) -> list[str]:
        """The treebanks of a split's files (their folders, ``Sentence.treebank``), in order, once
        each; training's ``relatives`` after them."""
        relatives = [Path(name).name for name in self.relatives] if split == "train" else []
        return list(dict.fromkeys([*(path.parent.name for path in self.paths(split)), *relatives]))

    def relative_paths(self) -> list[Path]:
        """Every file of the ``relatives`` (train, dev, test), in their order."""
        target = {path.parent.name for path in self.paths("train")}
        if clash := sorted(target & {Path(name).name for name in self.relatives}):
            raise ConfigurationError(f"{', '.join(clash)}: a relative of itself (the target's treebank)")
        return [path for name in self.relatives for path in treebank_files(self.root / name)]

    def _treebank_file(self, treebank: str, split: str) -> Path:
        return treebank_file(treebank, split, self.root)

    def _read(self, split: Literal["train", "dev", "test"], **options) -> list[Sentence]:
        return [sentence for path in self.paths(split) for sentence in read_conllu(path, **options)]

    def _first_of_each_treebank(self, paths: Sequence[Path], **options) -> list[Sentence]:
        """The sentences of ``paths`` in order, the first ``max_treebank_sentences`` of each
        treebank (a file's folder; all without a cap), no file read past them."""
        kept: Counter[str] = Counter()
        sentences: list[Sentence] = []
        for path in paths:
            left = None if self.max_treebank_sentences is None else self.max_treebank_sentences - kept[path.parent.name]
            if left == 0:
                continue
            read = read_conllu(path, first=left, **options)
            kept[path.parent.name] += len(read)
            sentences += read
        return sentences

    def setup(self, stage: str | None = None) -> None:
        """Read the files the stage needs; build ``label_vocab`` when training."""
        on_invalid = "skip" if self.skip_invalid_trees else "raise"
        if stage in ("fit", None):
            train = (self._read("train", on_invalid=on_invalid, partial=self.partial) if self.labeled_size is not None
                     else self._first_of_each_treebank(self.paths("train"), on_invalid=on_invalid, partial=self.partial))
            sources = [Source(f, tokenizer=self.unlabeled_tokenizer) for f in expand_files(self.unlabeled)
                       ] if self.unlabeled else []
            if self.labeled_size is not None and len(train) > self.labeled_size:
                first = train[self.labeled_size]  # the rest of its file, then the files after it
                later = [str(p) for p in self.paths("train")]
                later = later[later.index(first.path) + 1 :]
                sources[:0] = [Source(first.path, first.line), *(Source(f) for f in later)]
                train = train[:self.labeled_size]
            train += self._first_of_each_treebank(self.relative_paths(), on_invalid=on_invalid)
            self.train_sentences, self.unlabeled_sources = train, sources
            firsts = [source.first_sentence() for source in sources]
            for source, first in zip(sources, firsts):
                if first is None:
                    raise ConlluError(f"{source.path}:{source.first_line}: no sentence that parses in the unlabeled file")
            self.unlabeled_has_upos = self.unlabeled_tags == "keep" and has_upos(firsts)
            self.label_vocab = build_label_vocab(train)
        if stage in ("fit", "validate", None):
            self.dev_sentences = self._read("dev", on_invalid=on_invalid)[: self.dev_size]
        if stage in ("test", None):
            self.test_sentences = self._read("test", on_invalid=on_invalid)
        if stage == "predict" and not self.predict:
            raise FileNotFoundError("nothing to predict: set --data.predict PATH")
        if stage in ("predict", None) and self.predict:
            self.predict_sentences = read_sentences(self.predict)

    def state_dict(self) -> dict:
        return {} if self.label_vocab is None else {"label_vocab": self.label_vocab.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if "label_vocab" in state_dict:
            self.label_vocab = LabelVocab.from_state_dict(state_dict["label_vocab"])

    def _check_label_vocab(self) -> None:
        if self.label_vocab is None:
            raise RuntimeError("no label vocabulary: fit first or restore a checkpoint (ckpt_path)")

    def _sampler(self, sentences: Sequence[Sentence], shuffle: bool) -> BucketBatchSampler:
        if not sentences:
            raise RuntimeError("no sentences loaded; call setup() with the right stage first")
        return BucketBatchSampler([len(s) for s in sentences], self.batch_tokens,
                                  self.max_batch_sentences, shuffle=shuffle, seed=self.seed,
                                  groups=[s.treebank for s in sentences] if shuffle else None,
                                  alpha=self.sampling_alpha,
                                  shares={Path(name).name: share for name, share in self.relatives.items()})

    def _loader(self, sentences: Sequence[Sentence], loader: type[DataLoader] = DataLoader,
                shuffle: bool = False) -> DataLoader:
        collate_fn = partial(_collate_indexed, upos_vocab=self.upos_vocab, label_vocab=self.label_vocab,
                             tokenize=self.tokenize)
        return loader(_IndexedSentences(sentences), batch_size=None, sampler=self._sampler(sentences, shuffle),
                      collate_fn=collate_fn, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader | CombinedLoader:
        """Labeled Batches, or with unlabeled sentences a CombinedLoader whose steps are
        ``{"labeled": Batch, "unlabeled": Batch}`` (only ``"unlabeled"`` without labeled
        sentences: an epoch that never ends); the labeled data sets the epoch's length, the
        endless unlabeled stream runs on across epochs."""
        if not self.unlabeled_sources:
            self._train_loaders = [self._loader(self.train_sentences, StatefulDataLoader, shuffle=True)]
            return self._train_loaders[0]
        stream = SentenceStream(self.unlabeled_sources, self.upos_vocab, self.batch_tokens,
                                self.max_batch_sentences, self.shuffle_buffer, self.seed + 1,
                                self.on_bad_unlabeled, tokenize=self.tokenize, upos=self.unlabeled_tags == "keep",
                                lexicon=self.lexicon)
        labeled = {"labeled": self._loader(self.train_sentences, StatefulDataLoader, shuffle=True)} if self.train_sentences else {}
        unlabeled = Continuing(StatefulDataLoader(stream, batch_size=None, num_workers=self.num_workers))
        self._train_loaders = [*labeled.values(), unlabeled.loader]
        return CombinedLoader({**labeled, "unlabeled": unlabeled}, mode="min_size")

    def teardown(self, stage: str) -> None:
        """Stop the worker processes of the training loaders as the run ends. Lightning stops
        those of torch's own multi-process iterators, not a StatefulDataLoader's (a run that
        stops at ``max_steps`` leaves one mid-epoch, and the unlabeled stream never ends); left
        to the garbage collector, each of its workers stops only after a 5 s timeout, paid by
        whatever runs next in the process (another fit, a test)."""
        self._stop_workers()

    def on_exception(self, exception: BaseException) -> None:
        """A run ended by an error (no teardown): its workers stop too."""
        self._stop_workers()

    def _stop_workers(self) -> None:
        for loader in self._train_loaders:
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
        self._train_loaders = []

    def val_dataloader(self) -> DataLoader:
        self._check_label_vocab()
        return self._loader(self.dev_sentences)

    def test_dataloader(self) -> DataLoader:
        self._check_label_vocab()
        return self._loader(self.test_sentences)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_sentences)
