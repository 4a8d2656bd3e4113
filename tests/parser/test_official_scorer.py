"""``parser.evaluate`` against the official CoNLL 2018 scorer on real treebanks.

The official script (``conll18_ud_eval.py`` v1.2, UFAL) is the copy that ``stanza==1.4.0``
ships in ``stanza/utils``; it is loaded from that file without importing stanza itself.
Predictions are gold files with random, tree-preserving re-attachments and random labels
(subtypes included); multiword tokens and empty nodes stay as in the gold file.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from parser.evaluate import evaluate

FILES = ["UD_English-EWT/en_ewt-ud-dev.conllu", "UD_French-GSD/fr_gsd-ud-dev.conllu",
         "UD_German-GSD/de_gsd-ud-dev.conllu"]  # fr/de: many multiword tokens; EWT: empty nodes


@pytest.fixture(scope="module")
def official():
    stanza = importlib.util.find_spec("stanza")
    assert stanza is not None, "install the test extra: pip install -e '.[test]' (stanza==1.4.0 ships the scorer)"
    path = Path(stanza.submodule_search_locations[0]) / "utils" / "conll18_ud_eval.py"
    spec = importlib.util.spec_from_file_location("conll18_ud_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _descendants(heads: dict[int, int], word: int) -> set[int]:
    found, frontier = {word}, [word]
    while frontier:
        parent = frontier.pop()
        children = [m for m, h in heads.items() if h == parent and m not in found]
        found.update(children)
        frontier += children
    return found


def _perturb_sentence(lines: list[str], labels: list[str], rng: random.Random) -> list[str]:
    """Re-attach about a quarter of the words (never creating a cycle or a second root),
    relabel about a quarter of them and retag about a tenth."""
    fields = [line.split("\t") for line in lines]
    rows = {int(row[0]): row for row in fields if row[0].isdigit()}  # words; the same lists as in fields
    heads = {m: int(row[6]) for m, row in rows.items()}
    for m in rows:
        if heads[m] != 0 and rng.random() < 0.25:
            heads[m] = rng.choice(sorted(set(rows) - _descendants(heads, m)))
        if rng.random() < 0.25:
            rows[m][7] = rng.choice(labels)
        if rng.random() < 0.1:
            rows[m][3] = rng.choice(["NOUN", "VERB", "ADJ", "X"])
        rows[m][6] = str(heads[m])
    return ["\t".join(row) for row in fields]


def _prediction(gold: Path, out: Path, seed: int) -> Path:
    rng = random.Random(seed)
    blocks = gold.read_text(encoding="utf-8").split("\n\n")
    labels = sorted({line.split("\t")[7] for block in blocks for line in block.splitlines()
                     if line.split("\t")[0].isdigit()})
    out.write_text("\n\n".join("\n".join(_perturb_sentence(b.splitlines(), labels, rng)) for b in blocks),
                   encoding="utf-8")
    return out


@pytest.mark.parametrize("name", FILES)
def test_scores_equal_the_official_scorer(name, ud_dir, tmp_path, official):
    gold = ud_dir / name
    pred = _prediction(gold, tmp_path / "pred.conllu", seed=len(name))
    reference = official.evaluate(official.load_conllu_file(str(gold)), official.load_conllu_file(str(pred)))
    ours = evaluate(gold, pred)
    assert 30 < ours["las"] < ours["uas"] < 95  # the perturbation changed heads and labels
    assert 80 < ours["upos"] < 99
    for metric in ("uas", "las", "clas", "upos"):
        assert ours[metric] == pytest.approx(100 * reference[metric.upper()].f1, abs=1e-9)
