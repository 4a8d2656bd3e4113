"""Word vectors of the language's own text: the word2vec file, the zero start, the lookup, and a
parser that keeps them inside its checkpoint."""

from pathlib import Path

import pytest
import torch
from lightning.pytorch import seed_everything

from objectives.conventions import ConfigurationError
from objectives.likelihood import Likelihood
from parser.data.sentences import read_conllu
from parser.model import Parser
from parser.network import EncoderOptions, Heads
from parser.network.word_vectors import WordVectors, read_vectors
from parser.training.terms import Term
from tests.conftest import first_trees, fit_briefly, started_without_feature


def write_vectors(path: Path, words: list[str], size: int = 3) -> Path:
    torch.manual_seed(0)
    rows = torch.randn(len(words), size)
    path.write_text(f"{len(words)} {size}\n" + "".join(f"{w} " + " ".join(f"{x:.6f}" for x in row.tolist()) + "\n"
                                                     for w, row in zip(words, rows)), encoding="utf-8")
    return path


def test_a_word2vec_file_is_read_with_one_line_errors(tmp_path):
    path = write_vectors(tmp_path / "v.vec", ["the", "dog", "the"])
    words, vectors = read_vectors(path)
    assert words == ["the", "dog"] and vectors.shape == (2, 3)  # a word met again keeps its first vector
    assert torch.allclose(vectors[0], torch.tensor([float(x) for x in path.read_text().splitlines()[1].split()[1:]]))
    for text, message in (("the 0.1 0.2\n", "v.vec:1: not a word2vec"), ("1 2\nthe 0.1\n", "v.vec:2: 1 numbers"),
                          ("1 1\nthe x\n", "v.vec:2: a vector of numbers"), ("0 2\n", "no vector")):
        (tmp_path / "v.vec").write_text(text, encoding="utf-8")
        with pytest.raises(ConfigurationError, match=message):
            read_vectors(tmp_path / "v.vec")


def test_the_projection_starts_at_zero_and_a_word_is_found_or_its_lower_case():
    vectors = WordVectors(["dog", "the"], 3, 4, torch.arange(6.0).view(2, 3))
    assert vectors.ids([["The", "dog", "cat"], ["dog"]], 3).tolist() == [[0, 2, 1, 0], [0, 1, 0, 0]]
    out = vectors([["The", "dog", "cat"]], 3)
    assert out.shape == (1, 4, 4) and not out.any()  # a parser started from another parses as it did
    with torch.no_grad():
        vectors.projection.weight.fill_(1.0)
    assert vectors([["dog", "cat"]], 2)[0, :, 0].tolist() == [0.0, 3.0, 0.0]  # sum of the row (0, 1, 2)


def test_a_parser_keeps_its_word_vectors_inside_its_checkpoint(tiny_bert_dir, ud_dir, tmp_path):
    """Trained with the vectors (the projection moves), saved, and loaded with the .vec file gone:
    the same parses."""
    seed_everything(0)
    trees = first_trees(ud_dir, "UD_Wolof-WTB", 20, tmp_path / "train.conllu")
    words = sorted({w for s in read_conllu(trees) for w in s.words})
    vec = write_vectors(tmp_path / "wolof.vec", words, size=8)
    model = Parser(encoder=str(tiny_bert_dir), encoder_options=EncoderOptions(word_vectors=str(vec)),
                   heads=Heads(arc_size=32, label_size=16), terms=[Term(Likelihood())], lr=1e-2, warmup_steps=1)
    fit_briefly(model, trees, tmp_path, steps=3)
    assert model.network.encoder.word_vectors.projection.weight.abs().sum() > 0
    ckpt = tmp_path / "parser.ckpt"
    model.trainer.save_checkpoint(ckpt)
    saved = model.save(tmp_path / "saved")
    sentences = [s.words for s in read_conllu(trees)[:3]]
    expected = [p.heads for p in model.parse(sentences)]
    vec.unlink()
    for path in (ckpt, saved):
        loaded = Parser.load(path)
        assert loaded.network.encoder.word_vectors.words == words
        assert torch.equal(loaded.network.encoder.word_vectors.table, model.network.encoder.word_vectors.table)
        assert [p.heads for p in loaded.parse(sentences)] == expected


def test_a_parser_started_from_one_without_vectors_parses_as_it_did(tiny_bert_dir, ud_dir, tmp_path):
    """--model.init from a parser without word vectors: the projection starts at zero, so with no
    update (learning rates 0) the parses are the other parser's."""
    seed_everything(0)
    trees = first_trees(ud_dir, "UD_Wolof-WTB", 20, tmp_path / "train.conllu")
    vec = write_vectors(tmp_path / "wolof.vec", sorted({w for s in read_conllu(trees) for w in s.words}), size=8)
    _, started = started_without_feature(tiny_bert_dir, trees, tmp_path, EncoderOptions(),
                                         EncoderOptions(word_vectors=str(vec)))
    assert started.network.encoder.word_vectors.table.abs().sum() > 0


def test_vectors_are_learned_from_text_tokenised_or_raw(ud_dir, tmp_path, capsys, wolof_tokenizer):
    from parser import vectors

    train = next((ud_dir / "UD_Wolof-WTB").glob("*-ud-train.conllu"))
    sentences = read_conllu(train, trees=False)[:200]
    text = tmp_path / "wolof.txt"
    text.write_text("".join(" ".join(s.words) + "\n" for s in sentences), encoding="utf-8")
    vectors.main([str(text), "--output", str(tmp_path / "a.vec"), "--size", "8", "--epochs", "1"])
    words, table = read_vectors(tmp_path / "a.vec")
    counts = {w: sum(s.words.count(w) for s in sentences) for w in words}
    assert table.shape == (len(words), 8) and min(counts.values()) >= 2 and "ci" in words
    again = tmp_path / "b.vec"
    vectors.main([str(text), "--output", str(again), "--size", "8", "--epochs", "1"])
    assert again.read_bytes() == (tmp_path / "a.vec").read_bytes()  # one seed, one file
    raw = tmp_path / "wolof_raw.txt"
    raw.write_text(" ".join(s.tokenlist.metadata["text"] for s in sentences) + "\n", encoding="utf-8")
    vectors.main([str(raw), "--tokenizer", str(wolof_tokenizer), "--output", str(tmp_path / "c.vec"), "--size", "8",
                  "--epochs", "1"])
    assert "ci" in read_vectors(tmp_path / "c.vec")[0]
    for arguments, message in (([str(tmp_path / "none.txt")], "none.txt"), ([str(text), "--min-count", "100000"],
                                                                            "no word occurs 100000 times")):
        with pytest.raises(SystemExit) as stop:
            vectors.main([*arguments, "--output", str(tmp_path / "d.vec")])
        assert stop.value.code == 2 and message in capsys.readouterr().err

