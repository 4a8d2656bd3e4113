"""``treeexp parse`` as a stream: bounded windows in input order, standard input and output,
malformed sentences named and skipped, and a killed parse resumed to the same bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from parser.data.sentences import read_conllu
from parser.model import Parser
from parser.network import Heads
from parser.predict import complete_sentences, main, predict

REPO = Path(__file__).resolve().parents[2]
EWT = "UD_English-EWT/en_ewt-ud-dev.conllu"
FIXTURE = Path(__file__).parent / "fixtures" / "mwt_empty.conllu"


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, ud_dir, tmp_path_factory) -> Path:
    """An untrained tiny parser saved as a directory (random trees are enough to compare bytes)."""
    torch.manual_seed(0)
    labels = sorted({d for s in read_conllu(ud_dir / EWT) for d in s.deprels})
    parser = Parser(encoder=str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16), terms=[], labels=labels)
    return parser.save(tmp_path_factory.mktemp("parser") / "parser")


@pytest.fixture()
def corpus(ud_dir, tmp_path) -> Path:
    """The first 60 sentences of EWT dev."""
    blocks = (ud_dir / EWT).read_text(encoding="utf-8").split("\n\n")[:60]
    path = tmp_path / "in.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "parser.predict", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_windows_keep_every_line_but_heads_and_relations(saved, tmp_path, monkeypatch):
    """Multiword tokens, empty nodes, comments and other columns come back unchanged; the
    parser sees at most a window of sentences at a time."""
    seen = []
    parse = Parser.parse
    monkeypatch.setattr(Parser, "parse", lambda self, words, **k: seen.append(len(words)) or parse(self, words, **k))
    out = tmp_path / "out.conllu"
    parsed = predict(str(saved), str(FIXTURE), str(out), device="cpu", window=1)
    gold = read_conllu(FIXTURE, trees=False)
    assert seen == [1] * len(gold) and parsed.sentences == len(gold) and parsed.skipped == 0

    def without_trees(text: str) -> list[list[str]]:
        return [line.split("\t")[:6] + line.split("\t")[8:] if "\t" in line else [line] for line in text.splitlines()]

    assert without_trees(out.read_text(encoding="utf-8")) == without_trees(FIXTURE.read_text(encoding="utf-8"))


def test_a_resumed_parse_writes_the_bytes_of_an_uninterrupted_one(saved, corpus, tmp_path):
    whole = tmp_path / "whole.conllu"
    predict(str(saved), str(corpus), str(whole), device="cpu", window=7)
    written = whole.read_bytes()
    cut = tmp_path / "cut.conllu"
    for size in (0, 1, len(written) // 3, written.index(b"\n\n", len(written) // 2) + 2, len(written) - 1, len(written)):
        cut.write_bytes(written[:size])
        parsed = predict(str(saved), str(corpus), str(cut), device="cpu", window=7, resume=True)
        assert cut.read_bytes() == written, size
        assert parsed.sentences == 60
    assert predict(str(saved), str(corpus), str(cut), device="cpu", window=7, resume=True).parsed == 0


def test_a_killed_parse_resumes_to_the_same_file(saved, ud_dir, tmp_path):
    """A real parse killed (SIGKILL) once it has written something, then ``--resume``d."""
    blocks = (ud_dir / EWT).read_text(encoding="utf-8").split("\n\n")[:600]
    corpus = tmp_path / "in.conllu"
    corpus.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    whole, killed = tmp_path / "whole.conllu", tmp_path / "killed.conllu"
    predict(str(saved), str(corpus), str(whole), device="cpu", window=16)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "parser.predict", str(saved), str(corpus), str(killed),
                                "--window", "16", "--device", "cpu"], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed.exists() and killed.stat().st_size) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert 0 < killed.stat().st_size < whole.stat().st_size
    assert complete_sentences(killed) < 600
    main([str(saved), str(corpus), str(killed), "--window", "16", "--device", "cpu", "--resume"])  # as the command runs
    assert killed.read_bytes() == whole.read_bytes()


def test_standard_input_and_output_and_a_malformed_sentence(saved, corpus, tmp_path, capsys):
    """``- -`` parses a pipe (a process of its own); a malformed block is named (file:line) and
    skipped, the rest written (the command's main in this process)."""
    good = tmp_path / "good.conllu"
    predict(str(saved), str(corpus), str(good), device="cpu")
    piped = _run(str(saved), "-", "-", "--device", "cpu", input=corpus.read_text(encoding="utf-8"))
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == good.read_text(encoding="utf-8") and "60 sentences" in piped.stderr

    blocks = corpus.read_text(encoding="utf-8").split("\n\n")
    bad = blocks[5].splitlines()
    bad[-1] = bad[-1].replace("\t", " ", 1)  # 9 columns
    broken = tmp_path / "broken.conllu"
    broken.write_text("\n\n".join(blocks[:5] + ["\n".join(bad)] + blocks[6:]), encoding="utf-8")
    line = sum(block.count("\n") + 2 for block in blocks[:5]) + len(bad)
    main([str(saved), str(broken), str(tmp_path / "out.conllu"), "--device", "cpu"])
    result = capsys.readouterr()
    assert f"skipped: {broken}:{line}: expected 10 tab-separated columns" in result.err
    assert "59 sentences" in result.out and "1 malformed sentences skipped" in result.out
    assert len(read_conllu(tmp_path / "out.conllu")) == 59


def test_text_lines_still_parse(saved, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The dog barks .\n\nHi !\n", encoding="utf-8")
    predict(str(saved), str(text), str(tmp_path / "out.conllu"), device="cpu")
    parsed = read_conllu(tmp_path / "out.conllu")
    assert [s.words for s in parsed] == [["The", "dog", "barks", "."], ["Hi", "!"]]
    assert "newpar" in parsed[1].tokenlist.metadata


def test_a_progress_bar_counts_sentences_against_the_input(saved, corpus, tmp_path, capsys):
    predict(str(saved), str(corpus), str(tmp_path / "out.conllu"), device="cpu", window=25, progress=True)
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert any("60/60" in line and "sentences/s" in line for line in bar), bar
    predict(str(saved), str(corpus), str(tmp_path / "quiet.conllu"), device="cpu")  # stderr is no terminal here
    assert capsys.readouterr().err == ""
