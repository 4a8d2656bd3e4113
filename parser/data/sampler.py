"""Length-bucketed batches: how sentences are cut into batches, and the sampler of the
treebank splits (split across processes, resumable mid-epoch)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from objectives.conventions import ConfigurationError


def length_batches(lengths: Sequence[int], order: Iterable[int], batch_tokens: int,
                   max_sentences: int) -> list[list[int]]:
    """The indices ``order`` sorted by length (stable, so ties keep their order) and cut
    greedily into batches of at most ``max_sentences`` sentences and ``batch_tokens`` padded
    words (batch size x longest length); a longer sentence gets a batch of its own."""
    if batch_tokens < 1 or max_sentences < 1:
        raise ConfigurationError("batch_tokens and max_sentences must be positive")
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in sorted(order, key=lengths.__getitem__):
        longest = max(longest, lengths[i])
        too_many = len(batch) == max_sentences
        too_long = longest * (len(batch) + 1) > batch_tokens
        if batch and (too_many or too_long):
            batches.append(batch)
            batch, longest = [], lengths[i]
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


def replicas(num_replicas: int | None = None, rank: int | None = None) -> tuple[int, int]:
    """``(num_replicas, rank)``; each one not given comes from ``torch.distributed`` when it
    is initialised, else is 1 and 0."""
    initialised = dist.is_available() and dist.is_initialized()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} outside 0..{num_replicas - 1}")
    return num_replicas, rank


class BucketBatchSampler(DistributedSampler):
    """Batches (lists of indices) of sentences of similar length (``length_batches``),
    split across ``num_replicas`` processes (default: from ``torch.distributed``).

    - Training (``shuffle``): every epoch (``set_epoch``) reshuffles ties in length and
      the order of the batches, seeded with ``seed + epoch``; process ``rank`` takes every
      ``num_replicas``-th batch, and processes one short repeat a batch from the start, so
      that all take ``len(self)`` steps (DDP steps in lockstep).
    - Evaluation: the length-sorted batches in one permutation seeded with ``seed``, the
      same every epoch, so that the first k batches (``limit_val_batches``) spread over all
      lengths; every sentence goes to exactly one process, none is repeated (counts may
      differ by one batch), and every process gets a batch when there are enough sentences.

    It is a DistributedSampler that yields batches: a DataLoader takes it as ``sampler``
    with ``batch_size=None`` (the dataset then gets lists of indices), and Lightning leaves
    it in place instead of injecting its own. ``state_dict``: the epoch and the batches
    yielded in it, so that a sampler given it by ``load_state_dict`` goes on with the next.

    After ``load_state_dict`` the restored epoch stands, and ``set_epoch`` counts from it:
    Lightning (2.6), resuming a step-limited run (``max_steps``) from a checkpoint written at
    an epoch's end, ends that epoch again and numbers every later epoch one higher than the
    uninterrupted run did; the
    difference between its number and the restored epoch, taken when the first batch after
    the restore is drawn, is subtracted from every number it gives afterwards.
    """

    def __init__(self, lengths: Sequence[int], batch_tokens: int = 2000, max_sentences: int = 128,
                 shuffle: bool = False, seed: int = 0, num_replicas: int | None = None,
                 rank: int | None = None):
        num_replicas, rank = replicas(num_replicas, rank)
        super().__init__(lengths, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.lengths = list(lengths)
        self.batch_tokens = batch_tokens
        self.max_sentences = max_sentences
        self._count = len(self._cut(range(len(self.lengths))))  # the same every epoch
        self._start = self._yielded = 0
        self._offset = 0  # Lightning's epoch number minus this sampler's (see the class docstring)
        self._requested: int | None = None  # the epoch set_epoch was last given, before it is applied
        self._restored = False  # a state was loaded and no batch drawn since

    def set_epoch(self, epoch: int) -> None:
        self._requested = epoch
        if not self._restored:
            self.epoch = epoch - self._offset

    def _cut(self, order: Iterable[int]) -> list[list[int]]:
        return length_batches(self.lengths, order, self.batch_tokens, self.max_sentences)

    def _batches(self) -> list[list[int]]:
        """This process's batches of the current epoch."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            batches = self._cut(torch.randperm(len(self.lengths), generator=generator).tolist())
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
            total = len(self) * self.num_replicas
            batches = (batches * math.ceil(total / len(batches)))[:total]
            return batches[self.rank::self.num_replicas]
        batches = self._cut(range(len(self.lengths)))
        while len(batches) < self.num_replicas and any(len(batch) > 1 for batch in batches):
            big = max(range(len(batches)), key=lambda i: len(batches[i]))
            half = len(batches[big]) // 2
            batches[big:big + 1] = [batches[big][:half], batches[big][half:]]
        generator = torch.Generator().manual_seed(self.seed)
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        return batches[self.rank::self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        start, self._start = self._start, 0
        self._yielded = start
        return self._iterate(start)

    def _iterate(self, start: int) -> Iterator[list[int]]:
        # The batches are made at the first next(), after Lightning's set_epoch.
        if self._restored:
            self._restored = False
            self._offset = 0 if self._requested is None else self._requested - self.epoch
        for batch in self._batches()[start:]:
            self._yielded += 1
            yield batch

    def __len__(self) -> int:
        if self.shuffle:
            return math.ceil(self._count / self.num_replicas)
        return len(self._batches())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batches": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        """Go on after ``state["batches"]`` batches of ``state["epoch"]``, or with the next
        epoch when those were all of it (Lightning then starts that one)."""
        self.epoch, self._start = state["epoch"], state["batches"]
        if self._start >= len(self):
            self.epoch, self._start = self.epoch + 1, 0
        self._yielded = self._start
        self._restored, self._requested = True, None
