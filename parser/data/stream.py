"""Unlabeled sentences as an endless stream of length-bucketed Batches, read lazily.

Memory holds one shuffle buffer per DataLoader worker, never the corpus, so a corpus of
any size starts training as fast as a small one. Malformed lines are skipped (logged with
file and line, counted in ``Batch.skipped``) or, with ``on_bad="error"``, fatal.
"""

from __future__ import annotations


import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from torch.utils.data import IterableDataset, get_worker_info

from parser.data.batch import Batch, collate
from parser.data.lexicon import tag_words
from parser.data.sampler import length_batches, replicas
from parser.data.sentences import ConlluError, Record, Sentence, is_text, parse_record, parse_records, records
from parser.data.tokenizer import Tokenizer
from parser.data.vocab import Vocab

log = logging.getLogger(__name__)
MAX_LOGGED = 100  # skipped lines logged one by one per worker; later ones are only counted


@dataclass(frozen=True)
class Source:
    """A file of sentences without trees (``-``: standard input), read from line
    ``first_line`` on (the labeled training file's tail after ``labeled_size`` sentences
    starts further in). ``tokenizer``: the file is raw text, split and tokenised by this
    tokenizer file (:mod:`parser.data.tokenizer`); else ``lines``: one tokenised sentence per
    line, not CoNLL-U (default: by name, ``.txt``)."""

    path: str
    first_line: int = 1
    tokenizer: str | None = None
    lines: bool | None = None

    @property
    def text(self) -> bool:
        """Whether the records are lines of tokenised text (else CoNLL-U blocks)."""
        return self.tokenizer is None and (is_text(self.path) if self.lines is None else self.lines)

    def records(self) -> Iterator[Record | ConlluError]:
        """The Records from ``first_line`` on, a malformed raw line as its ConlluError in its place."""
        found = records(self.path, self.text) if self.tokenizer is None else Tokenizer(self.tokenizer).records(self.path)
        return (r for r in found if isinstance(r, ConlluError) or r.line >= self.first_line)

    def sentences(self) -> Iterator[Sentence | ConlluError]:
        """The sentences read lazily, a malformed one as its ConlluError in its place."""
        return parse_records(self.path, self.records(), self.text)

    def first_sentence(self) -> Sentence | None:
        """The first sentence that parses, or None; a binary file raises ConlluError."""
        return next((s for s in self.sentences() if isinstance(s, Sentence)), None)


class SentenceStream(IterableDataset):
    """Sentences of ``sources`` without trees, pass after pass without end, as Batches.

    Each pass reads the files in an order shuffled with ``(seed, pass)`` and numbers their
    sentences k = 0, 1, ...; sentence k belongs to shard k mod S, where the S =
    processes x DataLoader workers shards are the workers of every process (process
    ``rank`` of ``num_replicas``, default from ``torch.distributed``): each sentence is
    used once per pass, by one worker of one process. A shard collects
    ``shuffle_buffer`` of its sentences at a time, cuts them with ``length_batches``
    (ties in length shuffled) and yields the batches in shuffled order, all seeded with
    ``(seed, pass, shard, buffer start)``: a pass is reproducible from the seed.

    With ``upos=False`` the sentences' UPOS tags are dropped (``_``): the stream is raw text
    even where the files are tagged; ``lexicon`` (form -> UPOS, :mod:`parser.data.lexicon`)
    then tags the words it lists. Batches carry ``index`` = k and ``skipped`` = malformed lines of the buffer (on its
    first batch). ``state_dict``: the pass, the k where the current buffer starts and the
    batches of it yielded; a stream given it by ``load_state_dict`` re-reads that buffer
    and goes on with the next batch (per worker: StatefulDataLoader keeps one state each).
    """

    def __init__(self, sources: Sequence[Source], upos_vocab: Vocab, batch_tokens: int = 2000,
                 max_sentences: int = 128, shuffle_buffer: int = 10_000, seed: int = 0,
                 on_bad: Literal["skip", "error"] = "skip", num_replicas: int | None = None,
                 rank: int | None = None, tokenize: Callable[[list[list[str]]], Any] | None = None,
                 upos: bool = True, lexicon: Mapping[str, str] | None = None):
        if on_bad not in ("skip", "error"):
            raise ValueError(f"on_bad must be 'skip' or 'error', not {on_bad!r}")
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1, not {shuffle_buffer}")
        if not sources:
            raise ValueError("no unlabeled files")
        self.sources = list(sources)
        self.upos_vocab = upos_vocab
        self.tokenize = tokenize
        self.upos = upos
        self.lexicon = lexicon or {}
        self.batch_tokens = batch_tokens
        self.max_sentences = max_sentences
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.on_bad = on_bad
        self.num_replicas, self.rank = replicas(num_replicas, rank)
        self.load_state_dict({"pass": 0, "start": 0, "batches": 0})

    def state_dict(self) -> dict:
        return {"pass": self._pass, "start": self._start, "batches": self._batches}

    def load_state_dict(self, state: dict) -> None:
        self._pass, self._start, self._batches = state["pass"], state["start"], state["batches"]

    def shard(self) -> tuple[int, int]:
        """(this worker's shard, number of shards)."""
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.rank * workers + worker, self.num_replicas * workers

    def __iter__(self) -> Iterator[Batch]:
        shard, shards = self.shard()
        self._logged = 0
        while True:
            whole_pass, produced = self._start == 0 and self._batches == 0, False
            for sentences, skipped, end in self._buffers(shard, shards):
                batches = self._bucket(sentences, shard)
                if self._batches:  # resumed inside this buffer: its skipped lines were counted
                    skipped = 0
                for batch in batches[self._batches:]:
                    self._batches += 1
                    produced = True
                    indices, chosen = zip(*batch)
                    if not self.upos:
                        chosen = [replace(s, upos=["_"] * len(s.words)) for s in chosen]
                    if self.lexicon:
                        chosen = [tag_words(s, self.lexicon) for s in chosen]
                    yield collate(chosen, self.upos_vocab, None, indices, skipped, self.tokenize)
                    skipped = 0
                self._start, self._batches = end, 0
            if whole_pass and not produced:
                files = ", ".join(source.path for source in self.sources)
                raise ConlluError(f"{files}: no usable sentence for shard {shard} of {shards}"
                                  " (processes x DataLoader workers); give more unlabeled sentences")
            self._pass, self._start, self._batches = self._pass + 1, 0, 0

    def _records(self) -> Iterator[tuple[Source, Record | ConlluError]]:
        """This pass's records in order; a file that cannot be read on counts as one bad record."""
        order = list(self.sources)
        random.Random(f"{self.seed}:{self._pass}").shuffle(order)
        for source in order:
            try:
                for record in source.records():
                    yield source, record
            except ConlluError as error:
                yield source, error
            except OSError as error:  # removed or unreadable since the run started
                yield source, ConlluError(f"{source.path}: cannot be read ({error.strerror or error})")

    def _buffers(self, shard: int, shards: int) -> Iterator[tuple[list[tuple[int, Sentence]], int, int]]:
        """(this shard's ``(k, sentence)`` pairs, malformed lines among them, k after the last)
        per buffer of the pass, from k = ``self._start`` on."""
        buffer: list[tuple[int, Sentence]] = []
        skipped, k = 0, self._start - 1
        for k, (source, record) in enumerate(self._records()):
            if k < self._start or k % shards != shard:
                continue
            try:
                if isinstance(record, ConlluError):
                    raise record
                buffer.append((k, parse_record(source.path, record, source.text)))
            except ConlluError as error:
                skipped += 1
                self._bad(error)
            if len(buffer) + skipped == self.shuffle_buffer:
                yield buffer, skipped, k + 1
                buffer, skipped = [], 0
        if buffer or skipped:
            yield buffer, skipped, k + 1

    def _bad(self, error: ConlluError) -> None:
        if self.on_bad == "error":
            raise error
        self._logged += 1
        if self._logged <= MAX_LOGGED:
            log.warning("skipped unlabeled sentence: %s", error)
        if self._logged == MAX_LOGGED:
            log.warning("further skipped unlabeled sentences are counted (Batch.skipped), not logged")

    def _bucket(self, sentences: list[tuple[int, Sentence]], shard: int) -> list[list[tuple[int, Sentence]]]:
        rng = random.Random(f"{self.seed}:{self._pass}:{shard}:{self._start}")
        order = list(range(len(sentences)))
        rng.shuffle(order)
        batches = length_batches([len(s) for _, s in sentences], order, self.batch_tokens, self.max_sentences)
        rng.shuffle(batches)
        return [[sentences[i] for i in batch] for batch in batches]


class Continuing:
    """An iterable whose every ``iter`` continues one iterator of ``loader``, so that an
    endless stream runs on across epochs instead of starting over; its state is the
    loader's (a StatefulDataLoader), so Lightning saves it in checkpoints."""

    def __init__(self, loader):
        self.loader = loader
        self._iterator = None

    def __iter__(self):
        if self._iterator is None:
            self._iterator = iter(self.loader)
        return self._iterator

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)
        self._iterator = None
