"""benchmarks.tokenizer: the test file's raw text, the official scorer's F1 and the report."""

import json
import shutil
from pathlib import Path

from benchmarks.tokenizer import official_f1, raw_text, report

FIXTURE = Path(__file__).parent / "parser" / "fixtures" / "mwt_empty.conllu"


def test_raw_text_joins_a_paragraphs_sentences(tmp_path):
    """Sentences by a space, paragraphs (``# newpar``) by a blank line; no ``# newpar``: one paragraph."""
    text, gold = FIXTURE.read_text(encoding="utf-8"), tmp_path / "gold.conllu"
    paragraph = "Vamos al mercado. Sue likes coffee and Bill tea."
    gold.write_text(text + text, encoding="utf-8")
    assert raw_text(gold) == f"{paragraph}\n\n{paragraph}\n"
    gold.write_text((text + text).replace("# newpar\n", ""), encoding="utf-8")
    assert raw_text(gold) == f"{paragraph} {paragraph}\n"


def test_the_same_tokens_score_100_and_the_report_shows_the_row(tmp_path):
    system = tmp_path / "system.conllu"
    shutil.copy(FIXTURE, system)
    assert official_f1(FIXTURE, system) == {"tokens_f1": 100.0, "sentences_f1": 100.0, "words_f1": 100.0}
    results = tmp_path / "rows.jsonl"
    row = {"treebank": "UD_X", "train_sentences": 100, "epochs": 20, "tokens_f1": 99.5, "sentences_f1": 80.0,
           "words_f1": 98.25, "train_seconds": 12.5, "commit": "0123456789abcdef", "command": "python -m x"}
    results.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert report(results).splitlines()[-1] == "| UD_X | 100 | 20 | 99.50 | 80.00 | 98.25 | 12.5 | 0123456 |"
