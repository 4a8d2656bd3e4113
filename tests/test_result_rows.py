"""The recorded result rows that README and docs/ tables are regenerated from: each row once,
each with the commit and the exact command that produced it."""

import json
import re
from pathlib import Path

import pytest

RESULTS = sorted((Path(__file__).parent.parent / "docs" / "results").glob("*.jsonl"))
# a machine's own path: a home, a scratch root or an interpreter's prefix (rows name paths relative to the
# repository, $UD_DIR or $SITE_PACKAGES, so that a reader can run the command on another machine)
MACHINE_PATH = re.compile(r"(?<![\w.$])/(?:root|home|work|tmp|Users)/")


@pytest.mark.parametrize("path", RESULTS, ids=lambda path: path.name)
def test_every_result_row_is_recorded_once_with_its_provenance(path):
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    repeated = {line for line in lines if lines.count(line) > 1}
    assert not repeated, f"{path.name}: {len(repeated)} rows appended more than once"
    for number, line in enumerate(lines, 1):
        row = json.loads(line)
        assert row.get("commit") and row.get("command"), f"{path.name}:{number}"
        assert not MACHINE_PATH.search(line), f"{path.name}:{number} names a machine's own path"


def test_the_result_files_are_found():
    assert {path.name for path in RESULTS} >= {"low_resource.jsonl", "small_treebanks.jsonl"}
