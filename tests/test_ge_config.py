"""GE's penalty and target source from a config: short names, or objects by class path."""

from __future__ import annotations

import json

import yaml

import train
from objectives.ge import BernoulliKL, LabeledTargets, OneSided, TeacherTargets
from parser.runs import CONFIGS


def test_penalties_and_target_sources_by_name_or_class_path(tiny_bert_dir):
    """``penalty: kl`` and ``targets_from: labeled`` map to their objects; objects given by
    class path (with their options) arrive as given, and the saved config keeps them."""
    objects = {"constraints": "tag_pairs", "targets_from": {"class_path": "objectives.ge.TeacherTargets"},
               "penalty": {"class_path": "objectives.ge.OneSided", "init_args": {"tolerance": 1.0}}}
    names = {"constraints": "tag_pairs", "targets_from": "labeled", "penalty": "kl"}
    terms = [{"objective": {"class_path": "objectives.GeneralizedExpectation", "init_args": options}, "data": "unlabeled"}
             for options in (objects, names)]
    cli = train.main(["--config", str(CONFIGS / "ge.yaml"), f"--model.terms={json.dumps(terms)}",
                      "--model.encoder", str(tiny_bert_dir)], run=False)
    built, named = (t.objective for t in cli.model.terms.terms)
    assert built.penalize == OneSided(1.0) and isinstance(built.source, TeacherTargets) and built.needs_teacher
    assert named.penalize == BernoulliKL() and isinstance(named.source, LabeledTargets) and not named.needs_teacher
    saved = [term["objective"]["init_args"] for term in yaml.safe_load(cli.parser.dump(cli.config))["model"]["terms"]]
    assert saved[0]["penalty"] == objects["penalty"] and saved[1]["penalty"] == "kl"
