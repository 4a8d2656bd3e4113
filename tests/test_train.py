"""The command line: `--objective` short form, and one real run with the shipped MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import train
from objectives.conventions import ConfigurationError
from objectives.ge import Constraint, load_constraints
from objectives.schedule import Schedule
from parser.evaluate import evaluate
from parser.model import Parser
from parser.predict import predict
from parser.data.sentences import ConlluError, read_conllu
from parser.training.callbacks import MovingAverage
from parser.training.teacher import TeacherOptions
from parser.runs import CONFIGS


def test_objective_short_form_expands_to_its_config():
    args = train.expand_objective(["--objective", "ge", "--trainer.max_steps", "5"])
    assert args[:2] == ["fit", "--config"] and args[2].endswith("configs/ge.yaml")
    assert args[3:] == ["--trainer.max_steps", "5"]
    assert train.expand_objective(["--objective=kl"])[2].endswith("configs/distill.yaml")
    assert train.expand_objective(["fit", "--config", "x.yaml"]) == ["fit", "--config", "x.yaml"]
    anywhere = train.expand_objective(["--trainer.max_steps", "5", "--objective", "ge"])
    assert anywhere[:2] == ["fit", "--config"] and anywhere[3:] == ["--trainer.max_steps", "5"]
    assert train.expand_objective(["test", "--objective=ge", "--ckpt_path", "x"])[:2] == ["test", "--config"]
    with pytest.raises(ConfigurationError, match="must be one of"):  # one error line, exit 2 (tests/test_cli_errors.py)
        train.expand_objective(["--objective", "nope"])


@pytest.mark.parametrize("name", sorted(train.OBJECTIVE_CONFIGS))
def test_every_objective_config_instantiates(name, tiny_bert_dir):
    """Each shipped YAML is a valid LightningCLI config: model and data build from it."""
    args = train.expand_objective([f"--objective={name}", "--model.encoder", str(tiny_bert_dir)])
    cli = train.main(args[1:], run=False)  # no subcommand when run=False
    assert type(cli.model).__name__ == "Parser"
    expected = {"likelihood": "Likelihood", "risk": "Risk", "entropy": "EntropyRegularizer",
                "kl": "Distillation", "ge": "GeneralizedExpectation", "combined": "EntropyRegularizer",
                "likelihood_low_resource": "Likelihood", "sample_distill": "SampledSelfTraining",
                "ge_teacher": "GeneralizedExpectation", "small_treebank": "TagLikelihood"}[name]
    assert expected in objectives(cli.model)


def objectives(model) -> list[str]:
    """The class names of a model's terms' objectives, in order."""
    return [type(term.objective).__name__ for term in model.terms.terms]


def term(model, name: str):
    """The model's term whose objective is of class ``name``."""
    return next(term for term in model.terms.terms if type(term.objective).__name__ == name)


@pytest.mark.parametrize("name", sorted(train.OBJECTIVE_CONFIGS))
def test_shipped_configs_read_plain_text(name, tiny_bert_dir):
    """A config whose unlabeled terms need UPOS tags trains a tagger to give them and
    reads the unlabeled sentences without theirs, as a user's plain text has none."""
    args = train.expand_objective([f"--objective={name}", "--model.encoder", str(tiny_bert_dir)])
    cli = train.main(args[1:], run=False)
    if any(t.objective.needs_upos and t.data == "unlabeled" for t in cli.model.terms.terms):
        assert cli.model.heads.tagger and cli.datamodule.unlabeled_tags == "drop"


def _readme_command(prefix: str, containing: str = "") -> list[str]:
    """The README's first command that starts with ``prefix`` and holds ``containing``
    (continuation lines joined, comments dropped), as arguments after ``treeexp train`` (or
    ``python train.py``)."""
    lines = (Path(train.__file__).parent / "README.md").read_text(encoding="utf-8").split("\n")
    for start, line in enumerate(lines):
        if not line.startswith(prefix):
            continue
        command = ""
        for part in lines[start:]:
            code = part.split("#")[0]
            command += " " + code.replace("\\", " ")
            if not code.rstrip().endswith("\\"):
                break
        if containing in command:
            return command.split()[2:]
    raise AssertionError(f"no README command starts with {prefix!r} and holds {containing!r}")


def test_ge_feature_families_and_rules_from_the_command_line(tiny_bert_dir):
    """A list of families, and rules with a distance and a label, reach GE as given, and the
    run's saved config keeps them as lists (jsonargparse wrote the text of a list while ``str``
    came first in the hint, a config that would not load back)."""
    families = {"class_path": "objectives.GeneralizedExpectation",
                "init_args": {"constraints": ["tag_pairs", "distances", "labels"], "targets_from": "labeled"}}
    rule = {"parent": "any", "child": "NOUN", "target": 0.3, "distance": [3, None], "label": "obl"}
    rules = {"class_path": "objectives.GeneralizedExpectation", "init_args": {"constraints": [rule]}}
    terms = [{"objective": families, "data": "unlabeled", "weight": 0.1}, {"objective": rules, "data": "unlabeled"}]
    cli = train.main(["--config", str(CONFIGS / "ge.yaml"), f"--model.terms={json.dumps(terms)}",
                      "--model.encoder", str(tiny_bert_dir)], run=False)
    first, second = (t.objective for t in cli.model.terms.terms)
    assert len(first.constraints) == 595 + 17 * 2 * 4 + 17 * 36
    assert second.constraints == [Constraint("any", "NOUN", 0.3, distance=(3, None), label="obl")]
    saved = yaml.safe_load(cli.parser.dump(cli.config))["model"]["terms"]
    assert saved[0]["objective"]["init_args"]["constraints"] == ["tag_pairs", "distances", "labels"]
    assert saved[1]["objective"]["init_args"]["constraints"][0]["distance"] == [3, None]


def test_a_shipped_config_and_its_rules_file_are_found_by_name_from_any_folder(tiny_bert_dir, tmp_path, monkeypatch):
    """``--config configs/ge_rules.yaml`` and the rules file it names (``configs/rules/naseem_ud.yaml``)
    from a folder that has neither, as an installed parser runs."""
    monkeypatch.chdir(tmp_path)
    cli = train.main(train.expand_objective(["--config", "configs/ge_rules.yaml", "--model.encoder", str(tiny_bert_dir)]),
                     run=False)
    assert term(cli.model, "GeneralizedExpectation").objective.constraints == \
        load_constraints(CONFIGS / "rules" / "naseem_ud.yaml")


def test_readme_ge_recipe_parses(tiny_bert_dir, monkeypatch):
    """The README's GE commands build what they say: the default ``--objective ge`` is the
    tag-pair and distance recipe (targets from the labeled sample, lambda 0.1 decaying) on
    mean-pooled subwords mixed over the layers, encoder dropout 0.1, the scorer at lr 1e-3; the override
    shown for the shipped Naseem et al. rules gives their 15 rule targets at a constant lambda 1."""
    monkeypatch.chdir(Path(train.__file__).parent)  # the rules path is relative to the checkout
    default = _readme_command("treeexp train --objective ge  ")
    assert default == ["--objective", "ge"]
    cli = train.main(train.expand_objective([*default, "--model.encoder", str(tiny_bert_dir)])[1:], run=False)
    ge = term(cli.model, "GeneralizedExpectation")
    assert len(ge.objective.constraints) == 595 + 17 * 2 * 4 and ge.objective.targets_from == "labeled"
    assert cli.datamodule.labeled_size == 100 and ge.data == "unlabeled"
    options = cli.model.encoder_options
    assert (options.pooling, options.layer_mix, options.dropout, cli.model.hparams.lr) == ("mean", True, 0.1, 1e-3)
    assert ge.weight == Schedule(0.1, warmup=100, decay="linear")

    rules = _readme_command("treeexp train fit --config configs/ge_rules.yaml")
    cli = train.main([*rules[1:], "--model.encoder", str(tiny_bert_dir)], run=False)
    ge = term(cli.model, "GeneralizedExpectation")
    assert len(ge.objective.constraints) == 15 and ge.objective.targets_from == "rules" and ge.weight == 1.0

    coverage = _readme_command("treeexp train fit --config configs/ge_coverage.yaml")
    cli = train.main([*coverage[1:], "--model.encoder", str(tiny_bert_dir)], run=False)
    ge = term(cli.model, "RuleCoverage").objective
    assert len(ge.constraints) == 15 and ge.coverage == 0.61 and ge.penalty == "one_sided"


# The low-resource recipe of docs/notebook/experiments.md, section 2, in every low-resource config.
LOW_RESOURCE_RECIPE = {
    "data": {"treebank": "UD_English-EWT", "labeled_size": 100, "batch_tokens": 500},
    "model": {"encoder_lr": 5e-5, "warmup_steps": 200},
    "trainer": {"max_steps": 400, "max_epochs": -1, "val_check_interval": 100, "check_val_every_n_epoch": None,
                "limit_val_batches": 0.25},
}
RECIPE_TERMS = {  # config -> its terms: (objective, data, weight)
    "likelihood_low_resource": [("Likelihood", "labeled", 1.0)],
    "entropy": [("Likelihood", "labeled", 1.0), ("EntropyRegularizer", "unlabeled", Schedule(0.1, warmup=200))],
    "ge": [("Likelihood", "labeled", 1.0), ("TagLikelihood", "labeled", 1.0),
           ("GeneralizedExpectation", "unlabeled", Schedule(0.1, warmup=100, decay="linear"))],
    "distill": [("Likelihood", "labeled", 1.0), ("Distillation", "unlabeled", 1.0)],
}


@pytest.mark.parametrize("name", sorted(RECIPE_TERMS))
def test_low_resource_configs_are_the_reported_recipes(name, tiny_bert_dir):
    """Each config behind a row of docs/results/low_resource.jsonl instantiates with the
    recipe those rows ran with, and its header gives the command and the time it takes."""
    path = CONFIGS / f"{name}.yaml"
    cli = train.main(["--config", str(path), "--model.encoder", str(tiny_bert_dir)], run=False)
    for group, values in LOW_RESOURCE_RECIPE.items():
        for key, value in values.items():
            assert cli.config[group][key] == value, (group, key)
    assert (cli.trainer.max_steps, cli.trainer.limit_val_batches, cli.trainer.val_check_interval) == (400, 0.25, 100)
    assert cli.datamodule.batch_tokens == 500 and cli.datamodule.labeled_size == 100
    assert [(type(t.objective).__name__, t.data, t.weight) for t in cli.model.terms.terms] == RECIPE_TERMS[name]
    if name == "ge":
        ge = term(cli.model, "GeneralizedExpectation").objective
        assert len(ge.constraints) == 595 + 17 * 2 * 4 and ge.targets_from == "labeled"
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.startswith("#"))
    assert "python train.py" in header and "minutes on one CPU thread" in header and "400 steps" in header


def test_a_few_dev_trees_are_all_read_at_each_validation(tiny_bert_dir):
    """``--data.dev_size K`` with a config that validates on a quarter of a whole dev file:
    all K trees are read (a quarter of two batches is none, and Lightning would refuse)."""
    config = ["--config", str(CONFIGS / "transfer.yaml"), "--model.encoder", str(tiny_bert_dir)]
    assert train.main(config, run=False).trainer.limit_val_batches == 0.25
    cli = train.main([*config, "--data.labeled_size", "20", "--data.dev_size", "20"], run=False)
    assert cli.trainer.limit_val_batches == 1.0


def test_the_multilingual_low_resource_config_is_the_self_distillation_student(tiny_bert_dir):
    """configs/low_resource_multilingual.yaml: e5-small with fixed embeddings, word vectors
    from a layer mix (mean-pooled subwords, dropout 0.1, scorer at lr 1e-3: the measured
    recipe's --train-args), word dropout 0.15 (a noisy student), the tagger, the exact KL over
    labeled trees on the unlabeled rest; the teacher is the user's (step 1 of its header)."""
    path = CONFIGS / "low_resource_multilingual.yaml"
    cli = train.main(["--config", str(path), "--model.teacher", "teacher.ckpt"], run=False)
    assert cli.model.hparams.encoder == "multilingual-e5-small" and cli.model.encoder_options.freeze == "embeddings"
    options = cli.model.encoder_options
    assert (options.pooling, options.layer_mix, options.dropout, cli.model.hparams.lr) == ("mean", True, 0.1, 1e-3)
    assert options.word_dropout == 0.15  # the noisy student (its teachers, likelihood_low_resource.yaml, have none)
    assert objectives(cli.model) == ["Likelihood", "TagLikelihood", "Distillation"]
    assert cli.model.terms.terms[2].data == "unlabeled" and cli.datamodule.labeled_size == 100
    assert cli.model.terms.terms[2].objective.labeled
    assert "python train.py fit --config configs/low_resource_multilingual.yaml" in path.read_text(encoding="utf-8")


def test_the_cli_default_objective_is_tree_likelihood(tiny_bert_dir):
    """With no config, train.py trains the tree likelihood (the model itself names none)."""
    cli = train.main(["--model.encoder", str(tiny_bert_dir)], run=False)
    assert objectives(cli.model) == ["Likelihood"] and cli.model.terms.terms[0].data == "labeled"


def test_small_treebank_config_is_the_reported_wolof_recipe(tiny_bert_dir):
    """configs/small_treebank.yaml builds the command of docs/notebook/experiments.md, section 3."""
    cli = train.main(["--config", str(CONFIGS / "small_treebank.yaml"), "--model.encoder", str(tiny_bert_dir)],
                     run=False)
    options, model = cli.model.encoder_options, cli.model
    assert (options.layer_mix, options.characters, options.word_dropout, model.hparams.encoder_lr) == (True, 0, 0.15, 2e-4)
    assert objectives(model) == ["Likelihood", "TagLikelihood"] and model.heads.tagger
    assert cli.datamodule.treebank == "UD_Wolof-WTB" and cli.datamodule.batch_tokens == 500
    assert options.freeze == "embeddings" and cli.trainer.max_epochs == 15 and options.lstm_layers == 2


def test_low_resource_kl_rows_count_the_teachers_labeled_sentences(ud_dir, tmp_path):
    """extra_labeled of a kl row: the sentences of the teacher's training file (at most its
    labeled_size), read from the checkpoint; 0 when the checkpoint does not say."""
    from benchmarks.low_resource import teacher_labeled

    train_file = _slice(ud_dir, tmp_path, 30)
    for settings, expected in (({"train": str(train_file), "labeled_size": None}, 30),
                               ({"train": str(train_file), "labeled_size": 10}, 10),
                               ({"treebank": "UD_English-EWT", "root": str(ud_dir)}, 12544),
                               ({"treebank": ["UD_English-EWT", "UD_Wolof-WTB"], "root": str(ud_dir)}, 12544 + 1188),
                               ({"train": str(tmp_path / "gone.conllu")}, 0)):
        torch.save({"datamodule_hyper_parameters": settings}, tmp_path / "teacher.ckpt")
        assert teacher_labeled(str(tmp_path / "teacher.ckpt"), ud_dir) == expected
    assert teacher_labeled(str(tmp_path / "missing.ckpt"), ud_dir) == 0


def test_low_resource_rows_name_their_commit_command_and_data(ud_dir):
    """Every row of docs/results/low_resource.jsonl says where it came from; the rows of a
    shipped config run without overrides keep an empty variant (the configs of today)."""
    from benchmarks.low_resource import report

    results = Path(train.__file__).parent / "docs" / "results" / "low_resource.jsonl"
    rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        assert len(row["commit"].removesuffix("+dirty")) == 40 and "train.py" in row["command"]
        assert (ud_dir / row["treebank"]).is_dir(), row["treebank"]  # a treebank the data directory holds
        if row["objective"] == "cross_treebank":  # the other treebank's sentences, all of them
            assert row["extra_labeled"] > 0 and ("teacher UD_" in row["variant"] or "teacher alone" in row["variant"])
        else:
            assert row["extra_labeled"] == (12544 if row["objective"] == "kl" else 0)
    default_ge = [row["las"] for row in rows if row["objective"] == "ge" and row["variant"] == "" and row["labeled"] == 100]
    assert len(default_ge) == 3 and round(sum(default_ge) / 3, 2) == 55.41  # tag_pairs, labeled, 0.1, decaying, tagger
    gold_tags = [row["las"] for row in rows if row["objective"] == "ge" and row["labeled"] == 100
                 and row["variant"] == "--model.tagger_weight 0.0 --data.unlabeled_tags keep"]
    assert len(gold_tags) == 3 and round(sum(gold_tags) / 3, 2) == 53.98  # the config before it read plain text
    assert all("naseem_ud.yaml" in row["variant"] for row in rows if row["objective"] == "ge" and row["las"] < 50)
    table = report(results)
    assert "| 100 | ge | - | 3 |" in table and "Ceiling: full-data test LAS 83.00 (the full-data supervised rows" in table
    # overrides by name, as the figure gives them: a terms list as its objectives, no JSON
    assert "| round 2 tagger pooling mean layer_mix true dropout 0.1 lr 1e-3 terms Likelihood+TagLikelihood+Distillation(labeled) |" \
           in table and "{" not in table


def test_low_resource_report_has_a_table_per_treebank(tmp_path):
    """Rows of two treebanks: each gets its own table and ceiling; a treebank whose every
    row overrides the encoder measures its recipes against that supervised variant."""
    from benchmarks.low_resource import figure, report

    e5 = "--model.encoder multilingual-e5-small"
    rows = [{"objective": objective, "variant": variant, "labeled": 100, "seed": seed, "train_seconds": 60,
             "uas": 70.0, "las": las + seed, "treebank": treebank}
            for treebank, base, recipe, las_base, las_recipe in (
                ("UD_English-EWT", "", "round 1", 50.0, 58.0), ("UD_Wolof-WTB", e5, f"round 1 {e5}", 40.0, 45.0))
            for seed in (1, 2, 3)
            for objective, variant, las in (("supervised", base, las_base), ("self_distill", recipe, las_recipe))]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ewt, wolof = report(results).split("**UD_Wolof-WTB**")
    assert ewt.startswith("**UD_English-EWT**") and "89.75" in ewt and "89.75" not in wolof
    # EWT: (60 - 52) / (89.75 - 52); Wolof: (47 - 42) / (76.11 - 42)
    assert "| 100 | self_distill | round 1 | 3 | 70.00 ± 0.00 | 60.00 ± 1.00 | 21% |" in ewt
    assert "| 100 | self_distill | round 1 encoder multilingual-e5-small | 3 | 70.00 ± 0.00 | 47.00 ± 1.00 | 15% |" in wolof
    assert figure(results, tmp_path / "figure.png").read_bytes().startswith(b"\x89PNG")


def test_low_resource_report_measures_a_recipe_against_the_supervised_parser_of_its_settings(tmp_path):
    """A recipe's share of the gap is against the strongest supervised variant whose
    overrides it carries too, not the plainest supervised parser nor the one of the most
    overrides; a supervised variant's own share is against the plainest."""
    from benchmarks.low_resource import report
    from benchmarks.recorded import baseline, grid_cells

    options = "--model.lr 1e-3 --model.encoder_options.dropout 0.1"
    rows = [{"objective": objective, "variant": variant, "labeled": 100, "seed": seed, "train_seconds": 60,
             "uas": 70.0, "las": las, "treebank": "UD_English-EWT"}
            for seed in (1, 2, 3)
            for objective, variant, las in (("supervised", "", 50.0), ("supervised", options, 60.0),
                                            ("supervised", "--model.lr 1e-3", 55.0),
                                            ("supervised", f"{options} --model.encoder_options.word_dropout 0.15", 58.0),
                                            ("self_distill", f"round 2 {options} --model.encoder_options.word_dropout 0.15", 70.0),
                                            ("self_distill", "round 1", 60.0))]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table = report(results)
    # (70 - 60) / (89.75 - 60) = 34%, not (70 - 50) / (89.75 - 50) = 50%; round 1 has no option: against 50
    assert "| 100 | self_distill | round 2 lr 1e-3 dropout 0.1 word_dropout 0.15 | 3 |" \
           " 70.00 ± 0.00 | 70.00 ± 0.00 | 34% |" in table
    assert "| 100 | self_distill | round 1 | 3 | 70.00 ± 0.00 | 60.00 ± 0.00 | 25% |" in table
    assert "| 100 | supervised | lr 1e-3 dropout 0.1 | 3 | 70.00 ± 0.00 | 60.00 ± 0.00 | 25% |" in table
    cells = grid_cells(results)["UD_English-EWT"]
    assert baseline(cells, 100)[0] == "" and baseline(cells, 100, "round 1 --model.lr 1e-3")[0] == "--model.lr 1e-3"


@pytest.mark.slow
def test_smoke_train_predict_round_trip_with_shipped_minilm(ud_dir: Path, tmp_path: Path, caplog):
    """A few steps on a slice of EWT with the real encoder and the shipped config as a user
    runs it (no validation interval given: the run validates before it stops), then parse
    and score a file with the best checkpoint."""
    small = _slice(ud_dir, tmp_path, 48)
    cli = train.main([
        "fit", "--config", str(CONFIGS / "likelihood.yaml"),
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
    assert set(evaluate(small, out)) == {"upos", "uas", "las", "clas"}


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
        "--model.heads.arc_size", "32", "--model.heads.label_size", "16", "--data.train", str(data), "--data.dev", str(data),
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
    extra = ["--model.teacher", str(teacher_checkpoint)] if name in ("kl", "sample_distill", "ge_teacher") else []
    extra += ["--data.labeled_size", "10"] if name in ("entropy", "kl", "sample_distill", "ge_teacher", "ge", "combined") else []
    _short_run(name, tiny_bert_dir, _slice(ud_dir, tmp_path, 30), tmp_path, extra)


def test_a_student_learns_from_several_teachers(tiny_bert_dir, ud_dir, tmp_path, teacher_checkpoint):
    """``--model.teacher '[A, B]'``: the student distils their ensemble (the mean of their
    scores, tests/parser/test_model.py), and its checkpoint names both teachers."""
    data = _slice(ud_dir, tmp_path, 30)
    second = _short_run("likelihood", tiny_bert_dir, data, tmp_path / "second", ["--seed_everything", "2"])
    best = _short_run("kl", tiny_bert_dir, data, tmp_path / "student",
                      ["--model.teacher", f"[{teacher_checkpoint}, {second}]", "--data.labeled_size", "10"])
    assert torch.load(best, weights_only=False)["hyper_parameters"]["teacher"]["checkpoints"] == [str(teacher_checkpoint),
                                                                                                str(second)]


@pytest.mark.parametrize("args, options", [
    (["--model.teacher", "a.ckpt"], TeacherOptions("a.ckpt")),
    (["--model.teacher", "[a.ckpt, b.ckpt]"], TeacherOptions(["a.ckpt", "b.ckpt"])),
    (["--model.teacher.ema", "0.999"], TeacherOptions(ema=0.999)),
    (["--model.teacher.checkpoints", "a.ckpt", "--model.teacher.cache_mib", "0"], TeacherOptions("a.ckpt", cache_mib=0)),
    (["--model.teacher_ema", "0.999"], TeacherOptions(ema=0.999)),  # the spellings of recorded commands
    (["--model.teacher", "a.ckpt", "--model.teacher_cache_mib", "0"], TeacherOptions("a.ckpt", cache_mib=0)),
])
def test_every_spelling_of_the_teacher_reaches_the_model(args, options, tiny_bert_dir, tmp_path):
    """``--model.teacher`` takes a checkpoint, a list of them or the options; the options'
    older spellings ``--model.teacher_ema`` and ``--model.teacher_cache_mib`` still work, and
    the run's config.yaml holds them in their new place."""
    cli = train.main(["--config", str(CONFIGS / "distill.yaml"), "--model.encoder", str(tiny_bert_dir), *args],
                     run=False)
    assert cli.model.teacher == options
    assert "teacher_ema" not in cli.config.model and "teacher_cache_mib" not in cli.config.model


@pytest.mark.parametrize("both", [["--model.teacher", "a.ckpt", "--model.teacher_ema", "0.9"],
                                  ["--model.teacher", "{checkpoints: a.ckpt, ema: 0.9}"]])
def test_a_teacher_both_from_files_and_a_moving_average_is_refused(both, tiny_bert_dir):
    """A ConfigurationError (one line), not the traceback of a union none of whose types fits."""
    with pytest.raises(ConfigurationError, match="not both"):
        train.main(["--model.encoder", str(tiny_bert_dir), *both], run=False)


def test_a_checkpoint_of_the_flat_teacher_settings_loads_and_tests(tiny_bert_dir, ud_dir, tmp_path, teacher_checkpoint):
    """A checkpoint written before the teacher's settings were one value (hyperparameters
    ``teacher``, ``teacher_ema``, ``teacher_cache_mib``) loads, and tests through train.py,
    whose ``--ckpt_path`` reads its hyperparameters as the model's settings."""
    state = torch.load(teacher_checkpoint, weights_only=False)
    hparams = state["hyper_parameters"]
    del hparams["teacher"]
    state["hyper_parameters"] = {**hparams, "teacher": "t.ckpt", "teacher_ema": None, "teacher_cache_mib": 8}
    old = tmp_path / "old.ckpt"
    torch.save(state, old)
    assert Parser.load(old).teacher == TeacherOptions("t.ckpt", cache_mib=8)
    data = _slice(ud_dir, tmp_path, 10)
    cli = train.main(["test", "--config", str(CONFIGS / "likelihood.yaml"), "--ckpt_path", str(old),
                      "--data.test", str(data), "--data.batch_tokens", "300", "--trainer.logger", "false",
                      "--trainer.enable_progress_bar", "false"])
    assert cli.model.teacher == TeacherOptions("t.ckpt", cache_mib=8) and "test/las" in cli.trainer.callback_metrics


def test_a_run_without_logger_or_checkpoints_ends_cleanly(tiny_bert_dir, ud_dir, tmp_path):
    """``--trainer.logger false --trainer.enable_checkpointing false`` (a quick probe): the
    default callbacks that need a logger or checkpoints step aside instead of Lightning
    refusing to start, and the run writes no checkpoint."""
    data = _slice(ud_dir, tmp_path, 20)
    cli = train.main([
        "fit", "--trainer.max_steps", "2", "--model.encoder", str(tiny_bert_dir), "--model.heads.arc_size", "32",
        "--model.heads.label_size", "16", "--data.train", str(data), "--data.dev", str(data), "--data.batch_tokens", "300",
        "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
    ])
    assert cli.trainer.global_step == 2 and cli.trainer.checkpoint_callbacks == [] and cli.trainer.loggers == []
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_objective_is_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        train.main(["fit", "--help"])
    assert "--objective" in capsys.readouterr().out


def test_callbacks_from_the_command_line_are_kept_with_the_progress_bar_on(tiny_bert_dir, ud_dir, tmp_path):
    """The defaults (progress bar on): a ``ModelCheckpoint`` added to ``fit`` writes its
    checkpoints, and ``predict`` with ``ConlluWriter`` writes its file, beside the defaults."""
    data = _slice(ud_dir, tmp_path, 20)
    model = ["--model.encoder", str(tiny_bert_dir), "--model.heads.arc_size", "32", "--model.heads.label_size", "16"]
    every = tmp_path / "every"
    cli = train.main([
        "fit", *model, "--data.train", str(data), "--data.dev", str(data), "--data.batch_tokens", "300",
        "--trainer.max_steps", "4", "--trainer.default_root_dir", str(tmp_path / "runs"),
        "--trainer.enable_model_summary", "false",
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint", "--trainer.callbacks.dirpath", str(every),
        "--trainer.callbacks.every_n_train_steps=2", "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={step}",
    ])
    assert cli.trainer.progress_bar_callback is not None
    assert sorted(p.name for p in every.glob("*.ckpt")) == ["step=2.ckpt", "step=4.ckpt"]
    checkpoints = tmp_path / "runs" / "run" / "version_0" / "checkpoints"  # the defaults stay
    assert (checkpoints / "best.ckpt").is_file() and (checkpoints / "last.ckpt").is_file()
    last = checkpoints / "last.ckpt"

    words = [s.words for s in read_conllu(data)]
    text = tmp_path / "paragraphs.txt"  # plain text, a blank line between two paragraphs
    text.write_text("".join(" ".join(w) + "\n" + ("\n" if i == 9 else "") for i, w in enumerate(words)), encoding="utf-8")
    out = tmp_path / "out.conllu"
    cli = train.main(["predict", *model, "--ckpt_path", str(last), "--data.predict", str(text),
                      "--trainer.default_root_dir", str(tmp_path / "runs"),
                      "--trainer.callbacks+=parser.predict.ConlluWriter", "--trainer.callbacks.output", str(out)])
    assert cli.trainer.progress_bar_callback is not None
    parsed = read_conllu(out)
    assert [s.words for s in parsed] == words
    assert [i for i, s in enumerate(parsed) if "newpar" in s.tokenlist.metadata] == [10]


def test_a_users_progress_bar_takes_the_place_of_the_default(tiny_bert_dir):
    cli = train.main(["--model.encoder", str(tiny_bert_dir),
                      "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar"], run=False)
    assert type(cli.trainer.progress_bar_callback).__name__ == "TQDMProgressBar"
    assert type(train.main(["--model.encoder", str(tiny_bert_dir)], run=False).trainer.progress_bar_callback).__name__ \
        == "StepProgressBar"


def test_the_moving_average_config_adds_its_callback_beside_the_defaults(tiny_bert_dir):
    cli = train.main(["--config", str(CONFIGS / "transfer.yaml"), "--config", str(CONFIGS / "moving_average.yaml"),
                      "--model.encoder", str(tiny_bert_dir)], run=False)
    averages = [c for c in cli.trainer.callbacks if isinstance(c, MovingAverage)]
    assert [(c.decay, c.start) for c in averages] == [(0.99, 50)]
    assert any(type(c).__name__ == "LastCheckpoint" for c in cli.trainer.callbacks)


def test_partially_annotated_training_file_trains_with_data_partial(tiny_bert_dir, ud_dir, tmp_path):
    """A training file with HEAD ``_`` for unknown arcs (built by ``treeexp partial``,
    as the low-resource driver's --partial-arcs does) trains with ``--data.partial true`` (finite loss); without the option it
    is an error naming file and line."""
    from parser.data.partial import write_partial_train

    whole = _slice(ud_dir, tmp_path, 30)
    partial = tmp_path / "partial.conllu"
    kept = write_partial_train(whole, 5, 0.3, 1, partial)
    arcs = sum(len(s) for s in read_conllu(whole)[5:])
    heads = [s.heads for s in read_conllu(partial, partial=True)]
    assert heads[:5] == [s.heads for s in read_conllu(whole)[:5]]
    assert 0 < kept < arcs and sum(h is not None for tree in heads[5:] for h in tree) == kept
    args = ["--objective", "likelihood", "--trainer.max_steps", "2", "--model.encoder", str(tiny_bert_dir),
            "--model.heads.arc_size", "32", "--model.heads.label_size", "16", "--data.train", str(partial), "--data.dev", str(whole),
            "--data.batch_tokens", "300", "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar",
            "false", "--trainer.enable_model_summary", "false"]
    with pytest.raises(ConlluError, match=rf"{partial}:\d+: missing HEAD"):
        train.main(args)
    cli = train.main([*args, "--data.partial", "true"])
    assert cli.trainer.global_step == 2 and torch.isfinite(cli.trainer.callback_metrics["train/loss"])
