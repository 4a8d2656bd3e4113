"""Saved parsers averaged weight by weight (``treeexp average``): every weight the weighted mean
of the parsers', label rows matched by name, the result a parser that loads and parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from objectives.conventions import ConfigurationError
from parser.averaging import average, main, save_average
from parser.model import Parser
from parser.network import Heads


def saved_parser(encoder: Path, labels: list[str], seed: int, folder: Path, arc_size: int = 32) -> Parser:
    """A parser of ``labels`` whose every weight is drawn from ``seed``, saved to ``folder``."""
    parser = Parser(str(encoder), heads=Heads(arc_size=arc_size, label_size=16, tagger=True))
    parser.build(labels)
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in parser.network.parameters():
            parameter.normal_()
    parser.save(folder)
    return parser


def test_every_weight_is_the_weighted_mean_and_labels_are_matched_by_name(tiny_bert_dir, tmp_path):
    base = saved_parser(tiny_bert_dir, ["nmod", "obj", "root"], 1, tmp_path / "base")
    tuned = saved_parser(tiny_bert_dir, ["nmod", "nmod:poss", "obj", "root", "vocative"], 2, tmp_path / "tuned")
    mean = average([tmp_path / "base", tmp_path / "tuned"], [0.25, 0.75])
    assert mean.network.label_vocab.itos == ["nmod", "nmod:poss", "obj", "root", "vocative"]
    for key, value in tuned.network.state_dict().items():
        if key != "scorer.label.weight" and value.is_floating_point():
            assert torch.allclose(mean.network.state_dict()[key], 0.25 * base.network.state_dict()[key] + 0.75 * value), key
    got, b, t = mean.network.scorer.label.weight, base.network.scorer.label.weight, tuned.network.scorer.label.weight
    assert torch.allclose(got[0], 0.25 * b[0] + 0.75 * t[0])  # nmod: both have it
    assert torch.allclose(got[2], 0.25 * b[1] + 0.75 * t[2])  # obj: by name, not position
    assert torch.allclose(got[1], 0.25 * b[0] + 0.75 * t[1])  # nmod:poss: the base's nmod, its universal part
    assert torch.allclose(got[4], t[4])  # vocative: only the tuned parser has it, nor its universal part


def test_the_average_is_a_parser_that_loads_and_parses_and_its_order_gives_its_settings(tiny_bert_dir, tmp_path):
    saved_parser(tiny_bert_dir, ["root", "obj"], 1, tmp_path / "a")
    saved_parser(tiny_bert_dir, ["root", "nsubj"], 2, tmp_path / "b")
    out = save_average([tmp_path / "a", tmp_path / "b"], None, tmp_path / "mean")
    loaded = Parser.load(out)
    assert loaded.network.label_vocab.itos == ["nsubj", "obj", "root"]
    parses = loaded.parse([["a", "dog", "barks"]])
    assert len(parses) == 1 and len(parses[0].heads) == 3
    assert not (tmp_path / "mean.partial").exists()
    main([str(tmp_path / "b"), str(tmp_path / "a"), "--output", str(tmp_path / "mean")])  # written over whole
    swapped = Parser.load(tmp_path / "mean")
    for key, value in loaded.network.state_dict().items():
        if key != "scorer.label.weight" and value.is_floating_point():
            assert torch.allclose(swapped.network.state_dict()[key], value), key  # equal weights: the same mean


def test_parsers_that_cannot_be_averaged_say_why_in_one_line(tiny_bert_dir, tmp_path, capsys):
    saved_parser(tiny_bert_dir, ["root"], 1, tmp_path / "a")
    saved_parser(tiny_bert_dir, ["root"], 2, tmp_path / "wide", arc_size=64)
    with pytest.raises(ConfigurationError, match=r"treeexp average .*wide: scorer.arc_head.0.weight is \(64, 32\)"):
        average([tmp_path / "wide", tmp_path / "a"])
    with pytest.raises(ConfigurationError, match="positive and sum to 1"):
        average([tmp_path / "a", tmp_path / "a"], [0.5, 0.6])
    with pytest.raises(ConfigurationError, match="two or more"):
        average([tmp_path / "a"])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "a"), str(tmp_path / "missing"), "--output", str(tmp_path / "mean")])
    error = capsys.readouterr().err
    assert "Traceback" not in error and error.strip().splitlines()[-1].startswith("error: ")
    assert "missing: no such checkpoint" in error and not (tmp_path / "mean").exists()
