"""Fixtures of the parser's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

EWT = "UD_English-EWT/en_ewt-ud-dev.conllu"


@pytest.fixture()
def small_treebank(ud_dir: Path, tmp_path: Path) -> Path:
    """The first 40 sentences of EWT dev as train, dev and test files."""
    text = (ud_dir / EWT).read_text(encoding="utf-8")
    blocks = text.split("\n\n")[:40]
    path = tmp_path / "small.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path
