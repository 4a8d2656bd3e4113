"""The command line: `--objective` short form, and one real run with the shipped MiniLM."""

from __future__ import annotations

from pathlib import Path

import pytest

import train
from parser.sentences import read_conllu
from parser.evaluate import evaluate
from parser.predict import predict


def test_objective_short_form_expands_to_its_config():
    args = train.expand_objective(["--objective", "ge", "--trainer.max_steps", "5"])
    assert args[:2] == ["fit", "--config"] and args[2].endswith("configs/ge.yaml")
    assert args[3:] == ["--trainer.max_steps", "5"]
    assert train.expand_objective(["--objective=kl"])[2].endswith("configs/distill.yaml")
    assert train.expand_objective(["fit", "--config", "x.yaml"]) == ["fit", "--config", "x.yaml"]
    with pytest.raises(SystemExit, match="must be one of"):
        train.expand_objective(["--objective", "nope"])


@pytest.mark.parametrize("name", sorted(train.OBJECTIVE_CONFIGS))
def test_every_objective_config_instantiates(name, tiny_bert_dir):
    """Each shipped YAML is a valid LightningCLI config: model and data build from it."""
    args = train.expand_objective([f"--objective={name}", "--model.encoder", str(tiny_bert_dir)])
    cli = train.main(args[1:], run=False)  # no subcommand when run=False
    assert type(cli.model).__name__ == "Parser"
    expected = {"likelihood": "Likelihood", "risk": "Risk", "entropy": "EntropyRegularizer",
                "kl": "Distillation", "ge": "GeneralizedExpectation"}[name]
    objectives = {type(o).__name__ for o in (cli.model.supervised, cli.model.unsupervised) if o is not None}
    assert expected in objectives


def test_readme_ge_recipe_parses(tiny_bert_dir):
    """The README's GE command (targets from the labeled sample, decaying lambda) builds what it says."""
    readme = (Path(train.__file__).parent / "README.md").read_text(encoding="utf-8")
    command = readme.split("python train.py --objective ge --model.unsupervised")[1].split("#")[0]
    overrides = ("--model.unsupervised" + command).replace("\\", " ").split()
    args = train.expand_objective(["--objective", "ge", *overrides, "--model.encoder", str(tiny_bert_dir)])
    cli = train.main(args[1:], run=False)
    ge = cli.model.unsupervised
    assert len(ge.constraints) == 595 and ge.targets_from == "labeled"
    assert cli.model.hparams.unsupervised_weight == 0.1
    assert cli.model.hparams.unsupervised_schedule == "linear_decay"


@pytest.mark.slow
def test_smoke_train_predict_round_trip_with_shipped_minilm(ud_dir: Path, tmp_path: Path):
    """A few steps on a slice of EWT with the real encoder, then parse and score a file."""
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks[:48]) + "\n\n", encoding="utf-8")
    cli = train.main([
        "fit", "--config", str(train.CONFIGS / "likelihood.yaml"),
        "--data.train", str(small), "--data.dev", str(small), "--data.batch_tokens", "600",
        "--trainer.max_steps", "3", "--trainer.val_check_interval", "3", "--trainer.limit_val_batches", "2",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
    ])
    assert {"val/uas", "val/las"} <= set(cli.trainer.callback_metrics)
    assert (tmp_path / "csv").is_dir() and (tmp_path / "tensorboard").is_dir()  # both loggers, under the root dir
    best = cli.trainer.checkpoint_callback.best_model_path
    assert best and Path(best).is_file()
    out = tmp_path / "pred.conllu"
    predict(best, str(small), str(out), device="cpu")
    assert [s.words for s in read_conllu(out)] == [s.words for s in read_conllu(small)]
    assert set(evaluate(small, out)) == {"uas", "las", "clas"}
