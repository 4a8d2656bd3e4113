"""benchmarks.calibration: its measures on hand-made marginals, and a parser's head marginals."""

import json
import math

import pytest
import torch

from benchmarks import calibration
from objectives.mtt import marginals
from parser.data.sentences import read_conllu
from parser.model import Parser
from parser.network import Heads


def test_expected_calibration_error_by_hand():
    # bin [0.9, 1]: confidences 0.95, 1.0, one right -> |1.95 - 1| / 4; bin [0.2, 0.3): 0.25, 0.25, both wrong -> 0.5 / 4
    confidence = torch.tensor([0.95, 1.0, 0.25, 0.25], dtype=torch.float64)
    correct = torch.tensor([True, False, False, False])
    assert calibration.expected_calibration_error(confidence, correct, bins=10) == pytest.approx((0.95 + 0.5) / 4)
    assert calibration.expected_calibration_error(torch.tensor([0.7, 0.7, 0.7]), torch.tensor([True, True, False]), 10) \
        == pytest.approx(abs(0.7 - 2 / 3))


def test_scores_of_head_marginals_by_hand():
    mu = torch.tensor([[0.0, 0.0, 0.8, 0.2], [0.5, 0.0, 0.0, 0.5]], dtype=torch.float64)  # (words, heads)
    gold = torch.tensor([3, 0])
    row = calibration.scores(mu, gold, bins=10)
    assert row["expected_uas"] == pytest.approx(100 * (0.2 + 0.5) / 2)
    assert row["accuracy"] == pytest.approx(50.0)  # word 1's best head 2 is wrong; word 2's tie goes to head 0
    assert row["confidence"] == pytest.approx(65.0)
    assert row["nll"] == pytest.approx(-(math.log(0.2) + math.log(0.5)) / 2)
    assert row["entropy"] == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2) + math.log(0.5)) / 2)


def test_sample_spreads_over_the_file():
    assert calibration.sample(list(range(10)), 3) == [0, 3, 6]
    assert calibration.sample(list(range(3)), 5) == [0, 1, 2]


def test_head_marginals_of_a_parser(tiny_bert_dir, ud_dir):
    """Every word's head marginals sum to 1 at every temperature, are exactly 0 beyond its
    sentence and on itself; a higher temperature flattens them; decoded heads are the parser's."""
    torch.manual_seed(0)
    sentences = read_conllu(ud_dir / "UD_Wolof-WTB/wo_wtb-ud-dev.conllu")[:6]
    parser = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=["dep", "root"])
    for parameter in parser.network.scorer.parameters():  # random, not zero, scores
        torch.nn.init.normal_(parameter, std=0.5)
    parser.eval()
    words = calibration.head_marginals([parser], sentences, [1.0, 4.0], batch_size=4)
    count = sum(len(s) for s in sentences)
    assert words.gold.tolist() == [h for s in sentences for h in s.heads]
    assert words.decoded.tolist() == [h for p in parser.parse([s.words for s in sentences]) for h in p.heads]
    for mu in words.marginals:
        assert mu.shape == (count, max(len(s) for s in sentences) + 1)
        torch.testing.assert_close(mu.sum(1), torch.ones(count, dtype=mu.dtype))
    start = 0
    for s in sentences:
        block = words.marginals[0][start : start + len(s)]
        assert (block[:, len(s) + 1 :] == 0).all() and (block[torch.arange(len(s)), torch.arange(1, len(s) + 1)] == 0).all()
        start += len(s)
    sharp, flat = (calibration.scores(mu, words.gold, 10)["entropy"] for mu in words.marginals)
    assert flat > sharp


def test_an_ensemble_is_scored_by_its_mean_scores(tiny_bert_dir, ud_dir):
    """Several parsers: the marginals are those of the mean of their arc scores (their
    product of experts), not the mean of their marginals."""
    sentences = read_conllu(ud_dir / "UD_Wolof-WTB/wo_wtb-ud-dev.conllu")[:4]
    parsers = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        parser = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=["dep", "root"])
        for parameter in parser.network.scorer.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
        parsers.append(parser.eval())
    ensemble = calibration.head_marginals(parsers, sentences, [1.0], batch_size=4).marginals[0]
    alone = [calibration.head_marginals([p], sentences, [1.0], batch_size=4).marginals[0] for p in parsers]
    n = len(sentences[0])
    with torch.no_grad():
        arcs = sum(p.network([sentences[0].words]).arcs.double() for p in parsers) / 2
    mu = marginals(arcs, torch.tensor([n]), parsers[0].decoding.multiroot)[0, : n + 1, 1 : n + 1].T
    torch.testing.assert_close(ensemble[:n, : n + 1], mu, atol=1e-5, rtol=1e-4)  # float32 scores, batched
    assert not torch.allclose(ensemble, (alone[0] + alone[1]) / 2)


def test_main_prints_the_table_and_records_each_run(tiny_bert_dir, ud_dir, tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    saved = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=["dep", "root"]).save(tmp_path / "tiny")
    results = tmp_path / "calibration.jsonl"
    monkeypatch.setattr("sys.argv", ["calibration", "--run", "tiny", str(saved), "UD_Wolof-WTB", "--split", "dev",
                                     "--sentences", "3", "--data-root", str(ud_dir), "--results", str(results)])
    calibration.main()
    assert "| tiny | Wolof-WTB |" in capsys.readouterr().out
    row = json.loads(results.read_text())
    words = sum(len(s) for s in calibration.sample(read_conllu(ud_dir / "UD_Wolof-WTB/wo_wtb-ud-dev.conllu"), 3))
    assert row["run"] == "tiny" and row["split"] == "dev" and row["words"] == words
    assert "python -m benchmarks.calibration --run tiny" in row["command"] and row["commit"]
