"""The shared conventions (arc and word masks) and the linear schedules."""

import pytest
import torch

from objectives import (
    IGNORE_INDEX,
    ConfigurationError,
    Schedule,
    UPOS_TAGS,
    arc_mask,
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


def test_schedule_values():
    assert [Schedule(0.1)(step) for step in (0, 100)] == [0.1, 0.1]
    assert Schedule.of(0.5) == Schedule(0.5) and Schedule.of(Schedule(2.0, 3)) == Schedule(2.0, 3)
    warm = Schedule(2.0, warmup=4)
    assert [warm(step) for step in (0, 2, 4, 100)] == [0.0, 1.0, 2.0, 2.0]
    to_end = Schedule(2.0, warmup=4, decay="linear")  # falls to 0 at the run's last step
    assert [to_end(step, 12) for step in (0, 2, 4, 8, 12, 20)] == [0.0, 1.0, 2.0, 1.0, 0.0, 0.0]
    anneal = Schedule(1.0, decay="linear", final=0.2, until=10)  # Risk's annealed temperature
    assert [anneal(step, total_steps=1000) for step in (0, 5, 10, 50)] == pytest.approx([1.0, 0.6, 0.2, 0.2])
    # a weight equals value * linear_warmup_decay, bit for bit (old runs' weights)
    assert all(Schedule(0.1, 100, "linear")(s, 400) == 0.1 * linear_warmup_decay(s, 100, 400) for s in range(401))


def test_schedule_refuses_bad_settings():
    with pytest.raises(ConfigurationError, match="decay"):
        Schedule(1.0, decay="cosine")
    with pytest.raises(ConfigurationError, match="warmup"):
        Schedule(1.0, warmup=10, decay="linear", until=5)
    with pytest.raises(RuntimeError, match="run's length"):
        Schedule(1.0, decay="linear")(3)
