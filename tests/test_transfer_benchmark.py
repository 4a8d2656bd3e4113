"""benchmarks.transfer: a row per finished run of a transfer pipeline's folder, and the table."""

import json

from benchmarks import transfer
from parser.runs import FINISHED


def test_rows_of_every_finished_run_once_and_their_table(tmp_path, monkeypatch, ud_dir):
    for stage, seed, las in (("finetuned", 1, 60.0), ("finetuned", 2, 62.0), ("target_only", 1, 50.0)):
        run = tmp_path / "out" / stage / f"seed{seed}" / "transfer" / "version_0"
        run.mkdir(parents=True)
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
