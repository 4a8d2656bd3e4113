"""parser.plot: training curves from Lightning CSV logs written here, one run or several."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from parser.plot import figure, find_logs, main, read_metrics

COLUMNS = ["epoch", "lr-AdamW/pg1", "lr-AdamW/pg2", "step", "train/weight/ge", "train/loss", "train/likelihood",
           "train/ge", "train/unlabeled_skipped", "val/las", "val/uas"]


def _write_log(path: Path, steps: int = 8, unsupervised: bool = True) -> Path:
    """A metrics.csv as Lightning's CSVLogger writes it: rows that fill only some columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        for step in range(1, steps, 2):
            writer.writerow({"step": step, "lr-AdamW/pg1": 2e-3 * step / steps, "lr-AdamW/pg2": 5e-5 * step / steps})
            row = {"epoch": 0, "step": step, "train/loss": 5.0 / step, "train/likelihood": 4.0 / step}
            if unsupervised:
                row |= {"train/weight/ge": 0.1 * step / steps, "train/ge": 1.0 / step, "train/unlabeled_skipped": 0}
            writer.writerow(row)
            if step % 4 == 3:
                writer.writerow({"epoch": 0, "step": step, "val/uas": 50 + step, "val/las": 40 + step})
    return path


def test_reads_each_metric_at_its_steps(tmp_path):
    curves = read_metrics(_write_log(tmp_path / "metrics.csv"))
    assert curves["val/las"] == ([3, 7], [43.0, 47.0])
    assert curves["train/loss"][0] == [1, 3, 5, 7]
    assert "epoch" not in curves and "step" not in curves
    assert set(read_metrics(_write_log(tmp_path / "sup.csv", unsupervised=False))) == {
        "lr-AdamW/pg1", "lr-AdamW/pg2", "train/loss", "train/likelihood", "val/las", "val/uas"}


def test_finds_the_logs_of_a_run_directory_or_several(tmp_path):
    one = _write_log(tmp_path / "ge" / "version_0" / "metrics.csv")
    assert find_logs(tmp_path / "ge") == [(str(tmp_path / "ge"), one)]
    assert find_logs(one) == [(str(one), one)]
    for version in (1, 10, 2):
        _write_log(tmp_path / "ge" / f"version_{version}" / "metrics.csv")
    labels = [label for label, _ in find_logs(tmp_path / "ge")]
    assert labels == [f"{tmp_path / 'ge'}/version_{v}" for v in (0, 1, 2, 10)]


def test_one_panel_per_metric(tmp_path):
    run = read_metrics(_write_log(tmp_path / "a.csv"))
    supervised = read_metrics(_write_log(tmp_path / "b.csv", unsupervised=False))
    fig = figure([("ge", run), ("supervised", supervised)])
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["training loss", "ge", "likelihood", "weight of ge",
                      "learning rate (lr-AdamW/pg1)", "learning rate (lr-AdamW/pg2)", "dev UAS", "dev LAS"]
    assert [len(ax.lines) for ax in fig.axes[:8]] == [2, 1, 2, 1, 2, 2, 2, 2]  # the skipped-line count is not drawn


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_cli_plots_runs_side_by_side(tmp_path, suffix, capsys):
    _write_log(tmp_path / "runs" / "ge" / "version_0" / "metrics.csv")
    _write_log(tmp_path / "runs" / "likelihood" / "version_0" / "metrics.csv", unsupervised=False)
    output = tmp_path / f"curves{suffix}"
    main([str(tmp_path / "runs" / "ge"), str(tmp_path / "runs" / "likelihood"), "--output", str(output)])
    assert "plotted 2 run(s)" in capsys.readouterr().out
    data = output.read_bytes()
    assert data.startswith({".png": b"\x89PNG\r\n\x1a\n", ".svg": b"<?xml", ".html": b"<!DOCTYPE html>"}[suffix])


def test_cli_without_logs_says_so_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path), "--output", str(tmp_path / "curves.png")])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no metrics.csv" in err and len(err.strip().splitlines()) == 1


def test_low_resource_report_draws_its_figure(tmp_path):
    """benchmarks.low_resource --report: LAS by recipe and labeled size, a seed per point."""
    from benchmarks.low_resource import _recipe
    from benchmarks.low_resource import figure as report_figure

    rows = [{"objective": o, "variant": v, "labeled": k, "seed": s, "train_seconds": 60, "max_steps": 400,
             "uas": 60.0 + s, "las": 50.0 + s + (k == 1000) * 20}
            for k in (100, 1000) for s in (1, 2, 3)
            for o, v in (("supervised", ""), ("ge", "--model.unsupervised_weight 0.1"))]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = report_figure(results, tmp_path / "figures" / "low_resource.png")
    assert output.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert _recipe("ge", "--model.unsupervised_weight 0.1 --model.unsupervised_schedule linear_decay") == \
        "ge (tag pairs from labeled, λ 0.1, decaying λ)"
    student = ("round 2 teachers of seeds 1 2 3 --model.encoder_options.pooling mean "
               "'--model.terms=[{\"objective\": \"objectives.Likelihood\"}, {\"objective\": {\"class_path\": "
               "\"objectives.Distillation\", \"init_args\": {\"labeled\": true, \"temperature\": 2.0}}}]' "
               "--data.train /data/wo_wtb-first100.conllu")
    assert _recipe("self_distill", student) == ("self_distill (round 2 teachers of seeds 1 2 3, pooling mean, "
                                                "terms Likelihood+Distillation(labeled, temperature 2.0), "
                                                "train wo_wtb-first100.conllu)")


def test_a_curve_of_one_logged_step_is_drawn_as_a_visible_point(tmp_path):
    """A run that logged its training curves once (one row): each panel shows a marker."""
    run = read_metrics(_write_log(tmp_path / "one.csv", steps=2))
    assert run["train/loss"] == ([1], [5.0])
    fig = figure([("one step", run), ("longer", read_metrics(_write_log(tmp_path / "long.csv")))])
    one_step_panels = 0
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_color() == "C0":  # the one-step run
                assert len(line.get_xdata()) == 1 and line.get_marker() == "o" and line.get_markersize() > 0
                one_step_panels += 1
            elif not ax.get_title().startswith("dev"):
                assert line.get_marker() in (None, "None", "")  # longer curves stay lines
    assert one_step_panels == len(run) - 1 == 6  # every curve but the skipped-line count
