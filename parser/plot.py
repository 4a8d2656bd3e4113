"""Plot training curves from the CSV logs of one or more runs, side by side.

    python -m parser.plot runs/ge/version_0 runs/likelihood/version_0 --output curves.png

Each argument is a ``metrics.csv`` file or a directory searched for them: a run's
``version_N`` folder (``train.py`` logs to ``ROOT/NAME/version_N/metrics.csv``, ROOT being
``--trainer.default_root_dir``), or a folder of several runs, each then one curve labeled
with its sub-folder. One panel per metric the logs hold, against the optimiser step: the
loss, each term's value (``train/<term>``) and scheduled weight (``train/weight/<term>``),
learning rates (``lr-*``, one per parameter group), dev UAS and LAS. The
format follows the extension: .png, .svg or .html."""

from __future__ import annotations

import argparse
import csv
import math
import re
from pathlib import Path

from parser.drawing import DrawingError, check_output, new_figure, report_errors, save

# plotted in this order; a name ending in / or - stands for every metric under it
METRICS = ("train/loss", "train/", "train/weight/", "lr-", "val/uas", "val/las")
NOT_PLOTTED = ("train/unlabeled_skipped",)
TITLES = {"train/loss": "training loss", "val/uas": "dev UAS", "val/las": "dev LAS"}

Curves = dict[str, tuple[list[int], list[float]]]  # metric -> (steps, values)


def find_logs(path: str | Path) -> list[tuple[str, Path]]:
    """``(label, metrics.csv)`` for a ``metrics.csv`` file or each one under a directory.

    The label is ``path`` as given, followed by the file's folder when there are several."""
    root = Path(path)
    if root.is_file():
        return [(str(path), root)]
    files = sorted(root.rglob("metrics.csv"), key=lambda f: [_version(part) for part in f.relative_to(root).parts])
    if not files:
        raise DrawingError(f"{path}: no metrics.csv in it or below (train.py writes RUN_DIR/NAME/version_N/metrics.csv)")
    if len(files) == 1:
        return [(str(path), files[0])]
    return [(f"{path}/{f.parent.relative_to(root)}", f) for f in files]


def _version(part: str) -> tuple[str, int]:
    """Sort key of a path part: ``version_10`` after ``version_9``."""
    match = re.fullmatch(r"(.*?)(\d+)", part)
    return (match.group(1), int(match.group(2))) if match else (part, -1)


def read_metrics(path: str | Path) -> Curves:
    """The curves of one Lightning ``metrics.csv``: each metric's logged (step, value) pairs,
    skipping the empty cells of rows that logged other metrics."""
    curves: Curves = {}
    with open(path, newline="", encoding="utf-8") as file:
        for row in csv.DictReader(file):
            step = row.get("step")
            if not step:
                continue
            for name, value in row.items():
                if name in ("epoch", "step") or not value:
                    continue
                try:
                    number = float(value)
                except ValueError:
                    continue
                if math.isfinite(number):
                    steps, values = curves.setdefault(name, ([], []))
                    steps.append(int(float(step)))
                    values.append(number)
    for name, (steps, values) in curves.items():  # in step order, whatever order the rows came in
        order = sorted(range(len(steps)), key=steps.__getitem__)
        curves[name] = ([steps[i] for i in order], [values[i] for i in order])
    return curves


def _wanted(names: set[str]) -> list[str]:
    """The plotted metrics among ``names``, in the order of :data:`METRICS`."""
    ordered = []
    for metric in METRICS:
        if metric.endswith(("-", "/")):  # a prefix: lr-AdamW/pg1, lr-AdamW/pg2, ...; train/likelihood, ...
            below = [n for n in names if n.startswith(metric) and n not in METRICS and n not in NOT_PLOTTED]
            ordered += sorted(n for n in below if metric.endswith("-") or "/" not in n[len(metric):])
        elif metric in names:
            ordered.append(metric)
    return ordered


def _title(metric: str) -> str:
    """A panel's title: ``training loss``, ``likelihood``, ``weight of ge``, ``learning rate (lr-AdamW/pg1)``."""
    if metric in TITLES:
        return TITLES[metric]
    if metric.startswith("lr-"):
        return f"learning rate ({metric})"
    if metric.startswith("train/weight/"):
        return f"weight of {metric.removeprefix('train/weight/')}"
    return metric.removeprefix("train/")


def figure(runs: list[tuple[str, Curves]], columns: int = 4):
    """One panel per metric, one coloured line per run, a shared legend above."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FormatStrFormatter

    metrics = _wanted({name for _, curves in runs for name in curves})
    if not metrics:
        raise DrawingError(f"no metric to plot: the logs hold none of {', '.join(METRICS)}*")
    columns = min(columns, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    fig = new_figure(3.6 * columns, 2.6 * rows + 0.25 * math.ceil(len(runs) / 2), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for ax, metric in zip(axes.flat, metrics):
        for color, (_, curves) in zip(colors, runs):
            if metric in curves:
                steps, values = curves[metric]
                # dev scores are points; a curve of one logged step is one too (a line of one point is invisible)
                marked = metric.startswith("val/") or len(steps) == 1
                ax.plot(steps, values, color=color, linewidth=1.3, marker="o" if marked else None, markersize=3)
        ax.set_title(_title(metric), fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if metric.startswith("lr-"):
            ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))  # no offset text over the title
    for i, ax in enumerate(axes.flat):
        if i >= len(metrics):
            ax.set_axis_off()
        elif i + columns >= len(metrics):  # the lowest panel of its column
            ax.set_xlabel("step", fontsize=9)
            ax.xaxis.set_tick_params(labelbottom=True)
    handles = [Line2D([], [], color=c, linewidth=2, label=label) for c, (label, _) in zip(colors, runs)]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(runs), 2), frameon=False, fontsize=9)
    return fig


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("runs", nargs="+", help="run directories, version_N directories or metrics.csv files")
    cli.add_argument("--output", required=True, help="the figure: .png, .svg or .html")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    count = report_errors(lambda: plot(args.runs, args.output))
    print(f"plotted {count} run(s) -> {args.output}")


def plot(paths: list[str], output: str) -> int:
    """Plot the logs found under ``paths`` (see :func:`find_logs`) to ``output``; returns their count."""
    check_output(output)
    runs = [(label, read_metrics(path)) for run in paths for label, path in find_logs(run)]
    save(figure(runs), output, "training curves: " + ", ".join(label for label, _ in runs))
    return len(runs)


if __name__ == "__main__":
    main()
