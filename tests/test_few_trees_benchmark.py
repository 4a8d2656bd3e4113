"""benchmarks.few_trees: the recipes' overrides and the table of recorded rows."""

import json
import shutil
import zipfile

import pytest

from benchmarks import few_trees


def test_a_targets_facts_file_is_named_after_its_language():
    assert few_trees.language("UD_Welsh-CCG") == "welsh" and few_trees.language("UD_Uyghur-UDT") == "uyghur"


def test_the_table_has_a_cell_per_treebank_trees_and_recipe(tmp_path):
    results = tmp_path / "rows.jsonl"
    rows = [{"treebank": "UD_X", "trees": 0, "recipe": "zero_shot", "seed": 1, "test_las": 40.0, "test_uas": 60.0},
            {"treebank": "UD_X", "trees": 0, "recipe": "ge_facts", "seed": 1, "test_las": 44.0, "test_uas": 62.0},
            {"treebank": "UD_X", "trees": 0, "recipe": "ge_facts", "seed": 2, "test_las": 46.0, "test_uas": 64.0},
            {"treebank": "UD_X", "trees": 20, "recipe": "self_training", "seed": 1, "test_las": 38.0, "test_uas": 61.0},
            {"treebank": "UD_X", "trees": 20, "recipe": "ge_counts", "seed": 1, "test_las": 39.0, "test_uas": 62.0},
            {"treebank": "UD_X", "trees": 50, "recipe": "finetuned", "seed": 1, "test_las": 50.0, "test_uas": 70.0},
            {"treebank": "UD_X", "trees": 10, "recipe": "self_training", "seed": 2, "test_las": 45.0, "test_uas": 65.0},
            {"treebank": "UD_X", "trees": 10, "recipe": "ge_counts", "seed": 2, "test_las": 44.0, "test_uas": 64.0},
            {"treebank": "UD_X", "trees": 10, "recipe": "self_training", "seed": 1, "test_las": 41.0, "test_uas": 61.0},
            {"treebank": "UD_X", "trees": 10, "recipe": "ge_counts", "seed": 1, "test_las": 43.0, "test_uas": 63.0}]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = few_trees.report(results).splitlines()
    assert table[0] == "| treebank | trees | zero_shot | finetuned | self_training | ge_facts | ge_counts | GE over the best without |"
    assert table[2] == "| UD_X | 0 | 40.00 (60.00) |  |  | 45.00 (63.00) n=2 |  | +5.00 (+4.00, +6.00 by seed) |"
    # seed by seed: 43 - 41 (seed 1) and 44 - 45 (seed 2), in the order of seeds, not of rows
    assert table[3] == "| UD_X | 10 |  |  | 43.00 (63.00) n=2 |  | 43.50 (63.50) n=2 | +0.50 (+2.00, -1.00 by seed) |"
    assert table[4] == "| UD_X | 20 |  |  | 38.00 (61.00) |  | 39.00 (62.00) | -1.00 |"  # the base as it is: 40
    assert table[5] == "| UD_X | 50 |  | 50.00 (70.00) |  |  |  |  |"  # no GE run: no gain
    assert few_trees.figure(results, tmp_path / "bars.png").stat().st_size > 1000


def test_the_variants_table_sets_each_variant_beside_the_shipped_recipes_with_its_gain(tmp_path):
    shipped, results = tmp_path / "rows.jsonl", tmp_path / "variants.jsonl"
    rows = [{"treebank": "UD_X", "trees": 0, "recipe": "zero_shot", "seed": 1, "test_las": 40.0, "test_uas": 60.0},
            {"treebank": "UD_X", "trees": 0, "recipe": "self_training", "seed": 1, "test_las": 41.0, "test_uas": 61.0},
            {"treebank": "UD_X", "trees": 20, "recipe": "self_training", "seed": 1, "test_las": 50.0, "test_uas": 70.0}]
    shipped.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = [{"treebank": "UD_X", "trees": 0, "recipe": "ge_oracle", "variant": "gold", "seed": s, "test_las": las,
             "test_uas": 70.0} for s, las in ((1, 52.0), (2, 54.0))]
    rows.append({"treebank": "UD_X", "trees": 0, "recipe": "ge_oracle", "variant": "sum", "seed": 1, "test_las": 38.5,
                 "test_uas": 59.0})
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = few_trees.variants(results, shipped).splitlines()
    assert table[0] == "| treebank | trees | zero_shot | self_training | ge_oracle: gold | ge_oracle: sum |"
    assert table[2] == "| UD_X | 0 | 40.00 (60.00) | 41.00 (61.00) | 53.00 (70.00) +13.00 n=2 | 38.50 (59.00) -1.50 |"
    assert table[3] == "| mean LAS gain over the zero-shot base (treebanks) | | | | +13.00 (1) | -1.50 (1) |"
    assert len(table) == 4  # no variant at 20 trees: no line
    rows.append({"treebank": "UD_X", "trees": 0, "recipe": "zero_shot", "variant": "other", "seed": 1, "test_las": 30.0,
                 "test_uas": 50.0})  # another start's own zero-shot row: a variant, not the base's
    results.write_text(shipped.read_text() + "".join(json.dumps(r) + "\n" for r in rows))
    mixed = few_trees.variants(results, results).splitlines()
    assert mixed[0] == table[0] + " zero_shot: other |" and mixed[2] == table[2] + " 30.00 (50.00) -10.00 |"


def test_a_pipelines_runs_are_recorded_as_rows_of_the_recipes_its_stages_are(tmp_path, capsys):
    from parser import pipeline

    output, results = tmp_path / "out", tmp_path / "rows.jsonl"
    ran = [{"stage": "base", "seed": None, "checkpoint": "base.ckpt", "command": None, "test": {"las": 40.0, "uas": 60.0}},
           *({"stage": stage, "seed": 1, "checkpoint": f"{stage}.ckpt", "dev": {}, "cpu_minutes": minutes,
              "peak_rss_mib": 5000, "commit": "abc", "command": f"python train.py fit --config {stage}.yaml",
              "date": "2026-11-29", "test": {"las": las, "uas": 70.0}}
             for stage, minutes, las in (("relatives", 15.0, 45.123), ("ge", 7.0, 47.0))),
           {"stage": "ge", "seed": 2, "checkpoint": "ge2.ckpt", "dev": {}, "cpu_minutes": 8.0, "peak_rss_mib": 5000,
            "commit": "abc", "command": "python train.py fit --config ge.yaml --seed_everything 2", "date": "2026-11-29",
            "test": {"las": 48.0, "uas": 71.0}}]
    output.mkdir()
    pipeline.write_rows(output, ran)
    few_trees.main(["record", "--treebank", "UD_X", "--output", str(output), "--recipe", "relatives=zero_shot",
                    "--recipe", "ge=ge_facts", "--variant", "relatives", "--results", str(results)])
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["recipe"], r["variant"], r["stage"], r["seed"], r["test_las"], r["cpu_minutes"]) for r in rows] == [
        ("zero_shot", "relatives", "relatives", 1, 45.12, 15.0), ("ge_facts", "relatives", "ge", 1, 47.0, 7.0),
        ("ge_facts", "relatives", "ge", 2, 48.0, 8.0)]  # a row for each seed's run
    assert rows[1]["command"] == "python train.py fit --config ge.yaml" and rows[0]["trees"] == 0
    capsys.readouterr()
    for recipe, message in (("student=self_training", "no run of stage student"), ("ge", "STAGE=RECIPE")):
        with pytest.raises(SystemExit):
            few_trees.main(["record", "--treebank", "UD_X", "--output", str(output), "--recipe", recipe,
                            "--results", str(results)])
        assert message in capsys.readouterr().err
    pipeline.write_rows(output, [{k: v for k, v in run.items() if k != "test"} for run in ran])
    with pytest.raises(SystemExit):
        few_trees.main(["record", "--treebank", "UD_X", "--output", str(output), "--recipe", "ge=ge_facts",
                        "--results", str(results)])
    assert "with --test" in capsys.readouterr().err and len(results.read_text().splitlines()) == 3


@pytest.mark.parametrize("recipe, trees", [("ge_facts", 10), ("ge_oracle", 20), ("finetuned", 0), ("ge_counts", 0)])
def test_a_recipe_for_another_number_of_trees_is_refused(recipe, trees, tmp_path):
    with pytest.raises(ValueError, match="is a recipe for"):
        few_trees.run("UD_X", trees, recipe, 1, tmp_path / "base.ckpt", None, tmp_path / "rows.jsonl", [])


@pytest.mark.parametrize("trees, recipe, terms", [
    (0, "self_training", ["Distillation"]),
    (0, "ge_facts", ["Distillation", "GeneralizedExpectation"]),
    (20, "finetuned", ["Likelihood", "TagLikelihood"]),
    (20, "self_training", ["Likelihood", "TagLikelihood", "Distillation"]),
    (20, "ge_counts", ["Likelihood", "TagLikelihood", "Distillation", "GeneralizedExpectation"]),
])
def test_each_recipe_trains_its_config_with_its_terms_and_trees(trees, recipe, terms, tiny_bert_dir, ud_dir,
                                                                tmp_path, monkeypatch, fake_training):
    """Each recipe is a stage of the shipped pipeline of its trees, in the recipe's folder; the
    command it gives train.py builds the parser it names: its terms, K labeled trees and K dev
    trees (none without trees), GE's statistics counted on the first K trees; with K trees every
    recipe but ``finetuned`` starts from the fine-tuned parser where that parses the K dev trees
    better, which then trains once for every recipe."""
    import train

    launched = fake_training

    def parsed_las(candidates, dev, scratch):  # the choice of the pipeline: each parses the first K dev trees
        assert dev.read_text(encoding="utf-8").count("\n\n") == trees and set(candidates) == {"base", "finetuned"}
        return {"base": 40.0, "finetuned": better}

    monkeypatch.setattr(few_trees.pipeline, "parsed_las", parsed_las)
    output, base = tmp_path / "runs" / "UD_Wolof-WTB" / str(trees), tmp_path / "base.ckpt"
    zipfile.ZipFile(base, "w").close()  # a checkpoint's form, never loaded here
    for better in (50.0, 30.0):  # the fine-tuned parser starts where it parses the K dev trees better, else the base
        run = few_trees.train("UD_Wolof-WTB", trees, recipe, 1, base, str(ud_dir), output)
        assert run.directory.parents[1] == output / recipe / "seed1"
        arguments = launched[-1][launched[-1].index("fit") + 1:]
        if recipe != "finetuned":
            start = arguments[arguments.index("--model.init") + 1]
            tuned = trees and better > 40
            assert start == str(output / "finetuned" / "seed1" / "transfer" / "version_0" / "checkpoints" / "best.ckpt"
                                 if tuned else base)
            shutil.rmtree(output / recipe)  # the recipe trains again, the fine-tuned parser is reused
    assert sum("--model.init" in command and str(base) == command[command.index("--model.init") + 1]
               and "configs/transfer.yaml" in " ".join(command) for command in launched) == (1 if trees else 0)
    for option in ("--model.init", "--model.teacher", "--trainer.default_root_dir"):  # the base checkpoint (not built here)
        while option in arguments:
            del arguments[arguments.index(option):arguments.index(option) + 2]
    cli = train.main([*arguments, "--model.encoder", str(tiny_bert_dir)], run=False)
    assert [type(t.objective).__name__ for t in cli.model.terms.terms] == terms
    assert (cli.datamodule.labeled_size, cli.datamodule.dev_size) == ((trees, trees) if trees else (0, None))
    if recipe == "ge_counts":
        ge = cli.model.terms.terms[-1].objective
        assert ge.reduction == "mean" and ge.penalty == "l1" and len(ge.constraints) > 50
        counted = (output / "statistics.yaml").read_text()
        assert "--trees 20" in counted and ge.constraints[0].target is not None  # the first K trees' counts
