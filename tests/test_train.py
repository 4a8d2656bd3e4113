"""The command line: `--objective` short form, and one real run with the shipped MiniLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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
    anywhere = train.expand_objective(["--trainer.max_steps", "5", "--objective", "ge"])
    assert anywhere[:2] == ["fit", "--config"] and anywhere[3:] == ["--trainer.max_steps", "5"]
    assert train.expand_objective(["test", "--objective=ge", "--ckpt_path", "x"])[:2] == ["test", "--config"]
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
def test_smoke_train_predict_round_trip_with_shipped_minilm(ud_dir: Path, tmp_path: Path, caplog):
    """A few steps on a slice of EWT with the real encoder and the shipped config as a user
    runs it (no validation interval given: the run validates before it stops), then parse
    and score a file with the best checkpoint."""
    small = _slice(ud_dir, tmp_path, 48)
    cli = train.main([
        "fit", "--config", str(train.CONFIGS / "likelihood.yaml"),
        "--data.train", str(small), "--data.dev", str(small), "--data.batch_tokens", "600",
        "--trainer.max_steps", "3", "--trainer.limit_val_batches", "2",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
    ])
    assert {"val/uas", "val/las"} <= set(cli.trainer.callback_metrics)
    run = tmp_path / "likelihood" / "version_0"  # one folder per run: logs, config and checkpoints
    assert (run / "metrics.csv").is_file() and list(run.glob("events.out.tfevents.*")) and (run / "config.yaml").is_file()
    best = Path(cli.trainer.checkpoint_callback.best_model_path)
    assert best == run / "checkpoints" / "best.ckpt" and best.is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert "optimizer_states" not in torch.load(best, weights_only=True)  # resume from last.ckpt instead
    assert f"best checkpoint: {best}" in caplog.text
    out = tmp_path / "pred.conllu"
    predict(str(best), str(small), str(out), device="cpu")
    assert [s.words for s in read_conllu(out)] == [s.words for s in read_conllu(small)]
    assert set(evaluate(small, out)) == {"uas", "las", "clas"}


def _slice(ud_dir: Path, tmp_path: Path, sentences: int) -> Path:
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks[:sentences]) + "\n\n", encoding="utf-8")
    return small


@pytest.fixture(scope="module")
def teacher_checkpoint(tiny_bert_dir, ud_dir, tmp_path_factory) -> Path:
    """best.ckpt of a 2-step likelihood run on the tiny encoder (the teacher of distill.yaml)."""
    tmp_path = tmp_path_factory.mktemp("teacher")
    return _short_run("likelihood", tiny_bert_dir, _slice(ud_dir, tmp_path, 30), tmp_path, [])


def _short_run(name: str, encoder: Path, data: Path, root: Path, extra: list[str]) -> Path:
    """``python train.py --objective NAME`` for 2 steps, as a user shortens it; returns best.ckpt."""
    cli = train.main([
        "--objective", name, "--trainer.max_steps", "2", "--model.encoder", str(encoder),
        "--model.arc_size", "32", "--model.label_size", "16", "--data.train", str(data), "--data.dev", str(data),
        "--data.batch_tokens", "300", "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", *extra,
    ])
    assert cli.trainer.global_step == 2
    run = root / train.OBJECTIVE_CONFIGS[name].removesuffix(".yaml") / "version_0" / "checkpoints"
    assert (run / "best.ckpt").is_file() and (run / "last.ckpt").is_file()
    return run / "best.ckpt"


@pytest.mark.parametrize("name", sorted(train.OBJECTIVE_CONFIGS))
def test_every_shipped_config_ends_a_short_run_cleanly(name, tiny_bert_dir, ud_dir, tmp_path, teacher_checkpoint):
    """``--trainer.max_steps`` shorter than an epoch or a validation interval: the run
    validates before it stops and writes best.ckpt and last.ckpt (no early-stopping error)."""
    extra = ["--model.teacher", str(teacher_checkpoint)] if name == "kl" else []
    extra += ["--data.labeled_size", "10"] if name in ("entropy", "kl", "ge") else []
    _short_run(name, tiny_bert_dir, _slice(ud_dir, tmp_path, 30), tmp_path, extra)


def test_objective_is_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        train.main(["fit", "--help"])
    assert "--objective" in capsys.readouterr().out
