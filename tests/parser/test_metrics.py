from types import SimpleNamespace

import pytest
import torch

from parser.data.vocab import LabelVocab, build_label_vocab
from parser.training.metrics import AttachmentScore, ParseScores, universal_index

LABELS = ["nmod", "nmod:poss", "obj", "root", "acl:relcl"]


def test_universal_index():
    assert universal_index(LABELS) == [0, 0, 1, 2, 3]


def random_batch(generator, batch=4, longest=7):
    lengths = torch.randint(1, longest + 1, (batch,), generator=generator)
    lengths[0] = longest
    shape = (batch, longest + 1)
    gold_heads = torch.randint(0, longest + 1, shape, generator=generator)
    pred_heads = torch.where(torch.rand(shape, generator=generator) < 0.6, gold_heads,
                             torch.randint(0, longest + 1, shape, generator=generator))
    gold_labels = torch.randint(0, len(LABELS), shape, generator=generator)
    gold_labels[torch.rand(shape, generator=generator) < 0.1] = -100  # unseen in training
    pred_labels = torch.randint(0, len(LABELS), shape, generator=generator)
    return pred_heads, pred_labels, gold_heads, gold_labels, lengths


def direct_scores(batches, universal):
    words = heads = labeled = 0
    for pred_heads, pred_labels, gold_heads, gold_labels, lengths in batches:
        for b, n in enumerate(lengths.tolist()):
            for m in range(1, n + 1):
                head_ok = pred_heads[b, m] == gold_heads[b, m]
                gold = gold_labels[b, m].item()
                label_ok = gold != -100 and universal[gold] == universal[pred_labels[b, m].item()]
                words += 1
                heads += bool(head_ok)
                labeled += bool(head_ok and label_ok)
    return 100 * heads / words, 100 * labeled / words


def test_matches_a_direct_computation():
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(generator) for _ in range(3)]
    universal = universal_index(LABELS)
    metric = AttachmentScore(universal)
    for batch in batches:
        metric.update(*batch)
    result = metric.compute()
    uas, las = direct_scores(batches, universal)
    assert result["uas"].item() == pytest.approx(uas)
    assert result["las"].item() == pytest.approx(las)
    assert 0 < las < uas < 100


def test_subtypes_count_as_equal_and_unseen_gold_labels_as_wrong():
    heads = torch.tensor([[0, 2, 0, 2]])
    gold = torch.tensor([[-100, 0, 3, -100]])  # nmod, root, unseen
    pred = torch.tensor([[0, 1, 3, 0]])  # nmod:poss, root, nmod
    lengths = torch.tensor([3])
    with_universal, exact = AttachmentScore(universal_index(LABELS)), AttachmentScore()
    for metric in (with_universal, exact):
        metric.update(heads, pred, heads, gold, lengths)
    assert with_universal.compute()["las"].item() == pytest.approx(200 / 3)
    assert exact.compute()["las"].item() == pytest.approx(100 / 3)


def test_padding_is_ignored_and_labels_are_optional():
    gold_heads = torch.tensor([[0, 0, 1, 0, 0], [0, 2, 0, 2, 3]])
    pred_heads = torch.tensor([[0, 0, 2, 4, 4], [0, 2, 0, 1, 3]])
    metric = AttachmentScore()
    metric.update(pred_heads, None, gold_heads, None, torch.tensor([2, 4]))
    result = metric.compute()
    assert list(result) == ["uas"]
    assert result["uas"].item() == pytest.approx(100 * 4 / 6)


def test_groups_give_each_treebank_its_score_and_their_macro_average():
    generator = torch.Generator().manual_seed(1)
    universal = universal_index(LABELS)
    batches = [random_batch(generator) for _ in range(4)]
    groups = [torch.randint(0, 2, (4,), generator=generator) for _ in batches]
    groups[0][:] = torch.tensor([0, 1, 0, 1])  # both groups have words
    metric = AttachmentScore(universal, groups=["UD_A", "UD_B", "UD_Unseen"])
    for batch, group in zip(batches, groups):
        metric.update(*batch, group=group)
    result = metric.compute()
    assert "las/UD_Unseen" not in result  # a group without words is left out of the average
    per_group = []
    for g, name in enumerate(["UD_A", "UD_B"]):
        chosen = [tuple(t[group == g] for t in batch[:4]) + (batch[4][group == g],) for batch, group in zip(batches, groups)]
        uas, las = direct_scores([c for c in chosen if len(c[4])], universal)
        assert result[f"uas/{name}"].item() == pytest.approx(uas)
        assert result[f"las/{name}"].item() == pytest.approx(las)
        per_group.append((uas, las))
    assert result["uas"].item() == pytest.approx((per_group[0][0] + per_group[1][0]) / 2)
    assert result["las"].item() == pytest.approx((per_group[0][1] + per_group[1][1]) / 2)
    with pytest.raises(ValueError, match="group"):
        metric.update(*batches[0])


def test_a_parsers_scores_of_a_split_add_its_taggers_accuracy_and_each_treebanks():
    """ParseScores: UAS and LAS as AttachmentScore gives them (per treebank with several),
    UPOS accuracy only for a network with a tagger; reset starts anew."""
    pred_heads, pred_labels, gold_heads, gold_labels, lengths = random_batch(torch.Generator().manual_seed(2))
    batch = SimpleNamespace(heads=gold_heads, labels=gold_labels, lengths=lengths, treebanks=["UD_A", "UD_B"] * 2)
    gold_tags = torch.full(gold_heads.shape, -100)
    gold_tags[:, 1:] = 3
    tags = torch.nn.functional.one_hot(torch.full(gold_heads.shape, 3), 5).float()  # every word tagged 3: right
    network = SimpleNamespace(label_vocab=SimpleNamespace(itos=LABELS), upos_vocab=range(5), tagger=None)
    expected = AttachmentScore(universal_index(LABELS))
    expected.update(pred_heads, pred_labels, gold_heads, gold_labels, lengths)
    plain = ParseScores(network)
    plain.update(batch, pred_heads, pred_labels, None, gold_tags)
    assert plain.compute() == expected.compute()
    tagged = ParseScores(SimpleNamespace(**{**vars(network), "tagger": object()}), ["UD_A", "UD_B"])
    tagged.update(batch, pred_heads, pred_labels, tags, gold_tags)
    result = tagged.compute()
    assert {"uas/UD_A", "las/UD_B"} <= set(result) and result["upos"].item() == 100
    tagged.reset()
    tagged.update(batch, pred_heads, pred_labels, 1 - tags, gold_tags)
    assert tagged.compute()["upos"].item() == 0


def test_gold_labels_the_parser_never_saw_count_by_their_universal_part():
    """The CoNLL 2018 scorer compares universal parts: a gold ``amod:att`` is right when the
    parser says ``amod`` (or any ``amod:*``); a universal part the parser lacks is always wrong."""
    vocab = build_label_vocab((), ["amod", "nmod:poss", "nmod:tmod", "nmod", "root"])
    assert [vocab.index(d) for d in ("amod:att", "nmod:att", "nmod", "obl:tmod", "_")] == [
        vocab.index("amod"), vocab.index("nmod"), vocab.index("nmod"), -100, -100]
    assert build_label_vocab((), ["nmod:poss", "nmod:tmod"]).index("nmod:att") == 0  # the first of its universal part
    assert LabelVocab.from_state_dict(vocab.state_dict()).index("amod:att") == vocab.index("amod")
    heads = torch.tensor([[0, 2, 0, 2, 2]])
    gold = torch.tensor([[-100] + [vocab.index(d) for d in ("amod:att", "root", "nmod:att", "obl:x")]])
    pred = torch.tensor([[0, vocab.index("amod"), vocab.index("root"), vocab.index("nmod:poss"), vocab.index("nmod")]])
    metric = AttachmentScore(universal_index(vocab.itos))
    metric.update(heads, pred, heads, gold, torch.tensor([4]))
    assert metric.compute()["las"].item() == pytest.approx(75.0)  # obl:x: no obl among the parser's labels
