"""A recipe of several training runs as one command: trees (and raw text) of a language in, a
saved parser and a table out.

    treeexp pipeline new_language --treebank UD_Wolof-WTB --output runs/wolof [--test]

A shipped pipeline by its name (``new_language``: ``configs/pipelines/new_language.yaml``) or a
pipeline file; its configs by path, or by the name of a shipped one (``configs/transfer.yaml``).

A pipeline file lists stages, each an ordinary ``train.py fit`` (one per seed) in its own
folder ``OUTPUT/<stage>/seed<S>``, or a choice between earlier stages::

    stages:
      - name: teachers                 # three supervised parsers
        config: configs/likelihood_low_resource.yaml
        seeds: [1, 2, 3]
        args: [--model.encoder, multilingual-e5-small]   # overrides, as on train.py's command line
      - name: student
        config: configs/low_resource_multilingual.yaml
        teacher: {stage: teachers, runs: all}   # every run of that stage teaches (--model.teacher, an ensemble)
      - name: round2
        config: configs/low_resource_multilingual.yaml
        teacher: student               # the run of the same seed teaches ({stage: student, runs: seed})
    final: round2                      # the parser saved to OUTPUT/parser (default: the last stage)

``config: [A, B]`` reads several config files, each over the one before (train.py's
``--config A --config B``; the run is named after the last); ``init: STAGE`` starts each run
from that stage's parser of the same seed (or its first: ``--model.init``); ``data: own`` keeps
a stage's own treebanks (a multilingual base) instead of the target's; ``relatives: {nearest: N,
share: S}`` trains it on the target's trees beside the N treebanks nearest the target (``treeexp
nearness`` on its labeled trees and raw text, ranked once into ``OUTPUT/nearness.json``; among
``--candidates``, default every other treebank under ``--root``; ``nearest: all``: every one of
them, the whole set weighted toward the target), sharing S of every epoch by
nearness (``--data.relatives``), or each alike with ``alike: true``; a stage that reads no tree of
the target trains on the N alone (S = 1; ranked by the raw text's words alone); ``choose: [A, B]``
trains nothing and stands for whichever of A and B has the higher mean dev LAS, with its reason
printed (a rule chosen on dev only; where one of them was not trained on the target here, a base
as it is, every one parses the target's dev trees, the first K with ``--trees K``, and is scored
alike; where no stage reads a tree of the target, no dev tree either: whichever parser's expected
rates on the raw text lie nearer the bands of the facts file of ``--statistics``, the first listed
on a tie), a row per seed in ``runs.jsonl`` naming the stage it took; ``average: {A: 0.5, B: 0.5}`` trains nothing either: the parsers of A and B (of each seed)
averaged weight by weight (``treeexp average``, :mod:`parser.averaging`) into
``OUTPUT/<stage>/seed<S>/parser``. A finished stage is reused, a stopped one resumes from its ``last.ckpt``; ``--given STAGE=CHECKPOINT`` takes a stage's parser from elsewhere (a
multilingual base trained once for every language); ``--seed S`` runs the recipe again with
another seed beside the first (the ensemble's runs reused); ``--dry-run`` prints the commands.
Only the stages the final parser is made from train; another (a parser trained only to be
compared with) trains when asked, ``--also STAGE``.

Every pipeline learns the target's tokenizer from the trees its target stages label (``treeexp
tokenizer train``; the first K with ``--trees K``), into ``OUTPUT/tokenizer.udpipe``, saved beside
the final parser so that it reads raw text (``--no-tokenizer``: not); ``--raw FILE``, the target's
untokenised text, is read through it by every target stage whose terms read raw text.

A pipeline owns its ``OUTPUT``: one run at a time (``OUTPUT/pipeline.lock``), and a row per stage
and seed in ``OUTPUT/runs.jsonl`` as each run ends (dev scores, test scores with ``--test``, CPU
minutes, peak memory, commit and command), the file ``treeexp pipeline report OUTPUT`` prints::

    treeexp pipeline report runs/wolof
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import shutil
import sys
import time
from itertools import islice
from statistics import fmean
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_file
from parser.data.sentences import ConlluError, conllu_blocks
from parser.fetch import default_root
from parser.data.tokenizer import TOKENIZER_FILE
from parser.runs import (CONFIGS, FINISHED, Run, config_path, finished, fit, fit_command, mean_dev_las, provenance_of,
                         shell_line, write_whole)
from parser.training.checkpoint import CONFIG, check_checkpoint_path
from parser.training.callbacks import MONITOR

RESULTS = "runs.jsonl"  # OUTPUT/runs.jsonl: a row per stage and seed, what `treeexp pipeline report` reads
NEARNESS = "nearness.json"  # OUTPUT/nearness.json: the treebanks ranked for the stages with relatives
RAW_SENTENCES = 20_000  # of the raw text, what the nearness of treebanks reads
CHOICE_SENTENCES = 500  # of the raw text, what a choice with no dev tree reads
LOCK = "pipeline.lock"  # OUTPUT/pipeline.lock: the process id of the pipeline running in OUTPUT
AVERAGE = "average.json"  # OUTPUT/<stage>/seed<S>/average.json: how an average stage's parser was made
TEACHER_RUNS = ("seed", "all")  # a teacher stage's run of the same seed, or all its runs as one ensemble


@dataclass(frozen=True)
class TeacherRuns:
    """The runs of an earlier stage that teach each run of a stage (``teacher:``): ``seed``, the run
    of the same seed (as ``init``), or ``all``, every run as one ensemble."""

    stage: str
    runs: str = "seed"


@dataclass(frozen=True)
class Relatives:
    """A stage's ``relatives:``: the ``nearest`` treebanks to the target trained on beside its own,
    sharing ``share`` of every epoch (1: alone, for a stage that reads no tree of the target), by
    nearness or each ``alike`` (:func:`parser.nearness.relative_shares`); ``nearest`` None: every
    ranked treebank."""

    nearest: int | None
    share: float
    alike: bool = False


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline (see the module docstring for the fields)."""

    name: str
    config: str | tuple[str, ...] | None = None  # one config file, or several in order
    seeds: tuple[int, ...] = (1,)
    args: tuple[str, ...] = ()
    teacher: TeacherRuns | None = None
    init: str | None = None
    data: str = "target"
    choose: tuple[str, ...] = ()
    average: tuple[tuple[str, float], ...] = ()  # (stage, weight) pairs
    relatives: Relatives | None = None

    def configs(self) -> tuple[str, ...]:
        """Its config files, in the order train.py reads them."""
        return (self.config,) if isinstance(self.config, str) else self.config or ()

    def earlier(self) -> list[str]:
        """The stages this one reads."""
        return [s for s in (self.teacher and self.teacher.stage, self.init, *self.choose,
                            *(name for name, _ in self.average)) if s]


@dataclass
class Pipeline:
    stages: list[Stage]
    final: str
    results: dict[str, list[Run]] = field(default_factory=dict)

    def needed(self, also: Sequence[str] = ()) -> set[str]:
        """The stages the final parser (and those ``also`` named) is made from: it and those it
        reads, in turn."""
        by_name, needed, waiting = {s.name: s for s in self.stages}, set(), [self.final, *also]
        while waiting:
            name = waiting.pop()
            if name not in needed:
                needed.add(name)
                waiting += by_name[name].earlier()
        return needed


def run_folder(output: Path, stage: str, seed: int) -> Path:
    """The folder of a stage's run of one seed: ``OUTPUT/<stage>/seed<S>``."""
    return output / stage / f"seed{seed}"


def stage_runs(output: Path) -> list[tuple[str, int, Run]]:
    """Every finished run in a pipeline's ``output``, as (stage, seed, run), by stage and seed."""
    return [(marker.parents[1].name, int(marker.parent.name.removeprefix("seed")), finished(marker.parent))
            for marker in sorted(output.glob(f"*/seed*/{FINISHED}"))]


def pipeline_path(name: str | Path) -> Path:
    """A pipeline file as :func:`~parser.runs.config_path` finds it, or a shipped pipeline by its name."""
    for candidate in (config_path(name), config_path(f"pipelines/{name}.yaml")):
        if candidate.is_file():
            return candidate
    shipped = sorted(Path(file.name).stem for file in (CONFIGS / "pipelines").iterdir())
    raise ConfigurationError(f"no pipeline file {name}, nor a shipped pipeline of that name ({', '.join(shipped)})")


def read_pipeline(path: str | Path, until: str | None = None, seed: int | None = None) -> Pipeline:
    """A pipeline file (or a shipped pipeline's name), checked: stage names once each, configs
    that exist, references to earlier stages only, known keys; ConfigurationError names what is
    wrong. ``until``: its stages up to that one, which is then the final one. ``seed``: the seed
    of every stage that trains one parser (a stage of several seeds, an ensemble, keeps them)."""
    path = pipeline_path(path)
    try:
        spec = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{path}: not YAML ({error})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("stages"), list) or not spec["stages"]:
        raise ConfigurationError(f"{path}: a pipeline needs a list of stages")
    known = {f.name for f in dataclasses.fields(Stage)}
    stages: list[Stage] = []
    for entry in spec["stages"]:
        where = f"{path}: stage {entry.get('name', len(stages) + 1) if isinstance(entry, dict) else len(stages) + 1}"
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigurationError(f"{where}: each stage needs a name")
        if "teachers" in entry:  # the spelling before one key said which runs teach
            raise ConfigurationError(f"{where}: teachers: {entry['teachers']} is now written teacher: "
                                     f"{{stage: {entry['teachers']}, runs: all}} (every run of it teaches, as one ensemble)")
        if unknown := sorted(set(entry) - known):
            raise ConfigurationError(f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values = {k: tuple(str(a) for a in v) if k in ("args", "choose") or (k == "config" and isinstance(v, list))
                  else tuple(v) if k == "seeds" else teacher_runs(v, where) if k == "teacher"
                  else relatives_of(v, where) if k == "relatives" else average_of(v, where) if k == "average" else v
                  for k, v in entry.items()}
        stage = Stage(**values)
        if seed is not None and len(stage.seeds) == 1:
            stage = dataclasses.replace(stage, seeds=(seed,))
        if stage.name in {s.name for s in stages}:
            raise ConfigurationError(f"{where}: the name is taken by an earlier stage")
        if missing := [s for s in stage.earlier() if s not in {s.name for s in stages}]:
            raise ConfigurationError(f"{where}: reads {', '.join(missing)}, which is not an earlier stage")
        if bool(stage.config) + bool(stage.choose) + bool(stage.average) != 1:
            raise ConfigurationError(f"{where}: give a config to train, choose: [stages] to choose between, or "
                                     "average: {stage: weight, ...} to average")
        if missing := [name for name in stage.configs() if not config_path(name).is_file()]:
            raise ConfigurationError(f"{where}: no config file {', '.join(missing)}")
        if stage.data not in ("target", "own"):
            raise ConfigurationError(f"{where}: data must be 'target' or 'own', not {stage.data!r}")
        if stage.relatives and (stage.data != "target" or not stage.config):
            raise ConfigurationError(f"{where}: relatives are trained on beside the target's trees: a stage that trains "
                                     "on the target's data")
        stages.append(stage)
    names = [s.name for s in stages]
    if until is not None:
        if until not in names:
            raise ConfigurationError(f"--until {until}: no such stage in {path} ({', '.join(names)})")
        return Pipeline(stages[: names.index(until) + 1], until)
    final = spec.get("final", stages[-1].name)
    if final not in names:
        raise ConfigurationError(f"{path}: final names no stage: {final}")
    return Pipeline(stages, final)


def teacher_runs(value: str | dict, where: str) -> TeacherRuns:
    """A stage's ``teacher:``: a stage's name (its run of the same seed) or ``{stage: NAME, runs: seed|all}``."""
    if isinstance(value, str):
        return TeacherRuns(value)
    if not isinstance(value, dict) or set(value) - {"stage", "runs"} or "stage" not in value \
            or value.get("runs", "seed") not in TEACHER_RUNS:
        raise ConfigurationError(f"{where}: teacher is a stage's name or {{stage: NAME, runs: seed or all}}, not {value}")
    return TeacherRuns(str(value["stage"]), value.get("runs", "seed"))


def average_of(value: dict, where: str) -> tuple[tuple[str, float], ...]:
    """A stage's ``average:``: ``{stage: weight, ...}``, two or more stages, positive weights summing to 1."""
    if not isinstance(value, dict) or len(value) < 2 or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in value.values()) \
            or not math.isclose(sum(value.values()), 1, abs_tol=1e-3):
        raise ConfigurationError(f"{where}: average is {{stage: weight, ...}}: two or more earlier stages, positive "
                                 f"weights summing to 1, not {value}")
    return tuple((str(name), float(weight)) for name, weight in value.items())


def relatives_of(value: dict, where: str) -> Relatives:
    """A stage's ``relatives: {nearest: N, share: S[, alike: true]}`` (N >= 1 treebanks or ``all``,
    0 < S <= 1)."""
    if not isinstance(value, dict) or not {"nearest", "share"} <= set(value) <= {"nearest", "share", "alike"} \
            or value["nearest"] != "all" and (not isinstance(value["nearest"], int) or value["nearest"] < 1) \
            or not isinstance(value["share"], (int, float)) or not 0 < value["share"] <= 1 \
            or not isinstance(value.get("alike", False), bool):
        raise ConfigurationError(f"{where}: relatives is {{nearest: N, share: S}} (N >= 1 treebanks, or all, sharing "
                                 f"0 < S <= 1 of every epoch; alike: true shares it equally), not {value}")
    nearest = None if value["nearest"] == "all" else value["nearest"]
    return Relatives(nearest, float(value["share"]), value.get("alike", False))


def nearest_treebanks(train: Path, trees: int | None, raw: tuple[str, Path] | None, root: str | None,
                      candidates: Sequence[str] | None, output: Path, say: Callable[[str], None]) -> list[dict]:
    """``OUTPUT/nearness.json``: the treebanks under ``root`` (``candidates``: those, treebank
    folders or languages) ranked by :func:`parser.nearness.rank_target` for ``train``'s first
    ``trees`` trees and the raw text (``raw``, its first ``RAW_SENTENCES`` sentences read through
    its tokenizer; without: the rest of ``train``; no tree: by the raw text's words alone), ranked
    once (reused where it exists); its rows, nearest first ([] where the target's is the only
    treebank: its stages then read its trees alone)."""
    path = output / NEARNESS
    if path.is_file():
        ranked = json.loads(path.read_text(encoding="utf-8"))
        say(f"relatives: ranked in {path} (reused)")
    else:
        from parser.data.stream import Source
        from parser.nearness import NoCandidates, candidate_folders, rank_target

        folder = default_root() if root is None else Path(root)
        names = None if candidates is None else [f.name if f.parent.resolve() == folder.resolve() else str(f)
                                                 for name in candidates for f in candidate_folders(name, folder)]
        text = None if raw is None else [s for s in islice(Source(raw[0], tokenizer=str(raw[1])).sentences(), RAW_SENTENCES)
                                         if not isinstance(s, ConlluError)]
        try:
            ranked = [r.row() for r in rank_target(train, trees, text, folder, names)]
        except NoCandidates:
            ranked = []
        output.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(ranked, ensure_ascii=False, indent=1) + "\n")
    if ranked:
        say("relatives: nearest " + ", ".join(f"{r['treebank']} ({r['mean_rank']:.2f})" for r in ranked[:5]) + ", ...")
    else:
        say(f"relatives: no treebank under {root or default_root()} but the target's: the stages with relatives read "
            "the target's trees alone")
    return ranked


def relatives_option(relatives: Relatives, ranked: Sequence[dict] | None) -> str:
    """``--data.relatives``' value: the nearest of ``ranked`` and their shares, as JSON (None: a
    dry run's description of it)."""
    if ranked is None:
        which = "every treebank" if relatives.nearest is None else f"the {relatives.nearest} nearest"
        return f"<{which} in {NEARNESS}, sharing {relatives.share:g}{' alike' * relatives.alike}>"
    from parser.nearness import relative_shares

    shares = relative_shares(ranked, relatives.nearest, relatives.share, relatives.alike)
    return json.dumps({name: round(share, 4) for name, share in shares.items()}, ensure_ascii=False)


def stage_terms(stage: Stage) -> Iterator[dict]:
    """The terms (``model.terms`` entries) of every config of ``stage``."""
    for name in stage.configs():
        model = (yaml.safe_load(config_path(name).read_text(encoding="utf-8")) or {}).get("model") or {}
        yield from (term for term in model.get("terms") or [] if isinstance(term, dict))


def reads_statistics(pipeline: Pipeline, stages: set[str]) -> bool:
    """Whether a GE term of one of ``stages``' configs reads ``--statistics``."""
    return any(isinstance(objective := term.get("objective"), dict)
               and (objective.get("init_args") or {}).get("constraints") == "statistics"
               for stage in pipeline.stages if stage.name in stages for term in stage_terms(stage))


def reads_text(stage: Stage) -> bool:
    """Whether a term of ``stage`` reads the raw text (``data: unlabeled``)."""
    return any(term.get("data") == "unlabeled" for term in stage_terms(stage))


def labeled_trees(pipeline: Pipeline, stages: set[str]) -> int | None:
    """The most labeled trees (``data.labeled_size``) a target stage of ``stages`` reads; None: the
    whole file; 0 where none reads the target's trees (every stage keeps its own data)."""
    sizes = []
    for stage in pipeline.stages:
        if stage.name not in stages or not stage.config or stage.data != "target":
            continue
        size = None
        for name in stage.configs():
            data = (yaml.safe_load(config_path(name).read_text(encoding="utf-8")) or {}).get("data") or {}
            size = data.get("labeled_size", size)
        if "--data.labeled_size" in stage.args[:-1]:
            size = int(stage.args[stage.args.index("--data.labeled_size") + 1])
        if size is None:
            return None
        sizes.append(size)
    return max(sizes, default=0)


def target_tokenizer(train: Path, dev: Path, trees: int | None, output: Path, dry_run: bool,
                     say: Callable[[str], None]) -> Path:
    """``OUTPUT/tokenizer.udpipe``: sentence splitting and tokenisation learned from ``train``'s
    first ``trees`` trees (None: all), early-stopped on as many dev trees; trained once (reused
    where it exists); with ``dry_run`` only said."""
    path = output / TOKENIZER_FILE
    first = ["--sentences", str(trees)] if trees else []
    say(f"tokenizer: {shlex.join(['treeexp', 'tokenizer', 'train', str(train), str(path), *first])}"
        + (" (trained: reused)" if path.is_file() else ""))
    if not dry_run and not path.is_file():
        from parser.data.tokenizer import train_tokenizer

        output.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        train_tokenizer(train, partial, trees, heldout=dev_trees(dev, trees, output))
        partial.replace(path)  # whole or not there: a stopped pipeline trains it again
    return path


def counted_statistics(train: Path, trees: int, output: Path, dry_run: bool, say: Callable[[str], None]) -> str:
    """``OUTPUT/statistics.yaml``: the statistics of ``train``'s first ``trees`` trees (``treeexp
    statistics count``, their bootstrap tolerances), counted once; with ``dry_run`` only said."""
    path = output / "statistics.yaml"
    say(f"statistics of the first {trees} trees: treeexp statistics count {train} --trees {trees} --output {path}")
    if not dry_run:
        from parser.statistics import count_once

        output.mkdir(parents=True, exist_ok=True)
        count_once(train, trees, path)
    return str(path)


def dev_trees(dev: Path, trees: int | None, output: Path) -> Path:
    """The target's dev trees a choice may read: ``dev`` whole, or its first ``trees`` sentences
    in ``OUTPUT/dev<K>.conllu`` (:func:`first_trees`)."""
    return dev if trees is None else first_trees(dev, trees, output / f"dev{trees}.conllu")


def first_trees(source: Path, trees: int, target: Path) -> Path:
    """``source``'s first ``trees`` sentences written as they are (comments, multiword tokens)
    into ``target`` (kept where it exists); ``target``."""
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_whole(target, "".join(b + "\n\n" for b in conllu_blocks(source)[:trees]))  # kept: never half of it
    return target


def parsed_las(candidates: dict[str, Sequence[Run]], dev: Path, scratch: Path) -> dict[str, float]:
    """Each candidate's mean LAS over its runs, every parser parsing ``dev`` alike (:func:`test_scores`, into ``scratch``)."""
    return {name: fmean([test_scores(r.best, dev, scratch / f"{name}-{k}.conllu")["las"] for k, r in enumerate(runs)])
            for name, runs in candidates.items()}


def facts_distances(candidates: dict[str, Sequence[Run]], statistics: str, text: Path) -> dict[str, float]:
    """Each candidate's mean distance outside the bands of the facts (or statistics) file
    ``statistics`` on the first ``CHOICE_SENTENCES`` sentences of ``text``, read as raw text
    (:func:`parser.statistics.facts_distance`): a choice with no dev tree."""
    from parser.data.sentences import read_conllu
    from parser.model import Parser
    from parser.statistics import facts_distance

    sentences = read_conllu(text)[:CHOICE_SENTENCES]
    return {name: fmean(facts_distance(Parser.load(r.best), statistics, sentences) for r in runs)
            for name, runs in candidates.items()}


def stage_overrides(stage: Stage, seed: int, treebank: str, root: str | None,
                    checkpoints: Callable[[str, int | None], list[str]]) -> list[str]:
    """The overrides of one run of a stage after its first config: its other configs, the data, the
    seed, its teachers and start, its own args."""
    configs = [arg for name in stage.configs()[1:] for arg in ("--config", str(config_path(name)))]
    data = (["--data.treebank", treebank] if stage.data == "target" else []) + (["--data.root", root] if root else [])
    teacher = stage.teacher
    teachers = checkpoints(teacher.stage, None if teacher.runs == "all" else seed) if teacher else []
    return [*configs, *data, "--seed_everything", str(seed), "--data.seed", str(seed),
            *(["--model.teacher", teachers[0] if len(teachers) == 1 else "[" + ", ".join(teachers) + "]"] if teachers else []),
            *(["--model.init", checkpoints(stage.init, seed)[0]] if stage.init else []), *stage.args]


def validates(configs: Sequence[Path], overrides: Sequence[str]) -> bool:
    """Whether a run of ``configs`` (in train.py's order) and ``overrides`` checks a dev set: its
    ``trainer.limit_val_batches``, the last that sets it deciding, is not 0 (a run that never
    validates gives its last checkpoint, :attr:`parser.runs.Run.best`)."""
    limit = None
    for path in configs:
        trainer = (yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}).get("trainer") or {}
        limit = trainer.get("limit_val_batches", limit)
    for i, arg in enumerate(overrides):
        key, _, value = arg.partition("=")
        if key == "--trainer.limit_val_batches":
            limit = yaml.safe_load(value if value else overrides[i + 1])
    return limit != 0


def check_stages(pipeline: Pipeline, given: dict[str, str], also: Sequence[str]) -> None:
    """ConfigurationError where ``given`` (stage -> checkpoint) or ``also`` names no stage of
    ``pipeline``, or a given checkpoint is not one (before anything trains)."""
    if unknown := sorted(set(given) - {s.name for s in pipeline.stages}):
        raise ConfigurationError(f"--given names no stage of the pipeline: {', '.join(unknown)}")
    if unknown := sorted(set(also) - {s.name for s in pipeline.stages}):
        raise ConfigurationError(f"--also names no stage of the pipeline: {', '.join(unknown)}")
    for path in given.values():
        check_checkpoint_path(path)


def run(pipeline: Pipeline, treebank: str, output: Path, root: str | None = None, dry_run: bool = False,
        given: dict[str, str] | None = None, say: Callable[[str], None] = print,
        statistics: str | None = None, also: Sequence[str] = (), trees: int | None = None,
        raw: tuple[str, Path] | None = None, ranked: Sequence[dict] | None = None) -> dict[str, list[Run]]:
    """Run (or with ``dry_run`` print) in order every stage the final parser needs and those
    ``also`` named, but those ``given`` (stage -> checkpoint); the runs of each stage.
    ``statistics``: the language's statistics or facts file, passed to every training run
    (``train.py --statistics``). ``trees``: the target's first K training trees are every
    target stage's labeled trees (the rest its raw text) and its first K dev trees its dev set;
    0: no stage reads a tree of the target, and a choice reads the raw text (:func:`facts_distances`).
    ``raw``: (the target's untokenised text, a tokenizer): every target stage whose terms read
    raw text reads it (``--data.unlabeled``), tokenised as the stream reads it. ``ranked``: the
    treebanks nearest the target (:func:`nearest_treebanks`), for the stages with relatives."""
    results = pipeline.results
    given = given or {}
    check_stages(pipeline, given, also)
    wanted = pipeline.needed(also)

    def runs_of(name: str, seed: int | None) -> list[Run]:
        """The runs of stage ``name`` of one seed (a given parser: its one run), every run for None."""
        runs = results[name]
        if seed is not None:
            runs = [r for r in runs if f"seed{seed}" in r.directory.parts] or runs[:1]
        return runs

    def checkpoints(name: str, seed: int | None) -> list[str]:
        return [str(r.best) for r in runs_of(name, seed)]

    def chose(stage: Stage, chosen: str) -> None:
        """The choice of ``chosen`` for ``stage``, a row per seed in ``runs.jsonl``."""
        results[stage.name] = results[chosen]
        for seed in stage.seeds:
            record(output, choice_row(stage.name, chosen, seed, runs_of(chosen, seed)[0], trees))

    for i, stage in enumerate(pipeline.stages, 1):
        if stage.name not in wanted:
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: not trained (the final parser does not use it; "
                f"--also {stage.name} trains it)")
            continue
        if stage.name in given:
            results[stage.name] = [Run.of_checkpoint(check_checkpoint_path(given[stage.name]))]
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: given, {given[stage.name]}")
            if not dry_run:
                record(output, result_row(stage.name, None, results[stage.name][0]))
            continue
        trained_here = {s.name for s in pipeline.stages if s.config and s.data == "target" and s.name not in given}
        if stage.choose and dry_run:
            results[stage.name] = results[stage.choose[0]]
            how = ("the smaller mean distance outside the bands of the facts file's rates on the raw text (no dev tree)"
                   if trees == 0 else "the higher mean dev LAS" if set(stage.choose) <= trained_here
                   else "the higher mean LAS on the target's dev trees, each parsing them")
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: whichever of {', '.join(stage.choose)} has {how}")
            continue
        if stage.average:
            results[stage.name] = [averaged(stage, seed, output, checkpoints, dry_run, say, f"stage {i}/{len(pipeline.stages)}")
                                   for seed in stage.seeds]
            if not dry_run:
                for seed, run_ in zip(stage.seeds, results[stage.name]):
                    record(output, average_row(stage.name, seed, run_))
            continue
        if stage.choose:
            if trees == 0:  # no dev tree: the parser nearer what is known of the language
                text = treebank_file(treebank, "train", root)
                distances = facts_distances({name: results[name] for name in stage.choose}, statistics, text)
                chosen = min(distances, key=distances.__getitem__)  # a tie: the first listed
                chose(stage, chosen)
                others = ", ".join(f"{name} {value:.4f}" for name, value in distances.items() if name != chosen)
                say(f"stage {i}/{len(pipeline.stages)} {stage.name}: {chosen}, the smaller mean distance outside the "
                    f"bands of {statistics} on {text}'s first {CHOICE_SENTENCES} sentences as raw text "
                    f"({distances[chosen]:.4f}; {others})")
                continue
            if set(stage.choose) <= trained_here:  # each validated on the target's dev trees in training
                means, how = {name: mean_dev_las(results[name]) for name in stage.choose}, "dev LAS"
            else:  # a parser trained elsewhere never saw the target's dev: every one parses it alike
                dev = dev_trees(treebank_file(treebank, "dev", root), trees, output)
                means = parsed_las({name: results[name] for name in stage.choose}, dev, output / "choose")
                how = f"LAS on {dev}"
            chosen = max(means, key=lambda name: means[name] if means[name] == means[name] else float("-inf"))
            chose(stage, chosen)
            others = ", ".join(f"{name} {value:.2f}" for name, value in means.items() if name != chosen)
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: {chosen}, the higher mean {how} "
                f"({means[chosen]:.2f}; {others})")
            continue
        results[stage.name] = []
        for seed in stage.seeds:
            folder = run_folder(output, stage.name, seed)
            overrides = [*stage_overrides(stage, seed, treebank, root, checkpoints),
                         *(["--statistics", statistics] if statistics else []),
                         *(["--data.labeled_size", str(trees), "--data.dev_size", str(trees)]
                           if trees and stage.data == "target" else []),
                         *(["--data.unlabeled", raw[0], "--data.unlabeled_tokenizer", str(raw[1])]
                           if raw and stage.data == "target" and reads_text(stage) else []),
                         *(["--data.relatives", relatives_option(stage.relatives, ranked)]
                           if stage.relatives and ranked != [] else [])]
            configs = [config_path(name) for name in stage.configs()]
            if dry_run:
                say(shell_line(fit_command(configs[0], overrides, folder)))
                where = folder / configs[-1].stem / "version_0"  # the run it will be, and the parser it will give
                results[stage.name].append(Run(where) if validates(configs, overrides)
                                           else Run.of_checkpoint(where / "checkpoints" / "last.ckpt"))
                continue
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}, seed {seed}: training in {folder}")
            run_ = fit(configs[0], overrides, folder)
            dev = run_.dev()
            outcome = (f"dev LAS {dev.get(MONITOR, float('nan')):.2f} at step {dev.get('step', '?')}" if dev
                       else f"no dev trees, the last checkpoint, step {run_.steps()}")
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}, seed {seed}: {outcome} ({run_.directory})")
            results[stage.name].append(run_)
            record(output, result_row(stage.name, seed, run_))
    return results


def averaged(stage: Stage, seed: int, output: Path, checkpoints: Callable[[str, int | None], list[str]],
             dry_run: bool, say: Callable[[str], None], step: str) -> Run:
    """An ``average:`` stage's parser of one seed: the weighted mean of its stages' parsers of that
    seed (:mod:`parser.averaging`), ``OUTPUT/<stage>/seed<S>/parser``, its command, commit and CPU
    time in ``average.json`` beside it; one written before is reused."""
    from parser.averaging import save_average

    folder = run_folder(output, stage.name, seed) / "parser"
    parsers, weights = [checkpoints(name, seed)[0] for name, _ in stage.average], [w for _, w in stage.average]
    command = shlex.join(["treeexp", "average", *parsers, "--weights", *map(str, weights), "--output", str(folder)])
    if dry_run:
        say(command)
    elif (folder / CONFIG).is_file():
        say(f"{step} {stage.name}, seed {seed}: averaged before, {folder}")
    else:
        started = time.process_time()
        folder.parent.mkdir(parents=True, exist_ok=True)
        save_average(parsers, weights, folder)
        write_whole(folder.parent / AVERAGE, json.dumps({
            **provenance_of(command), "cpu_minutes": round((time.process_time() - started) / 60, 1)}) + "\n")
        say(f"{step} {stage.name}, seed {seed}: {' + '.join(f'{w:g} x {name}' for name, w in stage.average)} -> {folder}")
    return Run.of_checkpoint(folder)


def average_row(stage: str, seed: int, run_: Run) -> dict:
    """An average's row of ``runs.jsonl`` (:func:`result_row`), with the command, commit and CPU
    minutes of its ``average.json``."""
    made = run_.directory.parent / AVERAGE
    return {**result_row(stage, seed, run_), **(json.loads(made.read_text(encoding="utf-8")) if made.is_file() else {})}


def result_row(stage: str, seed: int | None, run_: Run) -> dict:
    """A run's row of ``runs.jsonl``: stage, seed (None: given), checkpoint, dev scores, the
    costs and provenance :func:`~parser.runs.fit` recorded (None for a parser trained elsewhere)."""
    usage, provenance = run_.usage(), run_.provenance()
    return {"stage": stage, "seed": seed, "checkpoint": str(run_.best), "dev": run_.dev(),
            "cpu_minutes": round(usage["cpu_seconds"] / 60, 1) if usage else None,
            "peak_rss_mib": round(usage["peak_rss_bytes"] / 2**20) if usage else None,
            **{key: provenance.get(key) for key in ("commit", "command", "date", "machine")}}


def choice_row(stage: str, chosen: str, seed: int, run_: Run, trees: int | None) -> dict:
    """A choice's row of ``runs.jsonl``: the run of ``seed`` of the stage it took (checkpoint, dev
    scores), ``dev_trees`` it was chosen on (``--trees K``: the first K; 0: none, the facts; None:
    every one) and no cost of its own (the parsers it compared were trained before)."""
    return {"stage": stage, "seed": seed, "chosen": chosen, "checkpoint": str(run_.best), "dev": run_.dev(),
            "dev_trees": trees, "cpu_minutes": None, "peak_rss_mib": None, "commit": None, "command": None,
            "date": None, "machine": None}


def read_rows(output: Path) -> list[dict]:
    """The rows of ``output``'s ``runs.jsonl`` ([] before any)."""
    path = output / RESULTS
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line] if path.is_file() else []


def write_rows(output: Path, rows: Sequence[dict]) -> None:
    """``output``'s ``runs.jsonl``, replaced whole (a reader never sees half of it)."""
    write_whole(output / RESULTS, "".join(json.dumps(row) + "\n" for row in rows))


def record(output: Path, row: dict) -> None:
    """``row`` in ``output``'s ``runs.jsonl``, in the place of the row of its stage and seed if there is one."""
    rows = read_rows(output)
    key = (row["stage"], row["seed"])
    at = next((i for i, old in enumerate(rows) if (old["stage"], old["seed"]) == key), len(rows))
    write_rows(output, [*rows[:at], row, *rows[at + 1:]])


def run_label(row: dict) -> str:
    """A row's run as the table names it: ``seed<S>``, or ``given``."""
    return "given" if row["seed"] is None else f"seed{row['seed']}"


def report(rows: Sequence[dict]) -> str:
    """A line per row: stage (a choice: with the stage it took), run, dev LAS, test LAS (when scored),
    CPU minutes, peak MiB."""
    tested = any("test" in row for row in rows)

    def number(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    table = [["stage", "run", "dev LAS", *(["test LAS"] if tested else []), "CPU min", "peak MiB"]]
    table += [[row["stage"] + (f" ({row['chosen']})" if "chosen" in row else ""), run_label(row),
               number(row["dev"].get(MONITOR)),
               *([number(row.get("test", {}).get("las"))] if tested else []),
               number(row["cpu_minutes"], 1), number(row["peak_rss_mib"], 0)] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))) for line in table)


@contextmanager
def owning(output: Path) -> Iterator[None]:
    """``output`` for this process alone while it runs: ``OUTPUT/pipeline.lock`` holds its process
    id; a lock whose process is gone is taken over, one whose process lives is a ConfigurationError."""
    output.mkdir(parents=True, exist_ok=True)
    lock, mine = output / LOCK, output / f"{LOCK}.{os.getpid()}"
    mine.write_text(f"{os.getpid()}\n")
    try:
        while True:
            try:
                os.link(mine, lock)  # atomic, and never a lock without its process id
                break
            except FileExistsError:
                holder = int(lock.read_text().strip() or 0) if lock.is_file() else 0
                if holder and alive(holder):
                    raise ConfigurationError(f"{output} is taken by another treeexp pipeline (process {holder}): "
                                             "wait for it to end, or give another --output") from None
                lock.unlink(missing_ok=True)  # its process is gone
    finally:
        mine.unlink()
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def alive(process: int) -> bool:
    """Whether the process of this id is running (on this machine)."""
    try:
        os.kill(process, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


def test_scores(checkpoint: str | Path, test_file: Path, scratch: Path) -> dict[str, float]:
    """UAS and LAS (CoNLL 2018 definitions) of a saved parser on ``test_file``, parsed into ``scratch``
    (bf16 autocast where the processor does bf16 arithmetic)."""
    from parser.evaluate import score_checkpoint

    scores = score_checkpoint(checkpoint, test_file, scratch, precision="auto")
    return {"uas": scores["uas"], "las": scores["las"]}


def tested_rows(rows: Sequence[dict], test_file: Path, scratch: Path) -> list[dict]:
    """``rows`` with the test scores of each one's parser (:func:`test_scores`), each parser scored
    once: a row scored before keeps its scores, a choice takes those of the run it took."""
    scores = {row["checkpoint"]: row["test"] for row in rows if "test" in row}
    for row in rows:
        if row["checkpoint"] not in scores:
            scores[row["checkpoint"]] = test_scores(row["checkpoint"], test_file,
                                                    scratch / f"{row['stage']}-{run_label(row)}.conllu")
    return [{**row, "test": scores[row["checkpoint"]]} for row in rows]


def best_run(runs: Sequence[Run]) -> Run:
    return max(runs, key=lambda r: r.dev().get(MONITOR, float("-inf")))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        return main_report(argv[1:])
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                  epilog="treeexp pipeline report OUTPUT: the table of OUTPUT's runs")
    cli.add_argument("pipeline", help="a pipeline file, or the name of a shipped one (configs/pipelines/NAME.yaml)")
    cli.add_argument("--treebank", required=True, help="the target treebank's folder name, e.g. UD_Wolof-WTB")
    cli.add_argument("--root", default=None, help="the folder of UD treebanks (default: $UD_DIR, else data/ud)")
    cli.add_argument("--output", required=True, type=Path, help="the folder of every stage and of the final parser")
    cli.add_argument("--test", action="store_true", help="also parse the target's test file with every run and score it")
    cli.add_argument("--given", action="append", default=[], metavar="STAGE=CHECKPOINT",
                     help="a stage's parser trained elsewhere (not trained again), e.g. base=runs/base/parser")
    cli.add_argument("--seed", type=int, default=None,
                     help="the seed of every stage that trains one parser, for another run of the recipe in the same "
                          "--output (an ensemble's seeds stay, and its finished runs are reused)")
    cli.add_argument("--until", default=None, metavar="STAGE", help="stop after this stage")
    cli.add_argument("--also", action="append", default=[], metavar="STAGE",
                     help="train a stage the final parser does not use (one trained only to be compared with)")
    cli.add_argument("--statistics", default=None, metavar="FILE",
                     help="the language's statistics or facts file, for the stages whose GE reads it "
                          "(configs/facts/; treeexp statistics)")
    cli.add_argument("--trees", type=int, default=None, metavar="K",
                     help="a few trees: the target's first K training trees are labeled (the rest raw text) and its "
                          "first K dev trees choose (never more); GE without --statistics reads the K trees' "
                          "statistics (counted into OUTPUT/statistics.yaml)")
    cli.add_argument("--raw", default=None, metavar="FILE",
                     help="the target's untokenised text (paragraphs between blank lines), read by every stage that "
                          "learns from raw text, split and tokenised by the tokenizer the pipeline learns")
    cli.add_argument("--candidates", nargs="+", default=None, metavar="TREEBANK",
                     help="the treebanks (folders under --root, or languages: Kazakh) a stage with relatives may take "
                          "(default: every other treebank under --root)")
    cli.add_argument("--no-tokenizer", action="store_true",
                     help="learn no tokenizer (the parser then reads only tokenised text; no --raw)")
    cli.add_argument("--dry-run", action="store_true", help="print the train.py commands, train nothing")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def go() -> None:
        pipeline = read_pipeline(args.pipeline, args.until, args.seed)
        if malformed := [g for g in args.given if "=" not in g]:
            raise ConfigurationError(f"--given takes STAGE=CHECKPOINT, not {malformed[0]}")
        train = treebank_file(args.treebank, "train", args.root)  # a missing treebank fails here, before anything trains
        given = dict(g.split("=", 1) for g in args.given)
        check_stages(pipeline, given, args.also)
        if args.trees is not None and args.trees < 1:
            raise ConfigurationError(f"--trees takes K >= 1 trees, not {args.trees} (no tree: the no_treebank pipeline)")
        if args.raw and args.no_tokenizer:
            raise ConfigurationError("--raw is read through the tokenizer the pipeline learns: drop --no-tokenizer")
        if args.raw and not Path(args.raw).is_file():
            raise FileNotFoundError(2, "no such raw text file (--raw)", args.raw)
        needed = pipeline.needed(args.also)
        counted = args.trees and not args.statistics and reads_statistics(pipeline, needed)
        options = {"given": given, "also": args.also, "trees": args.trees}

        labeled = args.trees or labeled_trees(pipeline, needed)
        if labeled == 0:
            options["trees"] = 0
            if any(s.choose for s in pipeline.stages if s.name in needed) and not args.statistics:
                raise ConfigurationError("with no tree of the target a choice between parsers reads what a facts file "
                                         "says (docs/usage.md#a-languages-statistics): give --statistics FILE")
        if labeled == 0 and args.raw:
            raise ConfigurationError("--raw is tokenised by a tokenizer learned from the target's trees, and this "
                                     "pipeline labels none: give tokenised text (one sentence per line) instead")

        def prepare(dry_run: bool) -> tuple[str | None, Path | None, list[dict] | None]:
            """The statistics the GE stages read, the tokenizer and the nearest treebanks, each made first where needed."""
            statistics = counted_statistics(train, args.trees, args.output, dry_run, print) if counted else args.statistics
            tokenizer = None
            if args.no_tokenizer or labeled == 0:
                print("tokenizer: none (" + ("--no-tokenizer" if args.no_tokenizer else "no labeled tree to learn from")
                      + "): the parser reads tokenised text")
            else:
                dev = treebank_file(args.treebank, "dev", args.root)
                tokenizer = target_tokenizer(train, dev, labeled, args.output, dry_run, print)
            ranked = None
            if any(s.relatives for s in pipeline.stages if s.name in needed) and not (
                    dry_run and not (args.output / NEARNESS).is_file()):
                ranked = nearest_treebanks(train, labeled, args.raw and (args.raw, tokenizer), args.root,
                                           args.candidates, args.output, print)
            return statistics, tokenizer, ranked

        if args.dry_run:
            statistics, tokenizer, ranked = prepare(True)
            run(pipeline, args.treebank, args.output, args.root, dry_run=True, statistics=statistics,
                raw=args.raw and (args.raw, tokenizer), ranked=ranked, **options)
            return
        with owning(args.output):
            statistics, tokenizer, ranked = prepare(False)
            run(pipeline, args.treebank, args.output, args.root, statistics=statistics,
                raw=args.raw and (args.raw, tokenizer), ranked=ranked, **options)
            from parser.model import Parser

            final = best_run(pipeline.results[pipeline.final])
            saved = Parser.load(final.best).save(args.output / "parser")
            if tokenizer:
                shutil.copyfile(tokenizer, saved / TOKENIZER_FILE)
            if args.test:
                test_file, scratch = treebank_file(args.treebank, "test", args.root), args.output / "test"
                write_rows(args.output, tested_rows(read_rows(args.output), test_file, scratch))
            print(report(read_rows(args.output)))
            print(f"final parser ({pipeline.final}, {final.directory}): {saved}")

    run_reporting_errors(go)


def main_report(argv: list[str]) -> None:
    """``treeexp pipeline report OUTPUT``: the table of a pipeline's ``OUTPUT/runs.jsonl``."""
    cli = argparse.ArgumentParser(prog="treeexp pipeline report", description=main_report.__doc__.split(": ")[1])
    cli.add_argument("output", type=Path, help="a pipeline's --output folder")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def go() -> None:
        if not (rows := read_rows(args.output)):
            raise ConfigurationError(f"no {args.output / RESULTS}: no run of a pipeline has ended in {args.output}")
        print(report(rows))

    run_reporting_errors(go)


if __name__ == "__main__":
    main(sys.argv[1:])
