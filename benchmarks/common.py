"""What the benchmark drivers share: a result row's provenance, a results file's rows (read and appended) and a
run folder's name, the recorded rows' files and what several tables cite (the transfer targets, UDPipe 2's
published scores, the whole-file run, grouped bars), a test file's raw text, the official CoNLL 2018 scorer and a
timed product command (the tokenizer and raw-text benchmarks), timing helpers (interleaved repeats, peak memory), then the
tables' formats (markdown tables, mean ± sd).

The machines these run on are shared, so every comparison runs its contenders
round-robin over the same inputs (each repeat times every contender once, in a rotating
order) and reports medians and ratios taken from that same run. Training runs go through
:mod:`parser.runs` (``fit``), which records each run's own provenance and costs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from parser.data.sentences import read_conllu
from parser.drawing import new_figure, save
from parser.fetch import default_root
from parser.runs import RECIPES, REPOSITORY, provenance_of, shell_line
from parser.training.precision import processor

ROOT = REPOSITORY
ROWS = ROOT / "docs" / "results"  # the recorded rows: a JSON-lines file per benchmark
LOW_RESOURCE, SMALL_TREEBANKS, TRANSFER, NEW_LANGUAGE = (
    ROWS / f"{name}.jsonl" for name in ("low_resource", "small_treebanks", "transfer", "new_language"))
TARGETS = ("UD_Wolof-WTB", "UD_Vietnamese-VTB", "UD_Greek-GDT", "UD_Uyghur-UDT", "UD_Turkish-IMST", "UD_Welsh-CCG")  # the transfer targets
# UDPipe 2's published test (UAS, LAS) with gold tokenisation, UD 2.17 models (251125), the
# release of the shared snapshots (ufal.mff.cuni.cz/udpipe/2/models, "Model Performance")
UDPIPE2 = {
    "UD_English-EWT": (94.09, 92.36),
    "UD_Wolof-WTB": (85.75, 80.16),
    "UD_Greek-GDT": (93.98, 92.16),
    "UD_Uyghur-UDT": (77.54, 66.62),
    "UD_Vietnamese-VTB": (75.84, 65.51),
    "UD_Turkish-IMST": (81.39, 73.61),
    "UD_Welsh-CCG": (88.45, 82.61),
}
MAX_VARIANT_CHARS = 120  # a run folder's name keeps this much of its overrides, then a digest of all of them


def provenance(arguments: Sequence[str]) -> dict:
    """What a result row records of the command ``python ARGUMENTS`` (``-m benchmarks.x ...``):
    :func:`parser.runs.provenance_of` its shell line (commit, command, date, machine)."""
    return provenance_of(shell_line(["python", *arguments]))


def append_row(results: Path, row: dict) -> None:
    """Append ``row`` to the JSON-lines file ``results`` (its folder made where missing)."""
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a", encoding="utf-8") as lines:
        lines.write(json.dumps(row) + "\n")


def read_rows(results: Path) -> list[dict]:
    """The rows of a JSON-lines results file, in its order ([] where there is no such file)."""
    if not results.is_file():
        return []
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]


def portable(value, places: dict[str, str] | None = None):
    """``value`` (a row, a list or a string) with every absolute path of ``places`` (``{"/x/runs":
    "runs/peers"}``), this repository's, ``$UD_DIR``'s and this interpreter's written as its name
    there (``""`` for the repository, ``$UD_DIR``, ``python``), the longest first: a row's commands
    then name no machine's own path and run as they are on another."""
    names = {**(places or {}), sys.executable: "python", f"{ROOT}/": ""}
    if os.environ.get("UD_DIR"):
        names[str(Path(os.environ["UD_DIR"]).resolve())] = "$UD_DIR"

    def rewrite(item):
        if isinstance(item, dict):
            return {key: rewrite(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [rewrite(inner) for inner in item]
        if isinstance(item, str):
            for path in sorted(names, key=len, reverse=True):
                item = item.replace(path, names[path])
        return item
    return rewrite(value)


def raw_text(gold: Path) -> str:
    """``gold``'s raw text: its ``# text`` lines, a paragraph's joined by a space, paragraphs by a blank line."""
    paragraphs: list[list[str]] = []
    for sentence in read_conllu(gold, trees=False):
        if "newpar" in sentence.tokenlist.metadata or not paragraphs:
            paragraphs.append([])
        paragraphs[-1].append(sentence.tokenlist.metadata["text"])
    return "\n\n".join(" ".join(paragraph) for paragraph in paragraphs) + "\n"


def official(gold: Path, system: Path, names: Sequence[str]) -> dict[str, float]:
    """The CoNLL 2018 scorer's F1 (percent) of ``names`` ("Tokens", "LAS", ...), lower-cased
    (stanza 1.4.0's copy of conll18_ud_eval.py)."""
    from stanza.utils import conll18_ud_eval as scorer

    scores = scorer.evaluate(scorer.load_conllu_file(str(gold)), scorer.load_conllu_file(str(system)))
    return {name.lower(): round(100 * scores[name].f1, 2) for name in names}


def product(*arguments: str, log: Path, module: str = "parser.main") -> float:
    """Run ``python -m MODULE ARGUMENTS`` (the product's commands; ``benchmarks.peer_drivers`` for
    UDPipe 1, whose ``ufal.udpipe`` this environment has) on one thread, its output in ``log``; its seconds."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as output:
        subprocess.run([sys.executable, "-m", module, *arguments], stdout=output, stderr=subprocess.STDOUT,
                       check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def whole_file_run(rows: list[dict], treebank: str) -> dict | None:
    """The recipe on ``treebank``'s whole training file as the tables cite it: among the rows of
    ``configs/small_treebank.yaml`` with its own encoder, no ablation and MST decoding, the run
    with the best dev LAS (None: none recorded)."""
    runs = [row for row in rows if row["treebank"] == treebank and row["recipe"] == f"configs/{RECIPES['small_treebank']}" and not row.get("ablation")
            and row["encoder"] == "multilingual-e5-small" and row["decoder"] == "mst"]
    return max(runs, key=lambda row: row["dev_las"], default=None)


def grouped_bars(names: list[str], series: list[tuple[str, str, list]], output: Path) -> Path:
    """A group of bars per name, a bar per series ``(label, color, values)``, each value a list
    of seeds (their mean drawn, the seeds as dots), one number or None (no bar); its value above
    each bar. 8 x 3.4 inches at 100 dpi: 800 pixels wide, the README's width."""
    fig = new_figure(8, 3.4, layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(series)
    for i, (label, color, values) in enumerate(series):
        offset, named = (i - (len(series) - 1) / 2) * width, False
        for x, value in enumerate(values):
            seeds = value if isinstance(value, list) else None
            height = value if seeds is None else statistics.mean(seeds) if seeds else None
            if height is None:
                continue
            ax.bar(x + offset, height, width * 0.92, color=color, edgecolor="0.3", linewidth=0.5,
                   label=None if named else label)
            named = True
            if seeds and len(seeds) > 1:
                ax.scatter([x + offset] * len(seeds), seeds, s=6, color="black", zorder=3, linewidths=0)
            ax.annotate(f"{height:.1f}", (x + offset, max(seeds or [height])), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7.5 if len(series) < 6 else 6,
                        rotation=0 if len(series) < 6 else 90)
    ax.set_xticks(range(len(names)), names, fontsize=9)
    ax.set_ylabel("test LAS", fontsize=9)
    ax.set_ylim(0, 100)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    rows = (len(series) + 3) // 4  # legend rows of at most 4 entries above the axes
    ax.legend(fontsize=8, ncols=min(len(series), 4), loc="upper center", bbox_to_anchor=(0.5, 1.06 + 0.07 * rows),
              frameon=False)
    output.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, output, dpi=100)


def add_root_option(cli: argparse.ArgumentParser) -> None:
    """``--root DIR``: the folder of UD treebanks, as every ``treeexp`` command spells it (default
    ``$UD_DIR``, else ``data/ud``); ``--data-root``, ``--ud-root`` and ``--ud``, older commands' spellings, still read."""
    cli.add_argument("--root", type=Path, default=default_root(), help="the folder of UD treebanks (default: $UD_DIR, else data/ud)")
    cli.add_argument("--data-root", "--ud-root", "--ud", dest="root", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def folder_name(overrides: Sequence[str]) -> str:
    """A run folder's name for ``overrides`` (written as a shell line): its letters, digits,
    dots and underscores (the rest as ``_``), cut to ``MAX_VARIANT_CHARS`` with a digest of all
    of it when longer (a folder name has at most 255 bytes)."""
    line = shlex.join(overrides)
    name = "".join(c if c.isalnum() or c in "._" else "_" for c in line)
    if len(name) > MAX_VARIANT_CHARS:
        name = f"{name[:MAX_VARIANT_CHARS - 11]}_{hashlib.sha1(line.encode()).hexdigest()[:10]}"
    return name


def setup(threads: int = 1, seed: int = 0) -> None:
    """Fix the intra-op thread count (1 by default: on shared cores OpenMP's spinning threads
    make small batched LAPACK calls tens of times slower) and seed the global RNG."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)


def machine() -> str:
    """One line: the processor (:func:`parser.training.precision.processor`), the GPU if any,
    torch version, threads, date."""
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{processor()}{gpu}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), {datetime.date.today().isoformat()}"


def wait_for_device() -> None:
    """Block until queued CUDA work is done (a no-op on CPU), so a timer measures the work."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(function: Callable[[], object]) -> float:
    """Wall seconds of one call of ``function``, the GPU work it queued included."""
    wait_for_device()
    start = time.perf_counter()
    function()
    wait_for_device()
    return time.perf_counter() - start


def interleaved(contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each contender, ``repeats`` times, round-robin (:func:`interleaved_chunks`,
    the whole call one piece): repeat r runs the contenders in the order rotated by r, so none is
    always first (caches, frequency); ``warmup`` untimed rounds come first."""
    return interleaved_chunks({name: lambda _, call=call: call() for name, call in contenders.items()}, 1, repeats, warmup)


def interleaved_chunks(contenders: dict[str, Callable[[int], object]], chunks: int, repeats: int,
                       warmup: int = 1) -> dict[str, list[float]]:
    """Like :func:`interleaved`, but each contender works through ``chunks`` pieces of the
    workload (``contender(i)`` does piece i) and the contenders alternate piece by piece,
    so load changes on a shared machine hit all of them alike. Returns, per contender, the
    total seconds of each repeat (all pieces)."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + repeats):
        total = dict.fromkeys(names, 0.0)
        for i in range(chunks):
            shift = (r + i) % len(names)
            for name in names[shift:] + names[:shift]:
                total[name] += seconds(lambda: contenders[name](i))
        if r >= warmup:
            for name in names:
                times[name].append(total[name])
    return times


def fresh_process(module: str, arguments: Sequence[str]) -> dict:
    """What ``python -m MODULE ARGUMENTS`` prints as JSON on its last line, run from the repository
    in a fresh process (whose memory is its own)."""
    output = subprocess.run([sys.executable, "-m", module, *arguments], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def peak_rss_mib() -> int:
    """This process's peak resident set so far, in MiB (``ru_maxrss`` counts KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def peak_memory(function: Callable[[], object], device: str | torch.device = "cpu") -> int:
    """Peak bytes allocated by torch on ``device`` during one call, above what was live
    before it: CUDA's allocator statistics, or on CPU the torch profiler's memory events
    replayed in time order."""
    if torch.device(device).type == "cuda":
        wait_for_device()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        function()
        wait_for_device()
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        function()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def fmt_mib(n: float) -> str:
    """``n`` bytes in MiB, the one unit of memory in every output."""
    return f"{n / 2**20:.2f} MiB"


def markdown_table(header: list[str], rows: list[list], align: str = "") -> str:
    """A markdown table; ``align`` has a letter per column, ``l`` (the default) or ``r`` (right-aligned)."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if side == "r" else "---" for side in align.ljust(len(header), "l")) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_sd(values: Sequence[float], digits: int = 2, empty: str = "", single: str = "") -> str:
    """``mean ± sd`` of ``values`` to ``digits`` places; ``single`` after the mean of one value, ``empty`` for none."""
    if not values:
        return empty
    mean = f"{statistics.mean(values):.{digits}f}"
    return mean + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else single)
