"""Shared figure plumbing for ``parser.show``, ``parser.plot`` and the benchmark reports.

Matplotlib (the optional ``viz`` extra) is imported lazily; figures are built without pyplot
and rendered by its Agg and SVG backends, so nothing needs a display or a network. They are
saved by the file's extension.
"""

from __future__ import annotations

import html
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from parser.cli import debugging, run_reporting_errors

FORMATS = (".png", ".svg", ".html")
T = TypeVar("T")


class DrawingError(ValueError):
    """Something the drawing commands cannot draw (too many words, an unknown format, no
    logs, no matplotlib); they report it as one ``error:`` line."""


def report_errors(main: Callable[[], T]) -> T:
    """:func:`parser.cli.run_reporting_errors`, a :class:`DrawingError` being a user error too."""
    try:
        return run_reporting_errors(main)
    except DrawingError as error:
        if debugging():
            raise
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def new_figure(width: float, height: float, layout: str | None = None):
    """A ``matplotlib.figure.Figure`` of ``width`` x ``height`` inches (``layout``: e.g.
    ``"constrained"``), outside pyplot's registry (nothing to close, no display needed); an
    ImportError naming the extra without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError('drawing needs matplotlib: pip install "treeexp[viz]"') from None
    return Figure(figsize=(width, height), layout=layout)


def check_format(path: str | Path) -> str:
    """The lower-case extension of ``path``; DrawingError unless it is .png, .svg or .html."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DrawingError(f"{path}: unknown figure format {suffix or '(none)'!r}, use {', '.join(FORMATS)}")
    return suffix


def check_output(path: str | Path) -> None:
    """Before any work, that ``path`` names a known format and that matplotlib is installed."""
    check_format(path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DrawingError('drawing needs matplotlib: pip install "treeexp[viz]"') from None


def save(figure, path: str | Path, title: str = "treeexp", dpi: int = 120) -> Path:
    """Write ``figure`` as PNG (``dpi`` dots per inch), SVG or a self-contained HTML page (the
    SVG inline), by extension."""
    path = Path(path)
    suffix = check_format(path)
    if suffix == ".png":
        figure.savefig(path, dpi=dpi)
    elif suffix == ".svg":
        figure.savefig(path)
    else:
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
        svg = buffer.getvalue()
        svg = svg[svg.index("<svg") :]  # drop the XML declaration and DOCTYPE: not allowed inline
        path.write_text(_PAGE.format(title=html.escape(title), svg=svg), encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
div.figure {{ overflow-x: auto; }}
</style>
</head>
<body>
<h1 style="font-size: 1.1em">{title}</h1>
<div class="figure">
{svg}
</div>
</body>
</html>
"""
