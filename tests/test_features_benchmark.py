"""benchmarks.features: a feature's 100-tree fine-tuning against the same fine-tuning alone, and the report."""

import json

import pytest

from benchmarks import features


@pytest.fixture
def scored(tmp_path, monkeypatch):
    """Test LAS 60 for a run with characters, 55 otherwise; the target's files under tmp_path."""
    monkeypatch.setattr(features, "test_scores", lambda checkpoint, test, scratch: {
        "uas": 70.0, "las": 60.0 if "characters" in str(checkpoint) else 55.0})
    monkeypatch.setattr(features, "treebank_file", lambda treebank, split, root: tmp_path / f"{treebank}-{split}.conllu")


def test_a_feature_is_measured_beside_the_fine_tuning_alone_run_once(tmp_path, fake_training, scored, monkeypatch):
    ranked = [{"treebank": name, "mean_rank": rank} for name, rank in (("UD_A", 1.0), ("UD_B", 2.0), ("UD_C", 4.0),
                                                                        ("UD_D", 5.0))]
    asked = []
    monkeypatch.setattr(features, "nearest_treebanks", lambda *arguments: asked.append(arguments) or ranked)
    results = tmp_path / "rows.jsonl"
    (row,) = features.run(["UD_T"], "characters+relatives", "base.ckpt", 1, tmp_path, tmp_path / "runs", None, results)
    alone, added = fake_training
    assert "--data.relatives" not in alone and "--model.encoder_options.characters" not in alone
    assert added[added.index("--model.encoder_options.characters") + 1] == "64"
    shares = json.loads(added[added.index("--data.relatives") + 1])
    assert list(shares) == ["UD_A", "UD_B", "UD_C"] and sum(shares.values()) == pytest.approx(0.5, abs=1e-3)
    assert asked[0][-2] == tmp_path / "runs" / "UD_T"  # ranked once per target, beside its runs
    assert (row["test_gain"], row["dev_gain"], row["without"]["test_las"]) == (5.0, 0.0, 55.0)
    assert (row["cpu_minutes"], row["peak_rss_mib"]) == (1.0, 300)
    features.run(["UD_T"], "relatives", "base.ckpt", 1, tmp_path, tmp_path / "runs", None, results)
    assert len(fake_training) == 3  # the alone run reused
    table = features.report([json.loads(line) for line in results.read_text().splitlines()])
    assert "| characters+relatives | UD_T | 1 | " in table and "| **relatives, mean** | gains on dev: 0 of 1 |" in table


def test_word_vectors_need_a_file(capsys):
    with pytest.raises(SystemExit) as stop:
        features.main(["run", "--target", "UD_T", "--feature", "word_vectors", "--base", "b.ckpt"])
    assert stop.value.code == 2 and "--feature word_vectors needs --vectors" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        features.main(["run", "--target", "UD_T", "--feature", "relatives", "--against", "word_vectors", "--base", "b"])
    assert stop.value.code == 2 and "--against word_vectors needs --vectors" in capsys.readouterr().err


def test_treebank_vectors_are_measured_over_the_relatives_run(tmp_path, fake_training, scored, monkeypatch):
    ranked = [{"treebank": name, "mean_rank": rank} for name, rank in (("UD_A", 1.0), ("UD_B", 2.0), ("UD_C", 4.0))]
    monkeypatch.setattr(features, "nearest_treebanks", lambda *arguments: ranked)
    results = tmp_path / "rows.jsonl"
    (row,) = features.run(["UD_T"], "relatives+treebank_vectors", "base.ckpt", 1, tmp_path, tmp_path / "runs", None,
                          results, against="relatives")
    without, added = fake_training
    assert "--data.relatives" in without and "--model.encoder_options.treebank_embedding" not in without
    assert added[added.index("--model.encoder_options.treebank_embedding") + 1] == "true"
    assert added[added.index("--data.relatives") + 1] == without[without.index("--data.relatives") + 1]
    assert row["against"] == "relatives" and "relatives/seed1" in row["without"]["command"]
    table = features.report([json.loads(line) for line in results.read_text().splitlines()])
    assert "| relatives+treebank_vectors over relatives | UD_T | 1 | " in table


def test_a_feature_is_not_measured_against_itself(capsys):
    with pytest.raises(SystemExit) as stop:
        features.main(["run", "--target", "UD_T", "--feature", "relatives", "--against", "relatives", "--base", "b"])
    assert stop.value.code == 2 and "--against names the feature itself" in capsys.readouterr().err


def test_more_relatives_are_measured_over_the_recipes_three(tmp_path, fake_training, scored, monkeypatch, capsys):
    ranked = [{"treebank": f"UD_{name}", "mean_rank": rank} for rank, name in enumerate("ABCDE", 1)]
    monkeypatch.setattr(features, "nearest_treebanks", lambda *arguments: ranked)
    results = tmp_path / "rows.jsonl"
    (row,) = features.run(["UD_T"], "relatives", "base.ckpt", 1, tmp_path, tmp_path / "runs", None, results,
                          against="relatives", nearest=5)
    without, added = fake_training
    assert list(json.loads(without[without.index("--data.relatives") + 1])) == ["UD_A", "UD_B", "UD_C"]
    wide = json.loads(added[added.index("--data.relatives") + 1])
    assert list(wide) == ["UD_A", "UD_B", "UD_C", "UD_D", "UD_E"] and sum(wide.values()) == pytest.approx(0.5, abs=1e-3)
    assert row["nearest"] == 5 and "relatives-nearest5/seed1" in row["command"]
    table = features.report([json.loads(line) for line in results.read_text().splitlines()])
    assert "| relatives (5 nearest) over relatives | UD_T | 1 | " in table
    with pytest.raises(SystemExit) as stop:
        features.main(["run", "--target", "UD_T", "--feature", "characters", "--nearest", "5", "--base", "b"])
    assert stop.value.code == 2 and "--nearest N (N >= 1) is for the relatives features" in capsys.readouterr().err
