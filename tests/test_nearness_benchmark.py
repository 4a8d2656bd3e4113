"""benchmarks.nearness: single-source gains from fine-tuning runs, and their rank correlation with the measures."""

import json

import pytest

from benchmarks import features, nearness


def test_a_gain_is_the_fine_tuning_with_the_candidate_over_the_target_alone(tmp_path, monkeypatch, fake_training):
    """The alone run once, one run per candidate with it at half of every epoch, the differences recorded."""
    monkeypatch.setattr(features, "test_scores", lambda checkpoint, test, scratch: {
        "uas": 0.0, "las": 60.0 if "UD_Near" in str(checkpoint) else 55.0})
    monkeypatch.setattr(features, "treebank_file", lambda treebank, split, root: tmp_path / f"{treebank}-{split}.conllu")
    rows = nearness.gain("UD_T", ["UD_Near", "UD_Far"], "base.ckpt", 1, tmp_path, tmp_path / "runs", tmp_path / "gains.jsonl")
    assert len(fake_training) == 3 and "--data.relatives" not in fake_training[0]
    assert json.loads(fake_training[1][fake_training[1].index("--data.relatives") + 1]) == {"UD_Near": 0.5}
    assert [(r["candidate"], r["dev_gain"], r["test_gain"]) for r in rows] == [("UD_Near", 0.0, 5.0), ("UD_Far", 0.0, 0.0)]
    assert [json.loads(line)["candidate"] for line in (tmp_path / "gains.jsonl").read_text().splitlines()] == [
        "UD_Near", "UD_Far"]
    nearness.gain("UD_T", ["UD_Near"], "base.ckpt", 1, tmp_path, tmp_path / "runs", tmp_path / "gains.jsonl")
    assert len(fake_training) == 3  # finished runs are reused


def test_the_correlation_is_spearmans_of_nearness_and_gain_per_target_then_chosen_and_confirming_means():
    ranks = [{"target": target, "candidate": name, "upos_ngrams": distance, "head_direction": 0.1 * distance,
              "subword_overlap": overlap, "mean_rank": distance}
             for target in ("UD_A", "UD_B")
             for name, distance, overlap in (("x", 0.1, 0.5), ("y", 0.2, 0.9), ("z", 0.3, 0.1), ("w", 0.4, 0.2))]
    gains = [{"target": "UD_A", "candidate": name, "dev_gain": value}
             for name, value in (("x", 3.0), ("y", 2.0), ("z", 1.0), ("w", -1.0))]
    gains += [{"target": "UD_B", "candidate": name, "dev_gain": value}
              for name, value in (("x", -1.0), ("y", 1.0), ("z", 2.0), ("w", 3.0), ("x", -3.0))]
    found = nearness.correlations(ranks, gains)
    assert found["UD_A"]["upos_ngrams"] == pytest.approx(1.0) and found["UD_B"]["upos_ngrams"] == pytest.approx(-1.0)
    assert found["UD_A"]["subword_overlap"] == pytest.approx(0.6)  # 1 - 6 * 4 / (4 * 15): ranks y x w z, gains x y z w
    assert found["UD_A"]["candidates"] == 4
    table = nearness.correlation_report(found, ["UD_A"]).splitlines()
    assert table[-2].startswith("| mean, chosen on | UD_A |  | +1.00") and table[-1].startswith(
        "| mean, confirmed on | UD_B |  | -1.00")
    assert nearness.correlations(ranks, gains[:2]) == {}  # fewer than three candidates: no correlation
    ranked = [{**row, "rank": index % 4 + 1} for index, row in enumerate(ranks)]
    listed = nearness.gains_table(ranked, [{**row, "test_gain": 0.5} for row in gains]).splitlines()
    assert listed[2] == "| UD_A | x | 1 | 1 | +3.00 | +0.50 |" and listed[-4] == "| UD_B | x | 1 | 2 | -2.00 | +0.50 |"
    on_test = [{**row, "dev_gain": 0.0, "test_gain": row["dev_gain"]} for row in gains]
    assert nearness.correlations(ranks, on_test, "test") == found


def test_the_gradient_per_word_of_two_batches_is_their_word_weighted_mean(tiny_bert_dir, ud_dir):
    """A sample's gradient is the mean over its words, batch by batch: the whole's is the halves'
    mean weighted by their words, and a sample is aligned with itself (cosine 1), not with another."""
    import torch

    from parser.data.sentences import read_conllu
    from parser.model import Parser
    from parser.network import Heads

    sentences = read_conllu(next((ud_dir / "UD_Wolof-WTB").glob("*-ud-train.conllu")), first=2 * nearness.GRADIENT_BATCH)
    labels = sorted({label for s in sentences for label in s.deprels})
    parser = Parser(str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16))
    parser.build(labels)
    parser.eval()
    first, second = sentences[:nearness.GRADIENT_BATCH], sentences[nearness.GRADIENT_BATCH:]
    words = [sum(len(s) for s in part) for part in (first, second)]
    whole = nearness.likelihood_gradient(parser, sentences)
    halves = [nearness.likelihood_gradient(parser, part) for part in (first, second)]
    assert torch.allclose(whole, (words[0] * halves[0] + words[1] * halves[1]) / sum(words), atol=1e-6)
    assert torch.nn.functional.cosine_similarity(whole, whole, dim=0) == pytest.approx(1.0)
    assert torch.nn.functional.cosine_similarity(*halves, dim=0) < 0.99


def test_the_gradient_alignment_joins_the_correlations_where_it_was_measured():
    ranks = [{"target": "UD_A", "candidate": name, "upos_ngrams": distance, "head_direction": distance,
              "subword_overlap": -distance, "mean_rank": distance} for name, distance in (("x", 1), ("y", 2), ("z", 3))]
    gains = [{"target": "UD_A", "candidate": name, "dev_gain": value} for name, value in (("x", 1.0), ("y", 2.0), ("z", 3.0))]
    aligned = [{"target": "UD_A", "candidate": name, nearness.GRADIENT_MEASURE: value}
               for name, value in (("x", 0.1), ("y", 0.2), ("z", 0.3))]
    found = nearness.correlations(nearness.with_gradients(ranks, aligned), gains)["UD_A"]
    assert found["upos_ngrams"] == pytest.approx(-1.0) and found[nearness.GRADIENT_MEASURE] == pytest.approx(1.0)
    assert nearness.GRADIENT_MEASURE not in nearness.correlations(ranks, gains)["UD_A"]
    assert nearness.correlation_report({"UD_A": found}, []).splitlines()[0].endswith("| gradient_alignment |")
