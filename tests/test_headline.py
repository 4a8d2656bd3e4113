"""benchmarks.headline: the README's headline table and figure come from the recorded rows, and
every number of a README table is one of docs/results.md's."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from benchmarks.common import TARGETS
from benchmarks.headline import FIGURE, figure, seeds_cell, table
from benchmarks.recorded import targets
from benchmarks.transfer import SHIPPED, shipped, zero_shot

ROOT = Path(__file__).parent.parent
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?![\w.])")  # a measurement: a number with decimals


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def table_numbers(text: str) -> set[str]:
    """The measurements in the markdown table rows (lines starting with ``|``) of ``text``."""
    return {number for line in text.splitlines() if line.startswith("|") for number in NUMBER.findall(line)}


def test_the_headline_regenerates_from_the_rows(tmp_path):
    """Every target has its transfer recipe, the language alone beside it, the whole file and UDPipe 2;
    the README shows the table the rows give today, and the figure is drawn again at the README's
    width, small."""
    found, recipe = targets(), shipped(list(SHIPPED))
    assert [target.treebank for target in found] == list(recipe) == list(TARGETS)
    for target in found:
        assert target.supervised and target.best_own and recipe[target.treebank] and target.stages["full"]
        assert target.udpipe and target.stages["zero-shot"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table(found, recipe, zero_shot(list(SHIPPED))) in readme, "the README's headline table is stale: python -m benchmarks.headline"
    for path in (figure(found, recipe, tmp_path / "headline.png"), FIGURE):
        assert _png_size(path) == (800, 340) and path.stat().st_size < 150_000


def test_every_number_of_the_readme_tables_is_in_the_results():
    """A number in a README table that docs/results.md does not hold has no command behind it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    numbers = table_numbers(readme)
    assert len(numbers) > 30, "the README's tables hold the headline's numbers"
    assert numbers <= table_numbers(results), sorted(numbers - table_numbers(results))


def test_the_check_sees_a_number_missing_from_the_results():
    """Numbers outside tables, and counts and years inside, are not measurements of a table."""
    assert table_numbers("| a | 53.4 ± 0.4 | 2010 |\ntext 99.9\n| b | **57.4** (1 seed) |") == {"53.4", "0.4", "57.4"}


def test_a_cell_of_fewer_seeds_says_how_many():
    """Three seeds are the headline's; a cell of fewer names its count, so 2 seeds never pass for 3."""
    assert seeds_cell([]) == "-"
    assert seeds_cell([55.0]) == "55.0 (1 seed)"
    assert seeds_cell([55.0, 56.0]) == "55.5 ± 0.7 (2 seeds)"
    assert seeds_cell([55.0, 56.0, 57.0]) == "56.0 ± 1.0"
