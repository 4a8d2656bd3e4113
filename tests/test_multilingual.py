"""Many treebanks behind one parser: several treebanks in one run (sampling, caps, a dev
score each), and a parser that starts from another's network (``--model.init``)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch

import train
from objectives.conventions import ConfigurationError
from objectives.ge import load_constraints
from parser.data.datamodule import DependencyDataModule
from parser.data.sentences import read_conllu, write_conllu
from parser.model import Parser
from parser.network import Heads, Network
from parser.training.checkpoint import read
from parser.training.warm_start import start_from
from parser.runs import CONFIGS

SOURCES = {"UD_A": "UD_Wolof-WTB", "UD_B": "UD_Welsh-CCG", "UD_C": "UD_Turkish-IMST"}


def treebank(ud_dir: Path, root: Path, name: str, train_size: int, dev: bool = True) -> None:
    """``root/name``: the first sentences of a real treebank's train (and dev) file."""
    source = ud_dir / SOURCES[name]
    (root / name).mkdir(parents=True, exist_ok=True)
    for split, size in (("train", train_size), ("dev", 6 if dev else 0)):
        if size:
            sentences = read_conllu(next(source.glob(f"*-ud-{split}.conllu")))[:size]
            write_conllu(sentences, root / name / f"x_{name.lower()}-ud-{split}.conllu")


@pytest.fixture
def treebanks(ud_dir, tmp_path) -> Path:
    """UD_A (12 training sentences), UD_B (30) and UD_C (20, no dev file)."""
    for name, size, dev in (("UD_A", 12, True), ("UD_B", 30, True), ("UD_C", 20, False)):
        treebank(ud_dir, tmp_path / "ud", name, size, dev)
    return tmp_path / "ud"


def test_a_treebank_without_dev_is_trained_on_and_left_out_of_dev(treebanks, caplog):
    data = DependencyDataModule(["UD_A", "UD_B", "UD_C"], root=str(treebanks), max_treebank_sentences=25,
                                sampling_alpha=0.0)
    with caplog.at_level(logging.INFO):
        data.setup("fit")
    assert "no dev file in UD_C" in caplog.text
    assert data.treebanks("train") == ["UD_A", "UD_B", "UD_C"] and data.treebanks("dev") == ["UD_A", "UD_B"]
    counts = {name: sum(s.treebank == name for s in data.train_sentences) for name in ("UD_A", "UD_B", "UD_C")}
    assert counts == {"UD_A": 12, "UD_B": 25, "UD_C": 20}  # the first 25 of each at most
    sampler = data.train_dataloader().sampler
    assert [len(m) for m in sampler.members] == [12, 25, 20] and sampler.shares == pytest.approx([1 / 3] * 3)
    with pytest.raises(FileNotFoundError, match="no dev file"):  # one treebank: its dev is needed
        DependencyDataModule("UD_C", root=str(treebanks)).setup("fit")
    capped = DependencyDataModule("UD_B", root=str(treebanks), max_treebank_sentences=5, labeled_size=8,
                                  relatives={"UD_A": 0.25, "UD_C": 0.25})  # the cap is the relatives'
    capped.setup("fit")
    counts = {name: sum(s.treebank == name for s in capped.train_sentences) for name in ("UD_A", "UD_B", "UD_C")}
    assert counts == {"UD_A": 5, "UD_B": 8, "UD_C": 5} and capped.unlabeled_sources[0].first_line > 1


def _fit(tiny_bert_dir: Path, treebanks: Path, names: str, root: Path, *extra: str) -> Path:
    cli = train.main([
        "fit", "--trainer.max_steps", "2", "--model.encoder", str(tiny_bert_dir), "--model.heads.arc_size", "32",
        "--model.heads.label_size", "16", "--data.treebank", names, "--data.root", str(treebanks),
        "--data.batch_tokens", "300", "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", *extra,
    ])
    return Path(cli.trainer.log_dir)


def test_two_treebanks_train_together_with_a_dev_score_each_and_their_mean_selects(tiny_bert_dir, treebanks, tmp_path):
    run = _fit(tiny_bert_dir, treebanks, "[UD_A, UD_B, UD_C]", tmp_path / "runs", "--data.sampling_alpha", "0.5")
    validation = [row for row in csv.DictReader(open(run / "metrics.csv")) if row["val/las"]][-1]
    each = [float(validation[f"val/las/{name}"]) for name in ("UD_A", "UD_B")]
    assert float(validation["val/las"]) == pytest.approx(sum(each) / 2, abs=1e-4)
    assert "val/las/UD_C" not in validation  # no dev file: trained on, not scored
    assert float(validation["val/uas"]) == pytest.approx(
        (float(validation["val/uas/UD_A"]) + float(validation["val/uas/UD_B"])) / 2, abs=1e-4)


def _network(encoder: Path, labels: list[str], **heads) -> Network:
    from parser.network import EncoderOptions
    torch.manual_seed(len(labels))
    network = Network(str(encoder), EncoderOptions(), Heads(arc_size=32, label_size=16, **heads), labels)
    for parameter in network.scorer.label.parameters():  # fresh rows are zeros: make the saved ones not
        torch.nn.init.normal_(parameter)
    return network


def test_a_warm_start_copies_every_weight_and_matches_labels_by_name(tiny_bert_dir, tmp_path):
    base = Parser(str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16, tagger=True))
    base.build(["nmod", "obj", "root"])
    torch.nn.init.normal_(base.network.scorer.label.weight)
    base.save(tmp_path / "base")
    target = _network(tiny_bert_dir, ["nmod:poss", "root", "vocative", "obj"])
    fresh = target.scorer.label.weight.detach().clone()
    start_from(target, str(tiny_bert_dir), read(tmp_path / "base"), tmp_path / "base")
    saved, got = base.network.scorer.label.weight, target.scorer.label.weight
    assert torch.equal(got[0], saved[0])  # nmod:poss starts from nmod, its universal part
    assert torch.equal(got[1], saved[2]) and torch.equal(got[3], saved[1])  # by name, not position
    assert torch.equal(got[2], fresh[2])  # a label new to it keeps its fresh row
    for key, value in base.network.state_dict().items():
        if key != "scorer.label.weight" and not key.startswith("tagger."):
            assert torch.equal(target.state_dict()[key], value), key


def test_a_warm_start_that_cannot_fit_says_why_in_one_line(tiny_bert_dir, tmp_path):
    base = Parser(str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16))
    base.build(["nmod", "root"])
    base.save(tmp_path / "base")
    saved = read(tmp_path / "base")
    with pytest.raises(ConfigurationError, match="encoder is"):
        start_from(_network(tiny_bert_dir, ["root"]), "other-encoder", saved, "base")
    with pytest.raises(ConfigurationError, match=r"scorer.arc_head.0.weight is \(32, 32\) there, \(64, 32\) here"):
        start_from(Network(str(tiny_bert_dir), base.encoder_options, Heads(arc_size=64, label_size=16), ["root"]),
                   str(tiny_bert_dir), saved, "base")


def test_a_parser_fine_tuned_from_a_base_starts_from_its_weights(tiny_bert_dir, treebanks, tmp_path):
    base_run = _fit(tiny_bert_dir, treebanks, "[UD_A, UD_C]", tmp_path / "base")
    base = base_run / "checkpoints" / "best.ckpt"
    # learning rates 0: the fine-tuned parser's weights stay the ones it started from
    run = _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "target", "--model.init", str(base), "--model.lr", "0",
               "--model.encoder_lr", "0", "--trainer.max_steps", "1")
    tuned, started = Parser.load(run / "checkpoints" / "last.ckpt"), Parser.load(base)
    assert read(run / "checkpoints" / "last.ckpt").hparams["init"] == str(base)
    for key, value in started.network.state_dict().items():
        if key != "scorer.label.weight":
            assert torch.equal(tuned.network.state_dict()[key], value), key
    shared = [label for label in tuned.network.label_vocab.itos if label in started.network.label_vocab]
    assert shared
    for label in shared:
        assert torch.equal(tuned.network.scorer.label.weight[tuned.network.label_vocab.index(label)],
                           started.network.scorer.label.weight[started.network.label_vocab.index(label)])


def test_a_fine_tuned_parser_keeps_every_label_of_its_base_and_validates_from_it(tiny_bert_dir, treebanks, tmp_path):
    """``--model.init``: the base's labels and the target's new ones (a parser fine-tuned on
    few trees can still name what the base could); ``validate --model.init BASE`` scores the
    base on the target's dev as it is (zero-shot selection)."""
    base = _fit(tiny_bert_dir, treebanks, "[UD_A, UD_C]", tmp_path / "base") / "checkpoints" / "best.ckpt"
    base_labels = set(Parser.load(base).network.label_vocab.itos)
    run = _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "target", "--model.init", str(base), "--data.labeled_size", "3",
               "--trainer.max_steps", "1")
    tuned = Parser.load(run / "checkpoints" / "last.ckpt").network.label_vocab.itos
    own = {d for s in read_conllu(treebanks / "UD_B" / "x_ud_b-ud-train.conllu")[:3] for d in s.deprels}
    assert set(tuned) == base_labels | own and tuned == sorted(tuned)
    assert base_labels - own  # the base knows labels the three trees lack: they are kept
    cli = train.main(["validate", "--model.encoder", str(tiny_bert_dir), "--model.heads.arc_size", "32",
                      "--model.heads.label_size", "16", "--data.treebank", "UD_B", "--data.root", str(treebanks),
                      "--model.init", str(base), "--trainer.default_root_dir", str(tmp_path / "zero_shot"),
                      "--trainer.enable_progress_bar", "false"])
    assert cli.model.network.label_vocab.itos == sorted(base_labels)
    assert 0 <= float(cli.trainer.callback_metrics["val/las"]) <= 100


def test_no_labeled_tree_trains_on_text_alone_from_a_base(tiny_bert_dir, treebanks, tmp_path):
    """``--data.labeled_size 0``: every step reads the unlabeled stream (GE toward a rules file);
    a term that reads the labeled trees gets one line naming it."""
    base = _fit(tiny_bert_dir, treebanks, "[UD_A, UD_C]", tmp_path / "base", "--model.heads.tagger", "true") / "checkpoints" / "best.ckpt"
    rules = tmp_path / "facts.yaml"
    rules.write_text("constraints:\n  - {parent: NOUN, child: ADJ, direction: left, per: arc, target: 0.9, tolerance: 0.05}\n"
                     "  - {parent: any, child: any, direction: left, target: 0.5}\n")
    ge = ("[{objective: {class_path: objectives.GeneralizedExpectation, init_args: {constraints: " + str(rules)
          + ", penalty: l1}}, data: unlabeled}]")
    run = _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "ge", "--model.init", str(base), "--data.labeled_size", "0",
               "--model.heads.tagger", "true", "--model.terms", ge)
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(row["train/generalized_expectation"]) for row in rows if row.get("train/generalized_expectation")]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2
    likelihood = "[{objective: objectives.Likelihood}]"
    with pytest.raises(ConfigurationError, match="term likelihood: Likelihood reads the labeled trees, but the run has none"):
        _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "bad", "--model.init", str(base), "--data.labeled_size", "0",
             "--model.terms", likelihood)
    with pytest.raises(ConfigurationError, match="the parser needs labels"):
        _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "bad2", "--data.labeled_size", "0", "--model.terms", ge,
             "--model.heads.tagger", "true")


def _with_treebank_vectors(encoder: Path, treebanks: list[str]) -> Network:
    from parser.network import EncoderOptions
    torch.manual_seed(0)
    return Network(str(encoder), EncoderOptions(treebank_embedding=True), Heads(arc_size=32, label_size=16),
                   ["nmod", "root"], treebanks=treebanks).eval()


def test_treebank_vectors_start_at_zero_and_tell_treebanks_apart(tiny_bert_dir):
    from parser.network import EncoderOptions
    words = [["Les", "chiens", "aboient"], ["Dogs", "bark"]]
    network = _with_treebank_vectors(tiny_bert_dir, ["UD_A", "UD_B"])
    with torch.no_grad():
        network.scorer.arc.weight.normal_()  # zeros at the start: every tree alike
    plain = Network(str(tiny_bert_dir), EncoderOptions(), Heads(arc_size=32, label_size=16), ["nmod", "root"]).eval()
    plain.load_state_dict({k: v for k, v in network.state_dict().items() if "treebank" not in k})
    assert network.encoder.treebanks.itos == ["<other>", "UD_A", "UD_B"]
    assert torch.equal(network(words, treebanks=["UD_A", "UD_B"]).arcs, plain(words).arcs)  # zeros: no change yet
    with torch.no_grad():
        network.encoder.treebank_vectors.weight.normal_()
    a, b, unseen = (network(words, treebanks=[name] * 2).arcs for name in ("UD_A", "UD_B", "UD_Z"))
    assert not torch.allclose(a, b)
    assert torch.equal(unseen, network(words).arcs)  # a treebank not trained on, or none: <other>
    network.encoder.train()
    torch.manual_seed(1)
    ids = network.encoder._treebank_ids(["UD_A"] * 2000, 2000, torch.device("cpu"))
    assert 0.08 < (ids == 0).float().mean() < 0.12  # one training sentence in ten learns <other>


def test_a_base_with_treebank_vectors_trains_saves_and_passes_them_on(tiny_bert_dir, treebanks, tmp_path):
    vectors = ["--model.encoder_options.treebank_embedding", "true"]
    base_run = _fit(tiny_bert_dir, treebanks, "[UD_A, UD_C]", tmp_path / "base", *vectors)
    base = Parser.load(base_run / "checkpoints" / "last.ckpt")
    assert base.network.encoder.treebanks.itos == ["<other>", "UD_A", "UD_C"]
    sentence = [["Dogs", "bark", "."]]
    with torch.no_grad():
        base.network.encoder.treebank_vectors.weight.normal_()  # 2 steps leave them near zero
    base.save(tmp_path / "saved")
    again = Parser.load(tmp_path / "saved")
    assert again.parse(sentence, treebank="UD_A", marginals=True)[0].marginals.equal(
        base.parse(sentence, treebank="UD_A", marginals=True)[0].marginals)
    assert not again.parse(sentence, treebank="UD_A", marginals=True)[0].marginals.equal(
        again.parse(sentence, marginals=True)[0].marginals)
    run = _fit(tiny_bert_dir, treebanks, "UD_B", tmp_path / "target", *vectors, "--model.init", str(tmp_path / "saved"),
               "--model.lr", "0", "--model.encoder_lr", "0", "--trainer.max_steps", "1")
    tuned = Parser.load(run / "checkpoints" / "last.ckpt").network.encoder
    assert tuned.treebanks.itos == ["<other>", "UD_A", "UD_C", "UD_B"]
    saved = again.network.encoder.treebank_vectors.weight
    assert torch.equal(tuned.treebank_vectors.weight[:3], saved)
    assert torch.equal(tuned.treebank_vectors.weight[3], saved[0])  # the new treebank starts from <other>


@pytest.mark.parametrize("name, objectives", [
    ("multilingual_base", ["Likelihood", "TagLikelihood"]), ("transfer", ["Likelihood", "TagLikelihood"]),
    ("transfer_full", ["Likelihood", "TagLikelihood"]),
    ("transfer_student", ["Likelihood", "TagLikelihood", "Distillation"]),
    ("transfer_student_ge", ["Likelihood", "TagLikelihood", "Distillation", "GeneralizedExpectation"]),
    ("no_treebank", ["Distillation", "GeneralizedExpectation"])])
def test_the_transfer_recipes_instantiate_with_one_network(name, objectives, tiny_bert_dir):
    statistics = ["--statistics", "configs/facts/wolof.yaml"] if name == "no_treebank" else []
    cli = train.main(["--config", str(CONFIGS / f"{name}.yaml"), "--model.encoder", str(tiny_bert_dir), *statistics],
                     run=False)
    assert [type(t.objective).__name__ for t in cli.model.terms.terms] == objectives
    if statistics:  # the GE term reads the file of --statistics
        assert cli.model.terms.terms[-1].objective.constraints == load_constraints(CONFIGS / "facts" / "wolof.yaml")
        with pytest.raises(ConfigurationError, match="give --statistics FILE"):
            train.main(["--config", str(CONFIGS / f"{name}.yaml"), "--model.encoder", str(tiny_bert_dir)], run=False)
    base = train.main(["--config", str(CONFIGS / "multilingual_base.yaml"), "--model.encoder", str(tiny_bert_dir)],
                      run=False)
    assert cli.model.encoder_options == base.model.encoder_options and cli.model.heads == base.model.heads  # init fits


def test_the_base_never_sees_a_target():
    import yaml
    base = yaml.safe_load(open(CONFIGS / "multilingual_base.yaml"))["data"]["treebank"]
    targets = {"UD_Wolof-WTB", "UD_Vietnamese-VTB", "UD_Greek-GDT", "UD_Uyghur-UDT", "UD_Turkish-IMST", "UD_Welsh-CCG"}
    assert len(base) == 24 and not targets & set(base)
