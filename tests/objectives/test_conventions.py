"""The shared conventions (arc and word masks) and the linear schedules."""

import pytest
import torch

from objectives import (
    IGNORE_INDEX,
    UPOS_TAGS,
    arc_mask,
    interpolate,
    linear_warmup_decay,
    word_mask,
)


def test_masks_follow_the_architecture_conventions():
    lengths = torch.tensor([3, 1, 2])
    mask, words = arc_mask(lengths, 3), word_mask(lengths, 3)
    for b, n in enumerate(lengths.tolist()):
        for h in range(4):
            assert words[b, h] == (1 <= h <= n)
            for m in range(4):
                assert mask[b, h, m] == (h <= n and 1 <= m <= n and h != m)
    assert IGNORE_INDEX == -100 and len(UPOS_TAGS) == len(set(UPOS_TAGS)) == 17


def test_linear_warmup_decay():
    assert [linear_warmup_decay(step, 4, None) for step in (0, 2, 4, 100)] == [0.0, 0.5, 1.0, 1.0]
    assert [linear_warmup_decay(step, 4, 12) for step in (0, 2, 4, 8, 11, 12, 20)] == [0.0, 0.5, 1.0, 0.5, 0.125, 0.0, 0.0]
    assert [linear_warmup_decay(step, 0, 4) for step in (0, 3, 4)] == [1.0, 0.25, 0.0]


@pytest.mark.parametrize("start, end", [(2.0, 0.0), (0.5, 1.5)])
def test_interpolate(start, end):
    values = [interpolate(start, end, step, 10) for step in (0, 5, 10, 20)]
    assert values == [start, (start + end) / 2, end, end]
