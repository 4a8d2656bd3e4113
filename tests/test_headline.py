"""benchmarks.headline: the README's headline table and figure come from the recorded rows."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from benchmarks.headline import FIGURE, figure, table
from benchmarks.recorded import LANGUAGES, languages

ROOT = Path(__file__).parent.parent


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_the_headline_regenerates_from_the_rows(tmp_path):
    """Every language has its four numbers; the README shows the table the rows give today, and
    the figure is drawn again at the README's width, small."""
    found = languages()
    assert [language.treebank for language in found] == list(LANGUAGES)
    for language in found:
        assert language.supervised and language.recipe and language.full and language.udpipe
        assert min(language.recipe) > max(language.supervised) - 1  # the recipe's gain, seed by seed
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table(found) in readme, "the README's headline table is stale: python -m benchmarks.headline"
    for path in (figure(found, tmp_path / "headline.png"), FIGURE):
        assert _png_size(path) == (800, 340) and path.stat().st_size < 150_000


def test_the_full_training_file_scores_are_recorded_rows():
    """The small treebanks' full-training-file LAS is an MST test LAS of configs/small_treebank.yaml
    in docs/results/small_treebanks.jsonl (the constant the report falls back on is a recorded row)."""
    rows = [json.loads(line) for line in (ROOT / "docs/results/small_treebanks.jsonl").read_text().splitlines()
            if line.strip()]
    for language in languages():
        if language.treebank == "UD_English-EWT":  # its full-data rows are low_resource.jsonl's own
            assert "rows of the results" in language.full_source
            continue
        assert any(row["treebank"] == language.treebank and row["recipe"] == "configs/small_treebank.yaml"
                   and row["decoder"] == "mst" and row["test_las"] == language.full for row in rows), language.name
