"""BucketBatchSampler: length buckets split across processes, representative evaluation
order, per-epoch reshuffling and mid-epoch resume."""

from collections import Counter

import pytest
import torch
from torch.utils.data import DistributedSampler

from objectives.conventions import ConfigurationError
from parser.data.sampler import BucketBatchSampler, group_shares, length_batches

LENGTHS = [5, 40, 3, 17, 3, 8, 90, 12, 5, 5, 22, 1, 30, 2, 9, 14, 7, 6, 11, 4, 25, 3]


def sampler(**kwargs):
    return BucketBatchSampler(LENGTHS, batch_tokens=40, max_sentences=3, **kwargs)


def flat(batches):
    return sorted(i for batch in batches for i in batch)


def test_batches_respect_the_budget():
    batches = length_batches(LENGTHS, range(len(LENGTHS)), 40, 3)
    assert flat(batches) == list(range(len(LENGTHS)))
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(LENGTHS[i] for i in batch) <= 40
    assert [6] in batches  # longer than the budget: alone
    assert isinstance(sampler(), DistributedSampler)  # so Lightning does not inject its own


def test_evaluation_order_is_fixed_and_spread_over_lengths():
    one = sampler()
    batches = list(one)
    assert flat(batches) == list(range(len(LENGTHS))) and len(one) == len(batches)
    assert list(one) == batches and list(sampler()) == batches  # every epoch, every instance
    one.set_epoch(3)
    assert list(one) == batches
    by_length = length_batches(LENGTHS, range(len(LENGTHS)), 40, 3)
    assert batches[:2] != by_length[:2]  # not the shortest sentences first
    assert max(LENGTHS[i] for batch in batches[:2] for i in batch) > sorted(LENGTHS)[len(LENGTHS) // 2]


@pytest.mark.parametrize("replicas", [2, 3])
def test_evaluation_split_has_no_duplicates_or_gaps(replicas):
    parts = [list(sampler(num_replicas=replicas, rank=r)) for r in range(replicas)]
    assert flat(b for part in parts for b in part) == list(range(len(LENGTHS)))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert [len(sampler(num_replicas=replicas, rank=r)) for r in range(replicas)] == list(map(len, parts))


def test_evaluation_gives_every_process_a_batch():
    few = BucketBatchSampler([3, 4, 5], batch_tokens=100, num_replicas=2, rank=0)
    parts = [list(BucketBatchSampler([3, 4, 5], batch_tokens=100, num_replicas=2, rank=r)) for r in range(2)]
    assert all(parts) and flat(parts[0] + parts[1]) == [0, 1, 2] and len(few) == len(parts[0])


def test_training_split_has_equal_counts_and_covers_everything():
    parts = [list(sampler(shuffle=True, num_replicas=3, rank=r)) for r in range(3)]
    count = len(length_batches(LENGTHS, range(len(LENGTHS)), 40, 3))
    assert [len(p) for p in parts] == [-(-count // 3)] * 3 == [len(sampler(shuffle=True, num_replicas=3, rank=0))] * 3
    assert set(flat(b for part in parts for b in part)) == set(range(len(LENGTHS)))
    assert sum(map(len, parts)) - count < 3  # padding repeats fewer batches than processes


def test_set_epoch_reshuffles_reproducibly():
    one = sampler(shuffle=True, seed=1)
    epochs = []
    for epoch in range(3):
        one.set_epoch(epoch)
        epochs.append(list(one))
        assert flat(epochs[-1]) == list(range(len(LENGTHS)))
    assert epochs[0] != epochs[1] != epochs[2]
    again = sampler(shuffle=True, seed=1)
    again.set_epoch(1)
    assert list(again) == epochs[1]
    assert list(sampler(shuffle=True, seed=2)) != epochs[0]


def test_state_dict_resumes_with_the_next_batch():
    one = sampler(shuffle=True, seed=5)
    one.set_epoch(2)
    expected = list(one)
    iterator = iter(one)
    consumed = [next(iterator) for _ in range(4)]
    state = one.state_dict()
    assert state == {"epoch": 2, "batches": 4}
    resumed = sampler(shuffle=True, seed=5)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert consumed + list(resumed) == expected
    assert list(resumed) == expected  # the next epoch is whole again


def test_state_at_the_end_of_an_epoch_resumes_with_the_next_epoch():
    one = sampler(shuffle=True, seed=5)
    one.set_epoch(2)
    list(one)
    resumed = sampler(shuffle=True, seed=5)
    resumed.load_state_dict(one.state_dict())
    one.set_epoch(3)
    assert resumed.epoch == 3 and list(resumed) == list(one)


GROUPS = [0] * 16 + [1] * 4 + [2] * 2  # three treebanks of 16, 4 and 2 sentences


def test_group_shares_go_from_proportional_to_uniform():
    assert group_shares([16, 4], 1.0) == pytest.approx([0.8, 0.2])
    assert group_shares([16, 4], 0.0) == pytest.approx([0.5, 0.5])
    assert group_shares([16, 4], 0.5) == pytest.approx([4 / 6, 2 / 6])
    with pytest.raises(ConfigurationError, match="alpha"):
        group_shares([16, 4], -1)


def test_shares_fixed_for_every_group_sum_to_one_as_a_command_line_rounds_them():
    assert group_shares([16, 4, 2], 1.0, [0.3333] * 3) == pytest.approx([1 / 3] * 3)  # normalised
    assert sum(group_shares([16, 4], 1.0, [0.25, 0.75])) == 1
    for shares in ([0.3, 0.3, 0.3], [0.5, 0.5, 0.5]):
        with pytest.raises(ConfigurationError, match="sum to 1"):
            group_shares([16, 4, 2], 1.0, shares)


def test_plain_concatenation_is_the_sampler_without_groups():
    for epoch in range(3):
        plain, grouped = sampler(shuffle=True, seed=5), sampler(shuffle=True, seed=5, groups=GROUPS, alpha=1.0)
        plain.set_epoch(epoch)
        grouped.set_epoch(epoch)
        assert list(plain) == list(grouped)


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_an_epoch_draws_each_treebank_its_share_in_whole_passes(alpha):
    one = sampler(shuffle=True, seed=2, groups=GROUPS, alpha=alpha)
    expected = [round(len(LENGTHS) * share) for share in group_shares([16, 4, 2], alpha)]
    for epoch in range(4):
        drawn = one._sample(torch.Generator().manual_seed(epoch)).tolist()
        assert len(drawn) == len(LENGTHS)
        counts = [sum(GROUPS[i] == g for i in drawn) for g in range(3)]
        assert abs(counts[0] - expected[0]) <= 1 and counts[1:] == expected[1:]
        for g in range(3):  # a sentence repeats only after its whole treebank
            times = [drawn.count(i) for i in range(len(LENGTHS)) if GROUPS[i] == g]
            assert max(times) - min(times) <= 1 and sum(times) == counts[g]
        one.set_epoch(epoch)
        batches = list(one)
        assert len(batches) == len(one)  # the epoch's length does not depend on the draw
    assert counts[2] > 2  # the smallest treebank is drawn more often than it has sentences


def test_a_sampled_epoch_resumes_mid_way():
    one = sampler(shuffle=True, seed=3, groups=GROUPS, alpha=0.0)
    one.set_epoch(1)
    batches = list(one)
    iterator = iter(one)
    next(iterator), next(iterator)
    state = one.state_dict()
    resumed = sampler(shuffle=True, seed=3, groups=GROUPS, alpha=0.0)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert list(resumed) == batches[2:]


def test_fixed_group_shares_leave_the_rest_to_the_others_by_alpha():
    assert group_shares([16, 4, 2], 1.0, [None, 0.25, 0.25]) == pytest.approx([0.5, 0.25, 0.25])
    assert group_shares([16, 4, 4], 0.0, [0.5, None, None]) == pytest.approx([0.5, 0.25, 0.25])
    assert group_shares([16, 4], 1.0, [0.3, 0.7]) == pytest.approx([0.3, 0.7])
    for fixed in ([None, 0.6, 0.4], [None, 0.0, 0.2], [0.3, 0.3]):
        with pytest.raises(ConfigurationError, match="group shares"):
            group_shares([16, 4, 2][:len(fixed)], 1.0, fixed)


def test_an_epoch_draws_a_group_with_a_fixed_share_that_share():
    """The smallest treebank (2 of 22 sentences) given half of every epoch: 11 draws of it."""
    one = sampler(shuffle=True, seed=4, groups=GROUPS, shares={2: 0.5})
    drawn = Counter(GROUPS[i] for i in one._sample(torch.Generator().manual_seed(0)).tolist())
    assert drawn == {2: 11, 0: round(11 * 16 / 20), 1: 11 - round(11 * 16 / 20)}
    with pytest.raises(ConfigurationError, match="no sentence: 7"):
        sampler(shuffle=True, groups=GROUPS, shares={7: 0.5})
