"""Length-bucketed batches: how sentences are cut into batches, and the sampler of the
treebank splits (split across processes, resumable mid-epoch)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence

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


def group_shares(sizes: Sequence[int], alpha: float, fixed: Sequence[float | None] | None = None) -> list[float]:
    """Sampling probabilities of groups of ``sizes`` sentences: ``p_i ~ n_i ** alpha``
    (1: proportional, 0: uniform); a group with a ``fixed`` share has it, the others share the
    rest so (every group fixed: shares summing to 1 up to the rounding of a command line,
    normalised)."""
    if alpha < 0:
        raise ConfigurationError(f"the sampling exponent alpha must be at least 0, not {alpha}")
    fixed = list(fixed) if fixed is not None else [None] * len(sizes)
    given = [share for share in fixed if share is not None]
    free = len(given) < len(fixed)
    if any(share <= 0 for share in given) or (sum(given) >= 1 if free else not math.isclose(sum(given), 1, abs_tol=1e-3)):
        raise ConfigurationError(f"group shares {', '.join(f'{share:g}' for share in given)} must be positive and "
                                 "leave a share to the other groups (or, fixing every group, sum to 1)")
    if not free:
        return [share / sum(given) for share in given]
    weights = [size ** alpha if share is None else 0.0 for size, share in zip(sizes, fixed)]
    rest = (1 - sum(given)) / sum(weights) if any(weights) else 0.0
    return [w * rest if share is None else share for w, share in zip(weights, fixed)]


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

    With ``groups`` (a group per sentence, e.g. its treebank's name) and ``alpha`` other than 1,
    a training epoch is a fresh sample of as many sentences as there are, group ``i`` drawing
    ``N * p_i`` of them with ``p_i`` proportional to ``n_i ** alpha`` (``group_shares``):
    1 is the plain concatenation, 0 uniform over groups, values between them smooth a
    large group's share as multilingual parsers do (UDify, MaChAmp); ``shares`` fixes some
    groups' ``p_i`` (a target's related treebanks), the others sharing the rest so. A group
    draws its sentences in fresh permutations, whole ones before any sentence repeats.

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
                 rank: int | None = None, groups: Sequence[Hashable] | None = None, alpha: float = 1.0,
                 shares: Mapping[Hashable, float] | None = None):
        num_replicas, rank = replicas(num_replicas, rank)
        super().__init__(lengths, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.lengths = list(lengths)
        if groups is not None and len(groups) != len(self.lengths):
            raise ValueError(f"{len(groups)} group ids for {len(self.lengths)} sentences")
        self.members = None  # per group its sentences, when sampling is not the plain concatenation
        if groups is not None and (alpha != 1.0 or shares):
            names = list(dict.fromkeys(groups))
            if unknown := sorted(set(shares or {}) - set(names), key=str):
                raise ConfigurationError(f"shares of groups with no sentence: {', '.join(map(str, unknown))}")
            self.members = [torch.tensor([i for i, g in enumerate(groups) if g == group]) for group in names]
            self.shares = group_shares([len(m) for m in self.members], alpha, [(shares or {}).get(g) for g in names])
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
            order = torch.randperm(len(self.lengths), generator=generator)
            if self.members is not None:
                order = self._sample(generator)[order]
            batches = self._cut(order.tolist())
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

    def _sample(self, generator: torch.Generator) -> torch.Tensor:
        """An epoch's sentences (as many as there are, with repeats) drawn by group shares: (N,)."""
        total = len(self.lengths)
        counts = [round(total * share) for share in self.shares]
        counts[max(range(len(counts)), key=counts.__getitem__)] += total - sum(counts)  # exactly N
        drawn = []
        for members, count in zip(self.members, counts):
            passes = [members[torch.randperm(len(members), generator=generator)] for _ in range(-(-count // len(members)))]
            drawn += [torch.cat(passes)[:count]] if passes else []
        return torch.cat(drawn)

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
