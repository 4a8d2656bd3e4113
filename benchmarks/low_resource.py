"""Low-resource UD experiment: supervised-only vs + entropy vs + GE vs + KL distillation.

Each cell trains a shipped recipe (``OBJECTIVES``: a row's objective -> its name in
``parser.runs.RECIPES``) with K labeled sentences of the training file (the rest of it
unlabeled), parses the test file with the best checkpoint (``parser.predict``) and scores it
with ``parser.evaluate``. A cell is a stage of a pipeline (``parser.pipeline``: one
``train.py fit`` per seed, reused when finished, resumed when stopped); it adds only its seed,
K, the treebank and, for kl, the teacher, then ``--train-args`` (and, for the cells that learn
from a teacher, ``--student-args``), and trains in ``--output``/TREEBANK/STAGE/seedS. The
self-training rounds are a shipped pipeline, ``configs/pipelines/self_training.yaml`` (with
``--committee``: ``self_training_committee.yaml``), run up to the round with the row's
objective and the cell's settings (:func:`self_training`). One JSON line per run goes to
``--results`` (scores, the exact command, the commit); ``--report`` prints the markdown table
(mean and spread over seeds, share of the supervised-to-full-data gap) from that file and draws
it to ``--figure`` (test LAS by recipe and labeled size, every seed a point).

    python -m benchmarks.low_resource --sizes 100 --seeds 1 2 3 --teacher runs/likelihood/version_0/checkpoints/best.ckpt
    python -m benchmarks.low_resource --report
    python -m benchmarks.low_resource --report --results docs/results/low_resource.jsonl --figure docs/figures/low_resource.png

``--partial-arcs F`` (supervised only): the training file of a cell is its first K sentences
whole, then every other sentence with a random share F of its arcs kept (HEAD and DEPREL
``_`` elsewhere), written under the cell's folder and read with ``--data.partial true``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from benchmarks.common import add_root_option, append_row, folder_name, markdown_table, mean_sd, read_rows
from benchmarks.recorded import ALL, DEFAULT_TREEBANK, Cells, baseline, ceiling, grid_cells
from parser.data.datamodule import DependencyDataModule, treebank_file
from parser.data.partial import write_partial_train
from parser.drawing import new_figure, save
from parser.evaluate import score_checkpoint
from parser.data.sentences import records
from parser.pipeline import Pipeline, Stage, TeacherRuns, read_pipeline, run_folder
from parser.pipeline import run as run_pipeline
from parser.runs import RECIPES, Run, finished, recipe
from parser.training.terms import trains_tagger

# objective of a row -> the recipe its run trains (a name of parser.runs.RECIPES)
OBJECTIVES = {"supervised": "likelihood_low_resource", "entropy": "entropy", "ge": "ge", "kl": "kl",
              "self_distill": "kl", "self_sample": "sample_distill", "self_ge": "ge_teacher",
              "cross_treebank": "kl", "combined": "combined"}
# self_distill: KL from a teacher trained on the same K sentences (the supervised cell of the
# same size and seed), then --rounds times with the last student as the next teacher; its
# rows name the round as their variant ("round 1", "round 2"), and use no extra labeled data.
# self_sample: the same rounds, the student trained on trees sampled from the teacher;
# self_ge: GE whose targets are that teacher's expected rates on each unlabeled batch.
# --ensemble-seeds S...: round 1's teacher is instead the ensemble of the supervised cells of
# those seeds (the mean of their scores); its rounds' rows say "teachers of seeds S...". With
# --committee every later round learns from the ensemble of the previous round's students of
# those seeds too ("round 2 committee of seeds S...", stages c1_2_3 beside round 1's e1_2_3).
SELF_TRAINING = ("self_distill", "self_sample", "self_ge")
CHAINS = {False: "self_training", True: "self_training_committee"}  # --committee -> configs/pipelines/NAME.yaml
DISTILLING = ("kl", *SELF_TRAINING, "cross_treebank")  # the recipes that take a teacher
# cross_treebank: KL from a teacher trained on all of other treebanks (--teacher-treebank: one,
# or several read as one multilingual training set; by --teacher-config with --teacher-args,
# once per output folder and those two): domain adaptation with no labeled data of the target
# beyond the K sentences; the teacher's sentences count as extra labeled.
TEACHER_CONFIG = f"configs/{RECIPES['likelihood']}"  # the cross_treebank teacher's recipe by default
TAGGER = ['--model.terms+={"objective": "objectives.TagLikelihood"}']  # --tagger: a UPOS head's term
Cell = tuple[Stage, str, "int | None"]  # a stage of cells, their objective and self-training round (None: none)


@dataclass(frozen=True)
class Options:
    """The settings every cell of a grid shares (the command line's, read once by :func:`main`)."""

    treebank: str = DEFAULT_TREEBANK
    root: Path | None = None
    output: Path = Path("runs/low_resource")
    results: Path = Path("runs/low_resource/results.jsonl")
    train_args: tuple[str, ...] = ()
    student_args: tuple[str, ...] = ()
    teacher: str | None = None  # kl's checkpoint
    teacher_labeled: int | None = None
    teacher_config: str = TEACHER_CONFIG  # cross_treebank's teacher: its recipe, overrides and treebanks
    teacher_args: tuple[str, ...] = ()
    teacher_treebanks: tuple[str, ...] = ("UD_English-LinES",)
    ensemble_seeds: tuple[int, ...] = ()
    committee: bool = False
    partial_arcs: float | None = None


def overrides(objective: str, options: Options) -> list[str]:
    """A cell's ``train.py`` overrides: ``--train-args``, then ``--student-args`` for the
    recipes that learn from a teacher (so that a self-distillation student can change its
    terms while its teacher stays the supervised cell of the same ``--train-args``)."""
    return [*options.train_args, *(options.student_args if objective in DISTILLING else [])]


def _ensemble(options: Options, round_: int | None) -> tuple[tuple[int, ...], bool]:
    """The seeds whose cells teach a self-training round together (none: its own seed's) and
    whether they are a committee (every round's teacher, not round 1's only)."""
    ensemble = options.ensemble_seeds if round_ is not None else ()
    return ensemble, bool(ensemble) and options.committee and round_ > 1


def stage_name(objective: str, size: int | str, options: Options, round_: int | None = None) -> str:
    """The folder of a stage of cells under ``--output``/TREEBANK (one folder a seed in it): the
    objective, the round and its teachers' seeds (``e1_2``, a committee's ``c1_2``), K, the
    share of partial arcs and the overrides."""
    ensemble, committee = _ensemble(options, round_)
    lineage = f"{'c' if committee else 'e'}{'_'.join(map(str, ensemble))}" if ensemble else ""  # e1_2_3, not e123
    partial = f"-partial{options.partial_arcs}" if options.partial_arcs is not None else ""
    return (f"{objective}{'' if round_ is None else round_}{lineage}-k{size}{partial}"
            f"{folder_name(overrides(objective, options))}")


def variant(objective: str, options: Options, round_: int | None = None) -> str:
    """A row's variant: its overrides as a shell line, after the round and its teachers
    (``round 2 committee of seeds 1 2``), the share of partial arcs or the other treebanks."""
    line = shlex.join(overrides(objective, options))
    ensemble, committee = _ensemble(options, round_)
    label = line if round_ is None else f"round {round_}" + (
        f" {'committee' if committee else 'teachers'} of seeds {' '.join(map(str, ensemble))}" if ensemble else ""
    ) + (f" {line}" if line else "")
    if options.partial_arcs is not None:
        label = f"partial_arcs {options.partial_arcs}" + (f" {label}" if label else "")
    if objective == "cross_treebank":
        label = f"teacher {teacher_name(options)}" + (f" {line}" if line else "")
    return label


def cell_stage(objective: str, size: int | str, seeds: tuple[int, ...], options: Options, round_: int | None = None,
               teacher_checkpoint: str | Path | None = None, partial_train: Path | None = None,
               teacher: TeacherRuns | None = None) -> Stage:
    """The stage of cells of ``objective`` at K = ``size`` for ``seeds``: the recipe's config,
    and only K (``all``: no limit), the partially annotated training file
    (:func:`parser.data.partial.write_partial_train`: all of it is used), the teacher of kl and cross_treebank
    (``teacher_checkpoint``) and the overrides; a self-training round's teachers are runs of an
    earlier stage (``teacher``: the one of the same seed, or all as an ensemble). The pipeline adds
    the treebank and the seed."""
    if objective in DISTILLING and not (teacher_checkpoint or teacher):
        raise ValueError(f"the {objective} objective needs a teacher checkpoint")
    limit = "null" if size == ALL or partial_train is not None else str(size)
    arguments = ["--data.labeled_size", limit,
                 *(["--data.train", str(partial_train), "--data.partial", "true"] if partial_train is not None else []),
                 *(["--model.teacher", str(teacher_checkpoint)] if teacher_checkpoint else []),
                 *overrides(objective, options)]
    return Stage(stage_name(objective, size, options, round_), str(recipe(OBJECTIVES[objective])), tuple(seeds),
                 tuple(arguments), teacher=teacher)


def self_training(objective: str, size: int | str, seed: int, round_: int, options: Options) -> list[Cell]:
    """Round ``round_`` of seed ``seed``: the shipped chain (``CHAINS``: the supervised cells,
    then each round taught by the one before) up to that round, each stage a cell of the row's
    objective at K = ``size``. A stage of several seeds trains ``--ensemble-seeds`` (none: the
    student's own seed), as does every stage before the round with ``--committee``; the round
    itself trains ``seed``."""
    chain = read_pipeline(CHAINS[options.committee], until=f"round{round_}", seed=seed)
    cells: list[Cell] = []
    names: dict[str, str] = {}  # the chain's stage -> the cells' stage
    for stage in chain.stages:
        r = int(stage.name.removeprefix("round")) if stage.teacher else None
        seeds = (options.ensemble_seeds or (seed,)) if len(stage.seeds) > 1 and r != round_ else (seed,)
        teacher = stage.teacher and TeacherRuns(names[stage.teacher.stage], stage.teacher.runs)
        cells.append((cell_stage(objective if r else "supervised", size, seeds, options, r, teacher=teacher),
                      objective if r else "supervised", r))
        names[stage.name] = cells[-1][0].name
    return cells


def train_cells(cells: list[Cell], size: int | str, options: Options, record: Callable[[dict], None],
                extra_labeled: int = 0, arcs: dict | None = None) -> list[Run]:
    """Train (or reuse) the stages of ``cells`` as one pipeline under ``--output``/TREEBANK (one
    folder per treebank: a cell's checkpoint is never another treebank's) and record the row of
    each run trained now or not in ``--results`` yet; the runs of the last stage."""
    output = options.output / options.treebank
    trained = {(stage.name, seed) for stage, _, _ in cells for seed in stage.seeds
               if finished(run_folder(output, stage.name, seed)) is None}
    pipeline = Pipeline([stage for stage, _, _ in cells], cells[-1][0].name)
    run_pipeline(pipeline, options.treebank, output, options.root and str(options.root),
                 say=lambda line: print(line, flush=True))
    for stage, objective, round_ in cells:
        for seed, run in zip(stage.seeds, pipeline.results[stage.name]):
            key = {"objective": objective, "variant": variant(objective, options, round_), "labeled": size,
                   "seed": seed, "treebank": options.treebank}
            if (stage.name, seed) not in trained and recorded_row(options.results, key) is not None:
                print(f"reusing {run.directory}: already in {options.results}", flush=True)
                continue
            record({**key, "train_seconds": round(run.usage().get("seconds", 0)),
                    "max_steps": run.config()["trainer"]["max_steps"], **test_scores(run, options),
                    "extra_labeled": extra_labeled, **(arcs or {}), **run.provenance()})
    return pipeline.results[cells[-1][0].name]


def train_cell(objective: str, size: int | str, seed: int, options: Options, record: Callable[[dict], None]) -> Run:
    """One cell outside self-training, trained (or reused) and recorded: its run. kl learns from
    ``--teacher``, cross_treebank from :func:`other_treebank_teacher`; with ``--partial-arcs``
    the cell's training file is written first (the file is built at run time, never committed)."""
    teacher = other_treebank_teacher(options, record) if objective == "cross_treebank" else (
        options.teacher if objective == "kl" else None)
    if objective == "kl" and options.teacher_labeled is not None:
        extra = options.teacher_labeled
    else:
        extra = teacher_labeled(str(teacher), options.root) if teacher else 0
    partial_train, arcs = None, {}
    if options.partial_arcs is not None:
        partial_train = run_folder(options.output / options.treebank, stage_name(objective, size, options),
                                   seed) / "train.partial.conllu"
        source = treebank_file(options.treebank, "train", options.root)
        arcs = {"partial_arcs": options.partial_arcs,
                "extra_arcs": write_partial_train(source, size, options.partial_arcs, seed, partial_train)}
    stage = cell_stage(objective, size, (seed,), options, teacher_checkpoint=teacher, partial_train=partial_train)
    return train_cells([(stage, objective, None)], size, options, record, extra, arcs)[0]


def test_scores(run: Run, options: Options) -> dict[str, float]:
    """Parse ``--treebank``'s test file with the run's best checkpoint (beside it, in its
    folder) and score it: UAS, LAS, CLAS, and UPOS when the run trained a tagger."""
    test = treebank_file(options.treebank, "test", options.root)
    scores = score_checkpoint(run.best, test, run.directory.parents[1] / "test.pred.conllu",
                              overwrite_upos=trains_tagger(run.config()["model"]))  # a tagger's UPOS is scored too
    return {k: round(v, 2) for k, v in scores.items()}


def teacher_labeled(teacher: str, data_root: Path | None) -> int:
    """Labeled sentences the teacher trained on, from its checkpoint's data settings: the
    sentences of its training files, at most its ``labeled_size``; 0 when that is unknown."""
    try:
        data = torch.load(teacher, map_location="cpu", weights_only=False).get("datamodule_hyper_parameters") or {}
    except Exception:  # noqa: BLE001 - not a checkpoint this code reads: the size is unknown
        return 0
    limit = data.get("labeled_size")
    try:
        files = DependencyDataModule(treebank=data.get("treebank"), root=data.get("root") or str(data_root),
                                     train=data.get("train")).paths("train")
        sentences = sum(1 for train in files for _ in records(train, text=False))
    except Exception:  # noqa: BLE001 - the training files are not here
        return int(limit or 0)
    return min(sentences, limit) if limit else sentences


def other_treebank_teacher(options: Options, record: Callable[[dict], None]) -> Path:
    """The cross_treebank teacher: ``--teacher-config`` (``configs/likelihood.yaml``) with
    ``--teacher-args`` on all of ``--teacher-treebank`` (seed 1; several treebanks: their
    files one after the other, dev included), a pipeline of one stage trained once per output
    folder, config and overrides; its test score on ``--treebank`` (no target data at all) is
    recorded as a row of its own."""
    treebanks = options.teacher_treebanks
    stage = Stage(f"teacher-{folder_name([teacher_name(options), options.teacher_config, *options.teacher_args])}",
                  options.teacher_config, (1,),
                  ("--data.treebank", treebanks[0] if len(treebanks) == 1 else json.dumps(list(treebanks)),
                   *options.teacher_args), data="own")
    trained = finished(run_folder(options.output, stage.name, 1)) is None
    pipeline = Pipeline([stage], stage.name)
    run_pipeline(pipeline, options.treebank, options.output, options.root and str(options.root),
                 say=lambda line: print(line, flush=True))
    run = pipeline.results[stage.name][0]
    key = {"objective": "cross_treebank", "variant": f"teacher alone ({teacher_name(options)})", "labeled": 0, "seed": 1}
    if trained or recorded_row(options.results, {**key, "treebank": options.treebank}) is None:
        record({**key, "train_seconds": round(run.usage().get("seconds", 0)), "max_steps": None,
                **test_scores(run, options), "treebank": options.treebank,
                "extra_labeled": teacher_labeled(str(run.best), options.root), **run.provenance()})
    return run.best


def teacher_name(options: Options) -> str:
    """The cross_treebank teacher's treebanks as rows and folders name them: ``A`` or ``A+B+C``."""
    return "+".join(options.teacher_treebanks)


def recorded_row(results: Path, key: dict) -> dict | None:
    """The row of ``results`` with these key fields, if there is one: the driver resumes a
    grid (or adds a round, a recipe) without scoring a recorded run again."""
    return next((row for row in read_rows(results) if all(row.get(field) == value for field, value in key.items())),
                None)


def _size(size: int | str) -> float:
    """Labeled sizes in order, ``all`` last."""
    return float("inf") if size == ALL else float(size)


def _order(recipe: tuple[str, str]) -> tuple[int, str]:
    """Recipes as the table lists them: by objective, then by overrides."""
    return list(OBJECTIVES).index(recipe[0]), recipe[1]


def report(results: Path) -> str:
    """Markdown, one table per treebank (headed by its name when there are several): test
    UAS/LAS mean +- sd over seeds, each recipe's share of the gap between the strongest
    supervised parser of its settings (:func:`baseline`; a supervised variant's: the plainest)
    and the full-data ceiling at its labeled size, labeled sentences beyond K (the kl
    teacher's), wall-clock per run; then the ceiling and its source."""
    treebanks = grid_cells(results)
    tables = [(f"**{treebank}**\n\n" if len(treebanks) > 1 else "") + _table(cells, treebank)
              for treebank, cells in treebanks.items()]
    return "\n\n".join(tables)


def _table(cells: Cells, treebank: str) -> str:
    """The report's table of one treebank's cells."""
    top, source = ceiling(cells, treebank)
    rows = []
    for (size, objective, variant), group in sorted(cells.items(), key=lambda c: (_size(c[0][0]), *_order(c[0][1:]))):
        _, base = baseline(cells, size, variant if objective != "supervised" else "")
        share = "-"
        if top is not None and base and size != ALL:
            low = statistics.mean(run["las"] for run in base)
            if top > low:
                share = f"{100 * (statistics.mean(g['las'] for g in group) - low) / (top - low):.0f}%"
        extra = statistics.mean(g.get("extra_labeled", 0) for g in group)
        minutes = statistics.mean(g["train_seconds"] for g in group) / 60
        rows.append([size, objective, _overrides(variant) or "-", len(group), mean_sd([g["uas"] for g in group]),
                     mean_sd([g["las"] for g in group]), share, f"{extra:,.0f}", f"{minutes:.0f}"])
    header = ["labeled", "objective", "overrides", "seeds", "test UAS", "test LAS", "share of gap", "extra labeled",
              "minutes per run"]
    lines = [markdown_table(header, rows, "rllrrrrrr")]
    if top is not None:
        lines += ["", (f"Share of gap: (LAS - supervised-only LAS) / (ceiling - supervised-only LAS) at the same labeled "
                       f"size, supervised-only the strongest of the recipe's settings (a supervised row: the plainest). "
                       f"Ceiling: full-data test LAS {top:.2f} ({source}). A kl row's teacher learned from "
                       "its extra labeled sentences: kl is a reference, not a low-resource recipe.")]
    else:
        lines += ["", f"No share of gap: {source}."]
    return "\n".join(lines)


# How the figure names overrides (``key value`` of _options); others keep that form, None drops it.
_NAMES = {"constraints tag_pairs": "tag pairs", "targets_from labeled": "from labeled",
          "constraints configs/rules/naseem_ud.yaml": "Naseem rules", "targets_from rules": None,
          "unsupervised_schedule linear_decay": "decaying λ", "unsupervised_schedule constant": "constant λ",
          "penalty kl": "KL penalty", "weighting count": "count weighting",
          "unlabeled_tags drop": "predicted tags"}
LABEL_CHARS = 72  # a figure label's line; longer labels wrap
_COLORS = {"supervised": "0.35", "entropy": "C0", "ge": "C2", "kl": "C4", "combined": "C1", "self_distill": "C5",
           "self_sample": "C7", "self_ge": "C8",
           "cross_treebank": "C6"}


def _options(variant: str) -> tuple[list[str], list[str]]:
    """A row's variant as the figure names it: the words before its first override
    (``round 2 teachers of seeds 1 2 3``) and each override as ``key value`` with the key's
    last part (``--model.encoder_options.pooling mean`` -> ``pooling mean``), a ``terms``
    list as its objectives (``terms Likelihood+TagLikelihood+Distillation(labeled)``) and
    ``--tagger``'s term as ``tagger``."""
    try:
        words = shlex.split(variant.replace(shlex.join(TAGGER), "--tagger"))
    except ValueError:  # an unbalanced quote: the words as they are
        words = variant.replace(shlex.join(TAGGER), "--tagger").split()
    first = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    options: list[list[str]] = []
    for word in words[first:]:
        if word.startswith("--"):
            key, _, value = word[2:].partition("=")
            options.append([key.rstrip("+").rsplit(".", 1)[-1]] + ([value] if value else []))
        else:
            options[-1].append(word)
    pairs = []
    for key, *value in options:
        text = " ".join(value)
        if key == "terms":
            text = "+".join(_term_name(term) for term in yaml.safe_load(text) or [])
        elif "/" in text and not text.startswith("configs/rules/"):  # a path: its file name
            text = Path(text).name
        pairs.append(f"{key} {text}".strip())
    return words[:first], pairs


def _overrides(variant: str) -> str:
    """A row's variant as the report's table shows it: :func:`_options`' words, then its
    ``key value`` pairs (``round 2 tagger lr 1e-3 terms Likelihood+Distillation(labeled)``)."""
    head, pairs = _options(variant)
    return " ".join(head + pairs)


def _term_name(term: dict) -> str:
    """``{"objective": {"class_path": "objectives.Distillation", "init_args": {"labeled": true}}}``
    -> ``Distillation(labeled)``: the class and its init_args (flags by name)."""
    objective = term["objective"]
    path, init = (objective, {}) if isinstance(objective, str) else (objective["class_path"], objective.get("init_args", {}))
    args = [name if value is True else f"{name} {value}" for name, value in init.items()]
    return path.rsplit(".", 1)[-1] + (f"({', '.join(args)})" if args else "")


def _recipe(objective: str, variant: str) -> str:
    """A figure label: ``ge (tag pairs from labeled, λ 0.1, decaying λ)`` for configs/ge.yaml
    as shipped, ``ge (Naseem rules, λ 1.0, constant λ)`` for an override of it (a GE label
    always names its constraints, lambda and schedule); ``self_distill (round 2, teachers of
    seeds 1 2 3, tagger, encoder multilingual-e5-small, ...)`` for the rest (:func:`_options`)."""
    head, pairs = _options(variant)
    if objective == "ge" and not any(pair.startswith("terms") for pair in pairs):
        # configs/ge.yaml's values until 2026-11-26 (every row that keeps them is older)
        if not any(pair.startswith("constraints") for pair in pairs):
            pairs.insert(0, "constraints tag_pairs")
        if not any(pair.startswith("unsupervised_weight") for pair in pairs):
            pairs.append("unsupervised_weight 0.1")
        if not any(pair.startswith("unsupervised_schedule") for pair in pairs):
            pairs.append("unsupervised_schedule linear_decay")
        if "constraints tag_pairs" in pairs and "targets_from labeled" not in pairs:
            pairs.insert(1, "targets_from labeled")
        pairs = sorted(pairs, key=lambda pair: not pair.startswith(("constraints", "targets_from")))
        pairs = sorted(pairs, key=lambda pair: pair.startswith("unsupervised_schedule"))
    names = [_NAMES.get(pair, pair.replace("unsupervised_weight ", "λ ")) for pair in pairs]
    names = ([" ".join(head)] if head else []) + [name for name in names if name is not None]
    label = ", ".join(names).replace("tag pairs, from labeled", "tag pairs from labeled")
    return objective + (f" ({label})" if names else "")


def figure(results: Path, output: Path) -> Path:
    """Draw test LAS by recipe (rows) and by treebank and labeled size (panels, as wide as
    their range): each seed a circle, the mean a diamond with its value and +- sd, the
    supervised-only mean (:func:`baseline`) a dashed line."""
    treebanks = grid_cells(results)
    panels = [(treebank, size) for treebank, cells in treebanks.items()
              for size in sorted({k for k, _, _ in cells}, key=_size)]
    recipes = sorted({(objective, variant) for cells in treebanks.values() for _, objective, variant in cells}, key=_order)
    las = [[run["las"] for (k, _, _), group in treebanks[treebank].items() if k == size for run in group]
           for treebank, size in panels]
    ranges = [max(scores) - min(scores) for scores in las]  # LAS points
    labels = [textwrap.fill(_recipe(*recipe), LABEL_CHARS) for recipe in recipes]
    heights = [max(2, label.count("\n") + 1.5) for label in labels]  # in text lines
    rows = [sum(heights[:i]) + height / 2 for i, height in enumerate(heights)]  # each recipe's y
    fig = new_figure(3.2 + 0.055 * LABEL_CHARS + sum(2.0 + 0.13 * r for r in ranges), 0.9 + 0.15 * sum(heights),
                     layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False, width_ratios=[16 + r for r in ranges])[0]
    for ax, (treebank, size) in zip(axes, panels):
        cells, (base, _) = treebanks[treebank], baseline(treebanks[treebank], size)
        for row, (objective, variant) in zip(rows, recipes):
            scores = [run["las"] for run in cells.get((size, objective, variant), [])]
            if not scores:
                continue
            color, mean = _COLORS.get(objective, "C1"), statistics.mean(scores)
            text = f"{mean:.1f}"
            if len(scores) > 1:
                sd = statistics.stdev(scores)
                ax.errorbar(mean, row, xerr=sd, color=color, capsize=3, linewidth=1.2)
                text += f" ± {sd:.1f}"
            ax.scatter([mean], [row], s=30, marker="D", color=color, zorder=4)
            ax.scatter(scores, [row] * len(scores), s=26, facecolors="white", edgecolors=color, linewidths=1, zorder=5)
            ax.annotate(text, (max(scores), row), xytext=(7, 0), textcoords="offset points", va="center",
                        fontsize=8, color=color)
            if (objective, variant) == ("supervised", base):
                ax.axvline(mean, color=color, linestyle="--", linewidth=0.8, zorder=1)
        name = f"{treebank.removeprefix('UD_')}\n" if len(treebanks) > 1 else ""  # two lines: panels can be narrow
        ax.set_title(f"{name}{size} labeled", fontsize=10)
        ax.set_xlabel("test LAS", fontsize=9)
        ax.margins(x=0.1)
        low, high = ax.get_xlim()
        ax.set_xlim(low, high + 0.2 * (high - low))  # room for the values
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(rows, labels, fontsize=8)
    axes[0].invert_yaxis()  # the table's order, top to bottom
    name = "UD" if len(treebanks) > 1 else next(iter(treebanks), DEFAULT_TREEBANK).replace("_", " ")
    fig.suptitle(f"Low-resource {name}, 400 steps unless a label says max_steps: test LAS of each seed (circles), mean (diamond) ± sd", fontsize=10)
    output.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, output, dpi=80)  # a figure of tens of inches: 80 dpi keeps the PNG readable and small


def _labeled_size(text: str) -> int | str:
    return ALL if text == ALL else int(text)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=list(OBJECTIVES))
    cli.add_argument("--sizes", nargs="+", type=_labeled_size, default=[100, 1000],
                     help="labeled sentences per cell (K); 'all' for every training sentence (a full-data row)")
    cli.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    cli.add_argument("--treebank", default="UD_English-EWT")
    add_root_option(cli)
    cli.add_argument("--teacher", help="checkpoint of a parser trained on all of train (for kl)")
    cli.add_argument("--teacher-config", default=TEACHER_CONFIG, help="the cross_treebank teacher's recipe")
    cli.add_argument("--teacher-args", type=shlex.split, default=[], help="train.py overrides of the cross_treebank teacher, e.g. "
                     "'--model.encoder multilingual-e5-small'")
    cli.add_argument("--teacher-treebank", nargs="+", default=["UD_English-LinES"],
                     help="the treebank a cross_treebank teacher trains on (all of its train file)")
    cli.add_argument("--rounds", type=int, default=2, help="self_distill rounds (each student teaches the next; at most "
                     "the rounds of configs/pipelines/self_training.yaml)")
    cli.add_argument("--ensemble-seeds", nargs="+", type=int, help="self-training's first teacher: the ensemble "
                     "(mean scores) of the supervised cells of these seeds, not the cell of the student's own seed")
    cli.add_argument("--committee", action="store_true", help="with --ensemble-seeds: every round's teacher is the "
                     "ensemble of the previous round's cells of those seeds (trained too), not round 1's only")
    cli.add_argument("--teacher-labeled", type=int, help="labeled sentences the teacher trained on, recorded as a kl "
                     "row's extra_labeled (default: read from the teacher's checkpoint, 0 if it does not say)")
    # the recipe of every cell is its config (OBJECTIVES); change it here, recorded as the row's variant.
    # Overrides are one string each on the command line, split here once into train.py's arguments.
    cli.add_argument("--train-args", type=shlex.split, default=[], help="train.py overrides on top of the recipe's config, "
                     "e.g. '--model.encoder_lr 1e-4'")
    cli.add_argument("--student-args", type=shlex.split, default=[], help="train.py overrides of the cells that learn from a teacher "
                     "only (kl, self_distill, ..., after --train-args), e.g. a labeled Distillation term")
    cli.add_argument("--tagger", action="store_true", help="add a UPOS tagging term (objectives.TagLikelihood) to "
                     "the recipe: the first of --train-args")
    cli.add_argument("--partial-arcs", type=float, metavar="SHARE",
                     help="supervised only: train on the K sentences whole plus the rest of the training file "
                          "with this random share of its arcs kept (partial annotation, --data.partial)")
    cli.add_argument("--output", type=Path, default=Options.output)
    cli.add_argument("--results", type=Path, default=Options.results)
    cli.add_argument("--figure", help="where --report draws the results (.png, .svg or .html; default: "
                     "--results with .png)")
    cli.add_argument("--report", action="store_true", help="only print the table of --results and draw --figure")
    args = cli.parse_args(argv)
    if not args.report:
        if "kl" in args.objectives and not args.teacher:
            cli.error("--teacher is required for the kl objective")
        if args.partial_arcs is not None and (args.objectives != ["supervised"] or ALL in args.sizes
                                              or not 0 < args.partial_arcs < 1):
            cli.error("--partial-arcs takes a share in (0, 1), --objectives supervised and numeric --sizes")
        if args.committee and not args.ensemble_seeds:
            cli.error("--committee needs --ensemble-seeds: the seeds of the committee")
        if set(SELF_TRAINING) & set(args.objectives) and "supervised" not in args.objectives:
            cli.error(f"{', '.join(SELF_TRAINING)} start from the supervised cell: list supervised among --objectives")
        rounds = len(read_pipeline(CHAINS[args.committee]).stages) - 1  # the chain's stages after the supervised one
        if set(SELF_TRAINING) & set(args.objectives) and not 1 <= args.rounds <= rounds:
            cli.error(f"--rounds takes 1 to {rounds}, the rounds of configs/pipelines/{CHAINS[args.committee]}.yaml")
        options = Options(
            treebank=args.treebank, root=args.root, output=args.output, results=args.results,
            train_args=(*(TAGGER if args.tagger else []), *args.train_args), student_args=tuple(args.student_args),
            teacher=args.teacher, teacher_labeled=args.teacher_labeled, teacher_config=args.teacher_config,
            teacher_args=tuple(args.teacher_args), teacher_treebanks=tuple(args.teacher_treebank),
            ensemble_seeds=tuple(args.ensemble_seeds or ()), committee=args.committee, partial_arcs=args.partial_arcs)

        def record(row: dict) -> None:
            append_row(options.results, row)
            print(json.dumps(row), flush=True)

        for size in args.sizes:
            for seed in args.seeds:
                for objective in args.objectives:
                    if objective not in SELF_TRAINING:
                        train_cell(objective, size, seed, options, record)
                        continue
                    for round_ in range(1, args.rounds + 1):  # the earlier stages of each are reused
                        train_cells(self_training(objective, size, seed, round_, options), size, options, record)
    print(report(args.results))
    print(f"figure: {figure(args.results, Path(args.figure) if args.figure else args.results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
