"""parser.show: drawing a parse from plain data, and the command line on a tiny checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

from parser.model import Parser
from parser.network import Heads
from parser.decoding.parsing import Parse
from parser.show import MAX_WORDS, draw, figure, main, nonprojective

# "A hearing is scheduled on the issue today ." with "on the issue" attached to "hearing":
# the arc hearing -> issue crosses scheduled -> today and the root arrow.
WORDS = ["A", "hearing", "is", "scheduled", "on", "the", "issue", "today", "."]
HEADS = [2, 4, 4, 0, 7, 7, 2, 4, 4]
LABELS = ["det", "nsubj:pass", "aux:pass", "root", "case", "det", "nmod", "obl:tmod", "punct"]


def _marginals(heads: list[int]) -> np.ndarray:
    """Arc marginals ``(n+1, n+1)`` that favour ``heads``: each column sums to 1."""
    n = len(heads)
    mu = np.full((n + 1, n + 1), 0.1)
    mu[heads, np.arange(1, n + 1)] = 1.0
    mu[:, 0] = 0.0
    np.fill_diagonal(mu, 0.0)
    return mu / mu.sum(0).clip(1e-9)


def _texts(fig) -> set[str]:
    """Every string drawn on the figure: texts, tick labels and legend entries."""
    return {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))}


def _check_file(path: Path) -> None:
    data = path.read_bytes()
    assert data, path
    if path.suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    elif path.suffix == ".svg":
        assert data.lstrip().startswith((b"<?xml", b"<svg"))
    else:
        text = data.decode("utf-8")
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "</html>" in text
        assert "<script" not in text and "http://" not in text.split("<svg")[0]  # nothing to fetch


def test_nonprojective_arcs():
    assert nonprojective(HEADS) == [m == 7 for m in range(1, 10)]
    assert nonprojective([2, 0, 2]) == [False] * 3
    assert nonprojective([0]) == [False]
    assert nonprojective([3, 4, 0, 3]) == [False, True, False, False]  # 4 -> 2 passes over 3, the head of 4


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_draws_a_nonprojective_tree_with_gold(tmp_path, suffix):
    gold = list(HEADS)
    gold[6] = 5  # a wrong predicted head: its arc is dashed
    fig = figure(WORDS, HEADS, LABELS, torch.tensor(_marginals(HEADS)), gold_heads=gold, title="hearing")
    texts = _texts(fig)
    assert {"non-projective arc", "head differs from gold", "predicted tree", "gold tree", "nmod", "ROOT 0"} <= texts
    tree_ax, heat_ax, _ = fig.axes
    assert "#d95f02" in {to_hex(p.get_edgecolor()) for p in tree_ax.patches}  # the non-projective arc
    assert len(tree_ax.patches) == len(WORDS)  # one arc per word, the root arrow included
    assert heat_ax.images[0].get_array().shape == (len(WORDS) + 1, len(WORDS))
    path = tmp_path / f"tree{suffix}"
    draw(Parse(WORDS, HEADS, LABELS, torch.tensor(_marginals(HEADS))), path, gold_heads=gold)
    _check_file(path)


def test_draws_a_one_word_sentence(tmp_path):
    fig = figure(["Hi"], [0], ["root"], np.array([[0.0, 1.0], [0.0, 0.0]]))
    assert len(fig.axes) == 3 and "root" in _texts(fig)
    draw(Parse(["Hi"], [0], ["root"]), tmp_path / "hi.png")  # no marginals: the tree alone
    _check_file(tmp_path / "hi.png")


def test_long_sentences_are_drawn_wider_or_refused():
    short = figure(WORDS, HEADS, LABELS).get_size_inches()[0]
    n = 80
    long = figure(["word"] * n, [0] + [1] * (n - 1), ["dep"] * n).get_size_inches()[0]
    assert long > 5 * short
    with pytest.raises(ValueError, match=f"1 to {MAX_WORDS} words"):
        figure(["w"] * (MAX_WORDS + 1), [0] + [1] * MAX_WORDS)
    with pytest.raises(ValueError, match="marginals must be"):
        figure(WORDS, HEADS, LABELS, np.zeros((3, 3)))


@pytest.fixture(scope="module")
def tiny_parser(tiny_bert_dir, tmp_path_factory) -> Path:
    """An untrained parser on the tiny BERT with random scores, saved with ``Parser.save``."""
    torch.manual_seed(0)
    model = Parser(encoder=str(tiny_bert_dir), heads=Heads(32, 16), labels=sorted(set(LABELS)))
    for parameter in model.network.scorer.parameters():  # random, not zero, scores: marginals that differ
        torch.nn.init.normal_(parameter, std=0.5)
    return model.save(tmp_path_factory.mktemp("show") / "tiny")


def test_parse_results_draw(tiny_parser, tmp_path):
    parse = Parser.load(tiny_parser).parse([WORDS], marginals=True)[0]
    draw(parse, tmp_path / "parse.png", gold_heads=HEADS)
    _check_file(tmp_path / "parse.png")


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_cli_draws_a_sentence(tiny_parser, tmp_path, suffix, capsys):
    path = tmp_path / f"tree{suffix}"
    main([str(tiny_parser), "--sentence", "The old dog barks .", "--output", str(path)])
    _check_file(path)
    assert f"drew 5 words -> {path}" in capsys.readouterr().out


def test_cli_draws_a_conllu_sentence_with_its_gold_tree(tiny_parser, tmp_path):
    conllu = tmp_path / "gold.conllu"
    rows = [f"{i}\t{w}\t_\t_\t_\t_\t{h}\t{l}\t_\t_" for i, (w, h, l) in enumerate(zip(WORDS, HEADS, LABELS), 1)]
    conllu.write_text("# sent_id = one\n1\tHi\t_\t_\t_\t_\t0\troot\t_\t_\n\n# sent_id = two\n" + "\n".join(rows) + "\n\n")
    path = tmp_path / "tree.svg"
    main([str(tiny_parser), "--conllu", str(conllu), "--index", "1", "--output", str(path)])
    svg = path.read_text(encoding="utf-8")
    assert "gold tree" in svg and "two: A hearing" in svg  # matplotlib keeps each text as an SVG comment
    main([str(tiny_parser), "--conllu", str(conllu), "--output", str(tmp_path / "one.png")])  # a 1-word sentence
    _check_file(tmp_path / "one.png")


@pytest.mark.parametrize("args, message", [
    (["--sentence", " ".join(["word"] * (MAX_WORDS + 1))], f"1 to {MAX_WORDS} words, this one has {MAX_WORDS + 1}"),
    (["--sentence", "a b", "--output", "x.pdf"], "unknown figure format '.pdf'"),
    (["--conllu", "missing.conllu"], "missing.conllu"),
])
def test_cli_refuses_with_one_line(tiny_parser, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main([str(tiny_parser), "--output", "x.png", *args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
