"""benchmarks.transfer: a row per finished run of a transfer pipeline's folder, and the table."""

import json

from benchmarks import recorded, transfer
from benchmarks.common import mean_sd
from parser.runs import FINISHED
from tests.conftest import whole_checkpoint


def test_rows_of_every_finished_run_once_and_their_table(tmp_path, monkeypatch, ud_dir):
    for stage, seed, las in (("finetuned", 1, 60.0), ("finetuned", 2, 62.0), ("target_only", 1, 50.0)):
        run = tmp_path / "out" / stage / f"seed{seed}" / "transfer" / "version_0"
        whole_checkpoint(run / "checkpoints" / "best.ckpt")
        (run / "metrics.csv").write_text(f"step,val/las\n99,{las}\n")
        (run.parents[1] / FINISHED).write_text(json.dumps({
            "run": "transfer/version_0", "provenance": {"commit": "abc", "command": "python train.py fit", "date": "d"},
            "usage": {"seconds": 700.0, "cpu_seconds": 600.0, "peak_rss_bytes": 2**30}}))
    (tmp_path / "out" / "student" / "seed1").mkdir(parents=True)  # not finished: no row
    scored = []

    def fake_scores(checkpoint, test_file, scratch):
        scored.append(checkpoint)
        return {"test_uas": 70.0, "test_las": 60.0 + len(scored)}

    monkeypatch.setattr(transfer, "test_scores", fake_scores)
    results = tmp_path / "rows.jsonl"
    rows = transfer.record("UD_Wolof-WTB", tmp_path / "out", results, tmp_path / "base.ckpt", str(ud_dir))
    assert [(r["stage"], r["seed"]) for r in rows] == [("zero-shot", None), ("finetuned", 1), ("finetuned", 2),
                                                         ("target_only", 1)]
    assert rows[1]["dev_las"] == 60.0 and rows[1]["command"] == "python train.py fit" and rows[1]["commit"] == "abc"
    assert rows[1]["cpu_minutes"] == 10.0 and rows[1]["peak_rss_mib"] == 1024 and rows[0]["commit"]
    assert transfer.record("UD_Wolof-WTB", tmp_path / "out", results, tmp_path / "base.ckpt", str(ud_dir)) == []
    table = transfer.report(results)
    assert "| zero-shot | 1 | 61.00 |" in table and "| finetuned | 2 | 62.50 ± 0.71 |" in table
    assert table.index("zero-shot") < table.index("target_only") < table.index("finetuned")


def test_summary_sets_each_target_beside_its_own_trees_and_the_whole_file(tmp_path):
    rows = [("UD_Wolof-WTB", "zero-shot", 20.0), ("UD_Wolof-WTB", "student", 55.0), ("UD_Wolof-WTB", "student", 57.0),
            ("UD_Wolof-WTB", "full", 81.0), ("UD_Turkish-IMST", "target_only", 40.0),
            ("UD_Turkish-IMST", "student", 45.5), ("UD_Fake-X", "student", 1.0)]
    results = tmp_path / "rows.jsonl"
    results.write_text("".join(json.dumps({"treebank": t, "stage": s, "test_las": las}) + "\n" for t, s, las in rows))
    wolof = next(language for language in recorded.languages() if language.treebank == "UD_Wolof-WTB")
    found = recorded.targets(results, new_language=tmp_path / "none.jsonl", small_treebanks=tmp_path / "none.jsonl")
    lines = transfer.summary(found).splitlines()
    assert len(lines) == 4  # header, rule, Wolof, Turkish: only the six targets, in their order
    cells = [cell.strip() for cell in lines[2].split("|")[1:-1]]
    best = sum(wolof.recipe) / len(wolof.recipe)
    assert cells[0] == "Wolof-WTB" and cells[1] == "20.0" and cells[5] == "56.0 ± 1.4" and cells[6] == "-"
    assert cells[3] == mean_sd(wolof.recipe, 1, "-") and cells[7] == f"{56.0 - best:+.1f}"
    assert cells[8] == f"{wolof.full:.1f}" and cells[9] == "81.0" and cells[10] == "80.2"
    turkish = [cell.strip() for cell in lines[3].split("|")[1:-1]]
    assert turkish[2] == "40.0" and turkish[3] == "-" and turkish[7] == "+5.5" and turkish[10] == "73.6"
    assert transfer.figure(found, tmp_path / "transfer.png").stat().st_size > 10_000


def test_a_target_outside_the_grid_takes_its_own_trees_from_the_language_alone_pipeline(tmp_path):
    results, alone, whole = tmp_path / "rows.jsonl", tmp_path / "new_language.jsonl", tmp_path / "small_treebanks.jsonl"
    results.write_text("".join(json.dumps({"treebank": "UD_Welsh-CCG", "stage": s, "test_las": las}) + "\n"
                               for s, las in [("target_only", 40.0), ("student", 60.0)]))
    lines = transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole)).splitlines()
    assert [c.strip() for c in lines[2].split("|")[1:-1]][2:4] == ["40.0", "-"]  # no rows: target_only stands
    alone.write_text("".join(json.dumps({"treebank": t, "stage": s, "test_las": las}) + "\n" for t, s, las in [
        ("UD_Welsh-CCG", "teachers", 50.0), ("UD_Welsh-CCG", "teachers", 52.0), ("UD_Welsh-CCG", "round1", 54.0),
        ("UD_Welsh-CCG", "round2", 56.0), ("UD_Turkish-IMST", "round2", 99.0)]))
    cells = [c.strip() for c in transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole))
             .splitlines()[2].split("|")[1:-1]]
    assert cells[0] == "Welsh-CCG" and cells[2:4] == ["51.0 ± 1.4", "56.0"] and cells[7] == "+4.0"
    assert cells[8] == "-" and cells[10] == "82.6"  # no whole-file row yet; UDPipe 2's published LAS
    whole.write_text(json.dumps({"treebank": "UD_Welsh-CCG", "recipe": "configs/small_treebank.yaml", "ablation": "",
                                 "encoder": "multilingual-e5-small", "decoder": "mst", "dev_las": 77.0,
                                 "test_las": 78.04}) + "\n")
    cells = [c.strip() for c in transfer.summary(recorded.targets(results, new_language=alone, small_treebanks=whole))
             .splitlines()[2].split("|")[1:-1]]
    assert cells[8] == "78.0"
