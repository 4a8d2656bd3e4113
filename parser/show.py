"""Draw a parse: the tree as arcs above the words, beside it the arc marginals as a heat map.

    python -m parser.show CKPT --sentence "The old dog barks ." --output tree.png
    python -m parser.show CKPT --conllu FILE.conllu --index 0 --output tree.html

The format follows the extension: .png, .svg, or .html (a self-contained page, the SVG
inline). With ``--conllu`` the file's own tree, where it has one, is the gold tree: marked
in the heat map, and predicted arcs whose head differs from it are dashed. Non-projective
arcs are drawn in orange (they cross other arcs or the root arrow). From Python:

    from parser.model import Parser
    from parser.show import draw
    parse = Parser.load(CKPT).parse([["The", "old", "dog", "barks", "."]], marginals=True)[0]
    draw(parse, "tree.svg")          # returns the matplotlib Figure (also without a path)
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from parser.drawing import DrawingError, check_output, new_figure, report_errors, save

MAX_WORDS = 120  # beyond this the figure is too large to read; refuse rather than draw
CHAR = 0.085  # inches per tree data unit: about one character of the 10 pt word font
CELL = 0.24  # inches per heat-map cell (0.18 above 40 words, more below 6)
ARC, NONPROJECTIVE, PREDICTED, GOLD = "#2b5c8a", "#d95f02", "#d95f02", "#000000"


def nonprojective(heads: Sequence[int]) -> list[bool]:
    """Per word m, whether its arc ``heads[m-1] -> m`` is non-projective: some word strictly
    between head and dependent does not descend from the head."""
    chains = []  # chains[k-1]: k and its ancestors (0 included when reached)
    for k in range(1, len(heads) + 1):
        chain = {k}
        while k != 0 and len(chain) <= len(heads):  # the bound stops on cycles in malformed input
            k = heads[k - 1]
            chain.add(k)
        chains.append(chain)
    return [any(h not in chains[k - 1] for k in range(min(h, m) + 1, max(h, m))) for m, h in enumerate(heads, 1)]


def _check(words: Sequence[str], heads: Sequence[int], labels: Sequence[str] | None,
           marginals, gold_heads: Sequence[int] | None) -> np.ndarray | None:
    """Validate the inputs of :func:`figure`; the marginals as a float array or None."""
    n = len(words)
    if not 1 <= n <= MAX_WORDS:
        raise DrawingError(f"can draw sentences of 1 to {MAX_WORDS} words, this one has {n}")
    for name, values in (("heads", heads), ("labels", labels), ("gold_heads", gold_heads)):
        if values is not None and len(values) != n:
            raise DrawingError(f"{len(values)} {name} for {n} words")
    for name, values in (("heads", heads), ("gold_heads", gold_heads)):
        if values is not None and not all(0 <= h <= n for h in values):
            raise DrawingError(f"{name} must lie in 0..{n}: {list(values)}")
    if marginals is None:
        return None
    if hasattr(marginals, "detach"):
        marginals = marginals.detach().cpu().numpy()
    marginals = np.asarray(marginals, dtype=float)
    if marginals.shape != (n + 1, n + 1):
        raise DrawingError(f"marginals must be ({n + 1}, {n + 1}) for {n} words, not {marginals.shape}")
    return marginals


def _positions(words: Sequence[str]) -> np.ndarray:
    """x of each word in characters: neighbours apart by their half-widths plus room for a label."""
    x = [0.0]
    for left, right in pairwise(words):
        x.append(x[-1] + max((len(left) + len(right)) / 2 + 2.5, 8.0))
    return np.array(x)


def _height(distance: float) -> float:
    """Arc height for ends ``distance`` apart: grows slower than the span, faster than its
    square root, so nested arcs never touch and crossing arcs visibly cross."""
    return 1.8 * distance**0.65


def _starts(x: np.ndarray, heads: Sequence[int]) -> dict[int, float]:
    """x where each word's arc leaves its head: a head's arcs to one side fan out from its
    centre (kept for its incoming arrow), the longest innermost, so that they stay nested."""
    starts = {}
    for h in set(heads) - {0}:
        for side in (-1, 1):
            children = sorted((m for m, head in enumerate(heads, 1) if head == h and (m - h) * side > 0),
                              key=lambda m: -abs(m - h))
            neighbour = h - 1 + side  # index of the next word on this side
            room = 0.3 * abs(x[neighbour] - x[h - 1]) if 0 <= neighbour < len(x) else 2.4
            step = min(0.5, (room - 0.6) / max(len(children) - 1, 1))
            for k, m in enumerate(children):
                starts[m] = x[h - 1] + side * (0.6 + step * k)
    return starts


def draw_tree(ax, words: Sequence[str], heads: Sequence[int], labels: Sequence[str] | None = None,
              gold_heads: Sequence[int] | None = None) -> None:
    """Draw the tree on ``ax`` (data units of :data:`CHAR` inches): words on a line, one arc
    per word from its head, arrowhead at the dependent, label at the top, a root arrow."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path as MplPath

    x = _positions(words)
    crossing = nonprojective(heads)
    starts = _starts(x, heads)
    top = max([_height(abs(x[h - 1] - x[m - 1])) for m, h in enumerate(heads, 1) if h] + [2.0]) + 3.0
    for m, h in enumerate(heads, 1):
        color = NONPROJECTIVE if crossing[m - 1] else ARC
        style = "--" if gold_heads is not None and gold_heads[m - 1] != h else "-"
        label = labels[m - 1] if labels is not None else None
        if h == 0:  # the root arrow comes down from above every arc
            start, end = (x[m - 1], top), (x[m - 1], 0.3)
            vertices, apex = [start, end], (x[m - 1], top + 0.4)
        else:
            centre, radius = (starts[m] + x[m - 1]) / 2, (x[m - 1] - starts[m]) / 2
            height = _height(abs(x[m - 1] - x[h - 1]))
            t = np.linspace(np.pi, 0, 48 + int(4 * height))  # smooth where long arcs are steep
            vertices = np.column_stack([centre + radius * np.cos(t), 0.3 + height * np.sin(t)])
            apex = (centre, 0.3 + height)
        ax.add_patch(FancyArrowPatch(path=MplPath(vertices), arrowstyle="-|>,head_length=5,head_width=2.5",
                                     color=color, linestyle=style, linewidth=1.2, shrinkA=0, shrinkB=0))
        if label:
            ax.text(*apex, label, ha="center", va="bottom" if h == 0 else "center", fontsize=8, color=color,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    for i, (position, word) in enumerate(zip(x, words), 1):
        ax.text(position, -0.6, word, ha="center", va="top", fontsize=10)
        ax.text(position, -2.9, str(i), ha="center", va="top", fontsize=7, color="0.45")
    ax.set_xlim(x[0] - 6, x[-1] + 6)
    ax.set_ylim(-4.6, top + 2.6)
    ax.set_axis_off()
    legend = []
    if any(crossing):
        legend.append(Line2D([], [], color=NONPROJECTIVE, label="non-projective arc"))
    if gold_heads is not None and list(gold_heads) != list(heads):
        legend.append(Line2D([], [], color=ARC, linestyle="--", label="head differs from gold"))
    if legend:
        ax.legend(handles=legend, loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False, fontsize=8,
                  borderaxespad=0.2)


def _tick(word: str, index: int) -> str:
    """A heat-map tick label: the word, shortened past 14 characters, and its index."""
    return f"{word if len(word) <= 14 else word[:13] + '…'} {index}"


def draw_marginals(ax, marginals: np.ndarray, words: Sequence[str], heads: Sequence[int] | None = None,
                   gold_heads: Sequence[int] | None = None, colorbar_ax=None) -> None:
    """Heat map of ``marginals[h, m]`` (``(n+1, n+1)``): heads as rows (ROOT first), dependents
    as columns; the predicted tree as squares, the gold tree as crosses."""
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    n = len(words)
    grid = marginals[:, 1:].copy()
    grid[np.arange(1, n + 1), np.arange(n)] = np.nan  # h == m is never an arc
    cmap = colormaps["Blues"].with_extremes(bad="0.88")
    image = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal")
    ax.set_xticks(range(n), [_tick(w, i) for i, w in enumerate(words, 1)], rotation=90, fontsize=8)
    ax.set_yticks(range(n + 1), ["ROOT 0"] + [_tick(w, i) for i, w in enumerate(words, 1)], fontsize=8)
    ax.set_xlabel("dependent", fontsize=9)
    ax.set_ylabel("head", fontsize=9)
    ax.tick_params(length=0)
    cell = ax.get_window_extent().width / n / ax.figure.dpi * 72  # points per cell
    legend = []
    if heads is not None:
        ax.scatter(range(n), heads, marker="s", s=(0.82 * cell) ** 2, facecolors="none", edgecolors=PREDICTED,
                   linewidths=1.4)
        legend.append(Line2D([], [], marker="s", linestyle="", markerfacecolor="none", color=PREDICTED,
                             label="predicted tree"))
    if gold_heads is not None:  # white-edged, to show on dark cells too
        ax.scatter(range(n), gold_heads, marker="X", s=(0.5 * cell) ** 2, color=GOLD, edgecolors="white",
                   linewidths=0.6)
        legend.append(Line2D([], [], marker="X", linestyle="", color=GOLD, markeredgecolor="white", label="gold tree"))
    if legend:
        ax.legend(handles=legend, loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False, fontsize=8,
                  borderaxespad=0.2, handletextpad=0.2)
    if colorbar_ax is not None:
        bar = ax.figure.colorbar(image, cax=colorbar_ax)
        bar.set_label("P(head → dependent)", fontsize=9)
        bar.ax.tick_params(labelsize=8)


def figure(words: Sequence[str], heads: Sequence[int], labels: Sequence[str] | None = None, marginals=None,
           gold_heads: Sequence[int] | None = None, title: str | None = None):
    """The figure of one parse: the tree and, given ``marginals`` (``(n+1, n+1)`` array or
    tensor, ``marginals[h, m]``), the heat map beside it. ``heads[m-1]`` is word m's head
    (0: root). Sizes grow with the sentence; DrawingError above :data:`MAX_WORDS` words."""
    marginals = _check(words, heads, labels, marginals, gold_heads)
    n = len(words)
    x = _positions(words)
    tree_w = (x[-1] - x[0] + 12) * CHAR
    longest = max([_height(abs(x[h - 1] - x[m - 1])) for m, h in enumerate(heads, 1) if h] + [2.0])
    tree_h = (longest + 3.0 + 7.2) * CHAR  # the ylim of draw_tree
    pad, top, bottom = 0.25, 0.75, 0.25  # top: the title and the legends
    width = tree_w + 2 * pad
    heat_h = 0.0
    if marginals is not None:
        cell = max(CELL if n <= 40 else 0.18, 1.5 / (n + 1))  # at least 1.5 inches: the colour bar's label
        label_w = 0.06 * max(len(_tick(w, n)) for w in ["ROOT"] + list(words)) + 0.4
        heat_w, heat_h = cell * n, cell * (n + 1)
        heat_left = width + label_w
        width = heat_left + max(heat_w + 1.0, 2.6)  # the colour bar, and the legend above
        bottom = label_w
    lines = textwrap.wrap(title or "", max(20, int((width - 2 * pad) / 0.09)))  # 11 pt characters
    height = bottom + max(tree_h, heat_h) + top + 0.2 * max(len(lines) - 1, 0)
    fig = new_figure(width, height)
    tree_ax = fig.add_axes([pad / width, bottom / height, tree_w / width, tree_h / height])
    draw_tree(tree_ax, words, heads, labels, gold_heads)
    if marginals is not None:
        heat_ax = fig.add_axes([heat_left / width, bottom / height, heat_w / width, heat_h / height])
        bar_ax = fig.add_axes([(heat_left + heat_w + 0.15) / width, bottom / height, 0.12 / width, heat_h / height])
        draw_marginals(heat_ax, marginals, words, heads, gold_heads, bar_ax)
    if lines:
        fig.text(pad / width, 1 - 0.12 / height, "\n".join(lines), ha="left", va="top", fontsize=11)
    return fig


def draw(parse, path: str | Path | None = None, gold_heads: Sequence[int] | None = None, title: str | None = None):
    """Draw a :class:`parser.decoding.parsing.Parse` (or anything with ``words``, ``heads``, ``labels``,
    ``marginals``); saved to ``path`` by its extension when given. Returns the Figure."""
    fig = figure(parse.words, parse.heads, parse.labels, parse.marginals, gold_heads, title)
    if path is not None:
        save(fig, path, title or " ".join(parse.words))
    return fig


def _summary(heads: Sequence[int], labels: Sequence[str], gold_heads: Sequence[int], gold_labels: Sequence[str]) -> str:
    """``UAS 7/9, LAS 6/9 against gold``: the parse scored against the gold tree."""
    right = [h == g for h, g in zip(heads, gold_heads)]
    universal = [l.split(":")[0] == g.split(":")[0] for l, g in zip(labels, gold_labels)]  # as the CoNLL 2018 scorer
    labeled = sum(r and u for r, u in zip(right, universal))
    return f"UAS {sum(right)}/{len(heads)}, LAS {labeled}/{len(heads)} against gold"


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("checkpoint", help="a .ckpt file or a Parser.save directory")
    source = cli.add_mutually_exclusive_group(required=True)
    source.add_argument("--sentence", help="one tokenised sentence, words separated by spaces")
    source.add_argument("--conllu", help="a CoNLL-U file; draws sentence --index, its tree as gold")
    cli.add_argument("--index", type=int, default=0, help="with --conllu: which sentence, counting from 0")
    cli.add_argument("--output", required=True, help="the figure: .png, .svg or .html")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    words = report_errors(lambda: show(args.checkpoint, args.output, args.sentence, args.conllu, args.index))
    print(f"drew {len(words)} words -> {args.output}")


def show(checkpoint: str, output: str, sentence: str | None = None, conllu: str | None = None, index: int = 0) -> list[str]:
    """Parse ``sentence`` (words separated by spaces), or sentence ``index`` of the file
    ``conllu`` with its tree as gold, and draw it to ``output``; returns the words."""
    # imported here: drawing alone needs neither transformers nor Lightning
    from parser.model import Parser

    check_output(output)
    gold = None
    if sentence is not None:
        words, title = sentence.split(), sentence
    else:
        words, gold, title = _conllu_sentence(conllu, index)
    if not 1 <= len(words) <= MAX_WORDS:  # before loading the model
        raise DrawingError(f"can draw sentences of 1 to {MAX_WORDS} words, this one has {len(words)}")
    parse = Parser.load(checkpoint).parse([words], marginals=True)[0]
    if gold is not None:
        title += "  (" + _summary(parse.heads, parse.labels, *gold) + ")"
    draw(parse, output, None if gold is None else gold[0], title)
    return words


def _conllu_sentence(path: str, index: int) -> tuple[list[str], tuple[list[int], list[str]] | None, str]:
    """Words, gold (heads, labels) if every word has a HEAD, and a title for sentence ``index``."""
    from parser.data.sentences import read_conllu

    sentences = read_conllu(path, trees=False)
    if not 0 <= index < len(sentences):
        raise DrawingError(f"{path} has {len(sentences)} sentences: --index must lie in 0..{len(sentences) - 1}")
    sentence = sentences[index]
    tokens = [t for t in sentence.tokenlist if isinstance(t["id"], int)]
    heads = [t["head"] for t in tokens]
    gold = None if None in heads else (heads, [t["deprel"] for t in tokens])
    sent_id = sentence.tokenlist.metadata.get("sent_id")
    return sentence.words, gold, f"{sent_id or sentence.source}: {' '.join(sentence.words)}"


if __name__ == "__main__":
    main()
