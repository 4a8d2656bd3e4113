"""benchmarks.few_trees: the recipes' overrides and the table of recorded rows."""

import json

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
