"""Length-bucketed batch sampling."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch.utils.data import Sampler


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
