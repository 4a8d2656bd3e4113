"""benchmarks.few_trees: the recipes' overrides and the table of recorded rows."""

import json

import pytest

from benchmarks import few_trees


def test_a_targets_facts_file_is_named_after_its_language():
    assert few_trees.language("UD_Welsh-CCG") == "welsh" and few_trees.language("UD_Uyghur-UDT") == "uyghur"


def test_the_table_has_a_cell_per_treebank_trees_and_recipe(tmp_path):
    results = tmp_path / "rows.jsonl"
    rows = [{"treebank": "UD_X", "trees": 0, "recipe": "zero_shot", "seed": 1, "test_las": 40.0, "test_uas": 60.0},
            {"treebank": "UD_X", "trees": 0, "recipe": "ge_facts", "seed": 1, "test_las": 44.0, "test_uas": 62.0},
            {"treebank": "UD_X", "trees": 0, "recipe": "ge_facts", "seed": 2, "test_las": 46.0, "test_uas": 64.0}]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = few_trees.report(results).splitlines()
    assert table[0] == "| treebank | trees | zero_shot | ge_facts |"
    assert table[2] == "| UD_X | 0 | 40.00 (60.00) | 45.00 (63.00) n=2 |"
    assert few_trees.figure(results, tmp_path / "bars.png").stat().st_size > 1000


@pytest.mark.parametrize("recipe, trees", [("ge_facts", 10), ("ge_oracle", 20), ("finetuned", 0)])
def test_a_recipe_for_another_number_of_trees_is_refused(recipe, trees, tmp_path):
    with pytest.raises(ValueError, match="is a recipe for"):
        few_trees.run("UD_X", trees, recipe, 1, tmp_path / "base.ckpt", None, tmp_path / "rows.jsonl", [])
