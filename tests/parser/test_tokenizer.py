"""A tokenizer learned from CoNLL-U (UDPipe 1's), saved in a parser's directory, and raw
text parsed into CoNLL-U with paragraphs, sentence ids, text, multiword tokens and SpaceAfter."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parser.data.sentences import ConlluError, read_conllu
from parser.data.stream import Source
from parser.data.tokenizer import TOKENIZER_FILE, train_tokenizer
from parser.model import Parser
from parser.network import Heads
from parser.predict import predict

REPO = Path(__file__).resolve().parents[2]
GREEK = "UD_Greek-GDT/el_gdt-ud-train.conllu"
RAW = "Η απόφαση εντάσσεται στην στρατηγική. Θα ήθελα να συγχαρώ τον εισηγητή.\n\n\nΚύριε Πρόεδρε, ευχαριστώ.\n"


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, ud_dir, tmp_path_factory) -> Path:
    """An untrained tiny parser with a tokenizer learned from 40 Greek trees in one epoch."""
    torch.manual_seed(0)
    labels = sorted({d for s in read_conllu(ud_dir / GREEK)[:40] for d in s.deprels})
    directory = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), terms=[], labels=labels).save(
        tmp_path_factory.mktemp("parser") / "parser")
    assert train_tokenizer(ud_dir / GREEK, directory, sentences=40, epochs=1) == directory / TOKENIZER_FILE
    return directory


def test_raw_text_becomes_sentences_with_paragraphs_and_multiword_tokens(saved, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_bytes(RAW.encode() + b"caf\xe9 au lait\n")
    items = list(Source(str(raw), tokenizer=str(saved)).sentences())
    errors = [item for item in items if isinstance(item, ConlluError)]
    sentences = [item for item in items if not isinstance(item, ConlluError)]
    assert [str(e) for e in errors] == [f"{raw}:5: not UTF-8 text (byte 0xe9 at byte 4 of the line)"]
    first = sentences[0]
    assert list(first.tokenlist.metadata.items())[:4] == [
        ("newdoc", None), ("newpar", None), ("sent_id", "1"), ("text", "Η απόφαση εντάσσεται στην στρατηγική.")]
    assert [(t["id"], t["form"]) for t in first.tokenlist][3:6] == [((4, "-", 5), "στην"), (4, "σ"), (5, "την")]
    assert first.words[:5] == ["Η", "απόφαση", "εντάσσεται", "σ", "την"] and first.tokenlist[-1]["misc"] is not None
    newpars = [s.tokenlist.metadata.get("sent_id") for s in sentences if "newpar" in s.tokenlist.metadata]
    assert newpars[0] == "1" and len(newpars) == 2 and sentences[-1].line == 4


def test_parse_raw_text_fills_the_words_trees(saved, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW, encoding="utf-8")
    out = tmp_path / "out.conllu"
    parsed = predict(str(saved), str(raw), str(out), device="cpu", input_format="raw")
    written = read_conllu(out)  # a tree on the syntactic words: HEAD on each, multiword-token lines without
    assert parsed.sentences == len(written) >= 2
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# newdoc\n# newpar\n# sent_id = 1\n# text = Η απόφαση εντάσσεται στην στρατηγική.\n")
    assert text.count("# newpar\n") == 2 and "SpaceAfter=No" in text
    assert all(line.split("\t")[6] == "_" for line in text.splitlines() if "-" in line.split("\t")[0])


def test_raw_text_without_a_tokenizer_is_one_error_line(saved, tiny_bert_dir, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW, encoding="utf-8")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in os.listdir(saved):
        if name != TOKENIZER_FILE:
            os.symlink(saved / name, bare / name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "parser.main", "parse", str(bare), str(raw), "out.conllu",
                             "--input-format", "raw"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {bare}: no {TOKENIZER_FILE} beside the parser; train one with "
        f"`treeexp tokenizer train TRAIN.conllu {bare}` or give --tokenizer"]


def test_the_tokenizer_command_writes_conllu(saved, tmp_path):
    """``treeexp tokenizer run``: raw text to CoNLL-U without trees, as the parse reads it."""
    from parser.data import tokenizer

    raw, out = tmp_path / "raw.txt", tmp_path / "out.conllu"
    raw.write_text(RAW, encoding="utf-8")
    tokenizer.main(["run", str(saved), str(raw), str(out)])
    assert [s.words for s in read_conllu(out, trees=False)] == [s.words for s in Source(str(raw), tokenizer=str(saved / TOKENIZER_FILE)).sentences()]


def test_raw_text_as_unlabeled_sentences(saved, ud_dir, tmp_path):
    """``--data.unlabeled_tokenizer``: the unlabeled stream splits and tokenises raw text
    as it reads it (multiword tokens as their syntactic words)."""
    from parser.data.datamodule import DependencyDataModule
    from parser.data.stream import SentenceStream
    from parser.data.vocab import build_upos_vocab

    raw = tmp_path / "raw.txt"
    raw.write_text(RAW, encoding="utf-8")
    dev = str(ud_dir / GREEK).replace("-train.", "-dev.")
    data = DependencyDataModule(treebank=None, train=dev, dev=dev, unlabeled=str(raw),
                                unlabeled_tokenizer=str(saved / TOKENIZER_FILE))
    data.setup("fit")
    expected = [s.words for s in Source(str(raw), tokenizer=str(saved)).sentences()]
    batches = iter(SentenceStream(data.unlabeled_sources, build_upos_vocab(), shuffle_buffer=len(expected)))
    words = [list(w) for batch in itertools.islice(batches, 2) for w in batch.words]
    assert sorted(words[:len(expected)]) == sorted(expected) and ["σ", "την"] == expected[0][3:5]


def test_a_bad_training_file_is_one_error_line(tmp_path, capsys):
    from parser.data import tokenizer

    latin1 = tmp_path / "latin1.conllu"
    latin1.write_bytes(b"# text = a\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n# text = caf\xe9\n1\tcaf\xe9\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(SystemExit) as stopped:
        tokenizer.main(["train", str(latin1), str(tmp_path / "t.udpipe"), "--epochs", "1"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {latin1}:4: not UTF-8 text"]


def test_a_raw_parse_cut_mid_sentence_resumes_to_the_same_file(saved, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join([RAW] * 3), encoding="utf-8")
    whole, cut = tmp_path / "whole.conllu", tmp_path / "cut.conllu"
    predict(str(saved), str(raw), str(whole), device="cpu", input_format="raw", window=2)
    written = whole.read_bytes()
    cut.write_bytes(written[:len(written) // 2])
    predict(str(saved), str(raw), str(cut), device="cpu", input_format="raw", window=2, resume=True)
    assert cut.read_bytes() == written and written.count(b"# newpar\n") == 6
