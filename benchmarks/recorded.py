"""The recorded rows read as several tables cite them: the low-resource grid's
(``docs/results/low_resource.jsonl``) by treebank and cell, the supervised runs a recipe is
measured against, the full-data ceiling, each language's own 100-tree numbers
(:func:`languages`), and each transfer target's numbers beside them (:func:`targets`: the
README's headline, ``benchmarks.headline``; the transfer summary, ``benchmarks.transfer``)."""

from __future__ import annotations

import shlex
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (LOW_RESOURCE, NEW_LANGUAGE, SMALL_TREEBANKS, TARGETS, TRANSFER, UDPIPE2, read_rows,
                               whole_file_run)

ALL = "all"  # --sizes all: every training sentence labeled (a full-data row, the ceiling)
# Full-data test LAS of a treebank's supervised recipe and where it was measured: the ceiling
# of the report when the results hold no full-data row (``"labeled": "all"``) of the treebank.
SMALL_TREEBANK_FULL_DATA = ("configs/small_treebank.yaml on all of train, 15 epochs, MST, docs/notebook/experiments.md "
                            "section 4, \"The full small treebanks beside UDPipe 2\"")
FULL_DATA_LAS = {
    "UD_English-EWT": (89.75, "configs/likelihood.yaml on all of train, 7 epochs, docs/notebook/experiments.md section 1"),
    "UD_Wolof-WTB": (76.11, "configs/small_treebank.yaml on all of train, 15 epochs, MST, docs/notebook/experiments.md section 3"),
    "UD_Greek-GDT": (90.00, SMALL_TREEBANK_FULL_DATA),
    "UD_Uyghur-UDT": (66.96, SMALL_TREEBANK_FULL_DATA),
    "UD_Vietnamese-VTB": (64.51, SMALL_TREEBANK_FULL_DATA),
}
DEFAULT_TREEBANK = "UD_English-EWT"  # the treebank of rows that do not name theirs (the first rows)
Cells = dict[tuple[int | str, str, str], list[dict]]  # (labeled size, objective, variant) -> its runs
# The headline: these languages' recipe rows at SIZE trees
LANGUAGES = ("UD_Wolof-WTB", "UD_Vietnamese-VTB", "UD_Greek-GDT", "UD_Uyghur-UDT", "UD_English-EWT")
SIZE = 100  # labeled trees
# the stages of a transfer row, in the tables' order (teachers, round1: new_language.yaml's; round2: both
# pipelines'; better_student: transfer.yaml's final choice)
STAGES = ("zero-shot", "target_only", "finetuned", "start", "student", "student_ge", "full",
          "teachers", "round1", "round2", "better_student")
# the recipe's rows: a self_distill variant that starts with ROUND and holds every one of WITH
ROUND = "round 2 teachers of seeds 1 2 3 "
WITH = ("--model.encoder_options.word_dropout 0.15",)
WITHOUT = ("max_steps",)  # the grid's 400 steps, as the pipeline runs it


def grid_cells(results: Path) -> dict[str, Cells]:
    """The runs of ``results`` by treebank (EWT first), then by (labeled size, objective, variant)."""
    runs = read_rows(results)
    treebanks: dict[str, Cells] = {}
    for run in runs:
        cells = treebanks.setdefault(run.get("treebank", DEFAULT_TREEBANK), {})
        cells.setdefault((run["labeled"], run["objective"], run.get("variant", "")), []).append(run)
    return dict(sorted(treebanks.items(), key=lambda item: (item[0] != DEFAULT_TREEBANK, item[0])))


def baseline(cells: Cells, size: int | str, recipe: str = "") -> tuple[str, list[dict]]:
    """The supervised-only runs at ``size`` that the variant ``recipe`` is measured against:
    the strongest (highest mean LAS) supervised variant of its settings, one whose overrides
    are all among the recipe's. Without a recipe, or where none is contained in it, the
    supervised variant with the fewest overrides (the shipped config as it is when there is
    one; on a treebank that needs another encoder, that override alone), and of those the one
    with the most seeds (a one-seed trial is not it)."""
    variants = [variant for k, objective, variant in cells if k == size and objective == "supervised"]
    if not variants:
        return "", []
    options = Counter(shlex.split(recipe))
    same = [v for v in variants if not Counter(shlex.split(v)) - options]
    if recipe and same:
        variant = max(same, key=lambda v: (statistics.mean(run["las"] for run in cells[(size, "supervised", v)]),
                                           len(cells[(size, "supervised", v)])))
    else:
        variant = min(variants, key=lambda v: (len(shlex.split(v)), -len(cells[(size, "supervised", v)]), v))
    return variant, cells[(size, "supervised", variant)]


def ceiling(cells: Cells, treebank: str) -> tuple[float | None, str]:
    """The full-data test LAS the report measures gaps to on ``treebank``, and where it comes
    from: the mean of its full-data supervised rows (``"labeled": "all"``) if there are any,
    else ``FULL_DATA_LAS``."""
    full = cells.get((ALL, "supervised", ""), [])
    if full:
        return statistics.mean(run["las"] for run in full), f"the full-data supervised rows of the results ({len(full)} seeds)"
    if treebank in FULL_DATA_LAS:
        las, source = FULL_DATA_LAS[treebank]
        return las, f"{source}; the results hold no full-data row of the shipped config"
    return None, f"no full-data row of {treebank} in the results and no known full-data LAS for it"


@dataclass
class Language:
    """One treebank's headline numbers (test LAS); ``supervised`` and ``recipe`` per seed."""

    treebank: str
    supervised: list[float]
    recipe: list[float]
    full: float | None
    full_source: str
    udpipe: float | None

    @property
    def name(self) -> str:
        return self.treebank.removeprefix("UD_")


def recipe_variant(variants: list[str]) -> str | None:
    """The recipe's variant among ``variants`` (the one with the most words when several match)."""
    matching = [v for v in variants if v.startswith(ROUND) and all(w in v for w in WITH)
                and not any(w in v for w in WITHOUT)]
    return max(matching, key=len, default=None)


def languages(results: Path = LOW_RESOURCE) -> list[Language]:
    """The headline numbers of every treebank of ``LANGUAGES`` whose rows hold the recipe."""
    found = []
    for treebank, cells in grid_cells(results).items():
        if treebank not in LANGUAGES:
            continue
        variant = recipe_variant([v for k, objective, v in cells if k == SIZE and objective == "self_distill"])
        if variant is None:
            continue
        _, supervised = baseline(cells, SIZE, variant)
        full, source = ceiling(cells, treebank)
        found.append(Language(treebank, [run["las"] for run in supervised],
                              [run["las"] for run in cells[(SIZE, "self_distill", variant)]],
                              full, source, UDPIPE2.get(treebank, (None, None))[1]))
    return sorted(found, key=lambda language: LANGUAGES.index(language.treebank))


@dataclass
class Target:
    """A target's test LAS, a list of seeds each (empty: not measured): of its transfer stages
    (``stages``, from the rows), of its own 100 trees (supervised parser and best recipe: see
    ``targets``), its whole training file (see ``targets``) and UDPipe 2 (published)."""

    treebank: str
    stages: dict[str, list[float]]
    supervised: list[float]
    best_own: list[float]
    full_own: list[float]
    udpipe: list[float]

    @property
    def name(self) -> str:
        return self.treebank.removeprefix("UD_")


def targets(results: Path = TRANSFER, low_resource: Path = LOW_RESOURCE, new_language: Path = NEW_LANGUAGE,
            small_treebanks: Path = SMALL_TREEBANKS) -> list[Target]:
    """Every target of ``TARGETS`` with rows in ``results``. Its own 100 trees: the grid's rows
    (``low_resource``); where the grid has none, ``new_language.yaml``'s (``new_language``: its
    teachers the supervised parser, its second round the best recipe); where neither has, the
    transfer pipeline's ``target_only`` run stands for the supervised parser. Its own whole
    file: the grid's full-data parser, else ``benchmarks.common.whole_file_run`` of ``small_treebanks``."""
    # the runs chosen on every dev tree (the recipe's first protocol); those chosen on the first K dev trees
    # (``dev_trees``, the honest protocol: as many as labeled trees) are the report's tables of their own
    rows = [row for row in read_rows(results) if not row.get("dev_trees")]
    alone, whole = read_rows(new_language), read_rows(small_treebanks)
    grid = {language.treebank: language for language in languages(low_resource)}

    def test_las(source: list[dict], treebank: str, stage: str) -> list[float]:
        return [r["test_las"] for r in source if r["treebank"] == treebank and r["stage"] == stage]

    found = []
    for treebank in TARGETS:
        stages = {stage: test_las(rows, treebank, stage) for stage in STAGES}
        if not any(stages.values()):
            continue
        own = grid.get(treebank)
        supervised = own.supervised if own else test_las(alone, treebank, "teachers") or stages["target_only"]
        recipe = own.recipe if own else test_las(alone, treebank, "round2")
        full = own.full if own else (whole_file_run(whole, treebank) or {}).get("test_las")
        found.append(Target(treebank, stages, supervised, recipe, [] if full is None else [full],
                            [UDPIPE2[treebank][1]] if treebank in UDPIPE2 else []))
    return found
