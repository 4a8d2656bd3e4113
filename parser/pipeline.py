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
        teachers: teachers             # every run of that stage teaches (--model.teacher, an ensemble)
      - name: round2
        config: configs/low_resource_multilingual.yaml
        teacher: student               # the run of the same seed teaches
    final: round2                      # the parser saved to OUTPUT/parser (default: the last stage)

``config: [A, B]`` reads several config files, each over the one before (train.py's
``--config A --config B``; the run is named after the last); ``init: STAGE`` starts each run
from that stage's parser of the same seed (or its first: ``--model.init``); ``data: own`` keeps
a stage's own treebanks (a multilingual base) instead of the target's; ``choose: [A, B]``
trains nothing and stands for whichever of A and B has the higher mean dev LAS, with its reason
printed (a rule chosen on dev only). A finished stage is reused, a stopped one resumes from its
``last.ckpt``; ``--given STAGE=CHECKPOINT`` takes a stage's parser from elsewhere (a
multilingual base trained once for every language); ``--seed S`` runs the recipe again with
another seed beside the first (the ensemble's runs reused); ``--dry-run`` prints the commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.datamodule import DependencyDataModule
from parser.runs import CONFIGS, Run, RunFailed, config_path, fit, fit_command, mean_dev_las, shell_line
from parser.training.checkpoint import check_checkpoint_path
from parser.training.callbacks import MONITOR

@dataclass(frozen=True)
class Stage:
    """One step of a pipeline (see the module docstring for the fields)."""

    name: str
    config: str | tuple[str, ...] | None = None  # one config file, or several in order
    seeds: tuple[int, ...] = (1,)
    args: tuple[str, ...] = ()
    teachers: str | None = None
    teacher: str | None = None
    init: str | None = None
    data: str = "target"
    choose: tuple[str, ...] = ()

    def configs(self) -> tuple[str, ...]:
        """Its config files, in the order train.py reads them."""
        return (self.config,) if isinstance(self.config, str) else self.config or ()

    def earlier(self) -> list[str]:
        """The stages this one reads."""
        return [s for s in (self.teachers, self.teacher, self.init, *self.choose) if s]


@dataclass
class Pipeline:
    stages: list[Stage]
    final: str
    results: dict[str, list[Run]] = field(default_factory=dict)


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
        if unknown := sorted(set(entry) - known):
            raise ConfigurationError(f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values = {k: tuple(str(a) for a in v) if k in ("args", "choose") or (k == "config" and isinstance(v, list))
                  else tuple(v) if k == "seeds" else v for k, v in entry.items()}
        stage = Stage(**values)
        if seed is not None and len(stage.seeds) == 1:
            stage = dataclasses.replace(stage, seeds=(seed,))
        if stage.name in {s.name for s in stages}:
            raise ConfigurationError(f"{where}: the name is taken by an earlier stage")
        if missing := [s for s in stage.earlier() if s not in {s.name for s in stages}]:
            raise ConfigurationError(f"{where}: reads {', '.join(missing)}, which is not an earlier stage")
        if bool(stage.config) == bool(stage.choose):
            raise ConfigurationError(f"{where}: give a config to train, or choose: [stages] to choose between")
        if missing := [name for name in stage.configs() if not config_path(name).is_file()]:
            raise ConfigurationError(f"{where}: no config file {', '.join(missing)}")
        if stage.data not in ("target", "own"):
            raise ConfigurationError(f"{where}: data must be 'target' or 'own', not {stage.data!r}")
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


def stage_overrides(stage: Stage, seed: int, treebank: str, root: str | None,
                    checkpoints: Callable[[str, int | None], list[str]]) -> list[str]:
    """The overrides of one run of a stage after its first config: its other configs, the data, the
    seed, its teachers and start, its own args."""
    configs = [arg for name in stage.configs()[1:] for arg in ("--config", str(config_path(name)))]
    data = (["--data.treebank", treebank] if stage.data == "target" else []) + (["--data.root", root] if root else [])
    teachers = checkpoints(stage.teachers, None) if stage.teachers else checkpoints(stage.teacher, seed) if stage.teacher else []
    return [*configs, *data, "--seed_everything", str(seed), "--data.seed", str(seed),
            *(["--model.teacher", teachers[0] if len(teachers) == 1 else "[" + ", ".join(teachers) + "]"] if teachers else []),
            *(["--model.init", checkpoints(stage.init, seed)[0]] if stage.init else []), *stage.args]


def run(pipeline: Pipeline, treebank: str, output: Path, root: str | None = None, dry_run: bool = False,
        given: dict[str, str] | None = None, say: Callable[[str], None] = print) -> dict[str, list[Run]]:
    """Run (or with ``dry_run`` print) every stage in order, but those ``given`` (stage ->
    checkpoint); the runs of each stage."""
    results = pipeline.results
    given = given or {}
    if unknown := sorted(set(given) - {s.name for s in pipeline.stages}):
        raise ConfigurationError(f"--given names no stage of the pipeline: {', '.join(unknown)}")

    def checkpoints(name: str, seed: int | None) -> list[str]:
        runs = results[name]
        if seed is not None:
            runs = [r for r in runs if f"seed{seed}" in r.directory.parts] or runs[:1]
        return [str(r.best) for r in runs]

    for i, stage in enumerate(pipeline.stages, 1):
        if stage.name in given:
            results[stage.name] = [Run.of_checkpoint(check_checkpoint_path(given[stage.name]))]
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: given, {given[stage.name]}")
            continue
        if stage.choose and dry_run:
            results[stage.name] = results[stage.choose[0]]
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: whichever of {', '.join(stage.choose)} has the higher mean dev LAS")
            continue
        if stage.choose:
            means = {name: mean_dev_las(results[name]) for name in stage.choose}
            chosen = max(means, key=lambda name: means[name] if means[name] == means[name] else float("-inf"))
            results[stage.name] = results[chosen]
            others = ", ".join(f"{name} {value:.2f}" for name, value in means.items() if name != chosen)
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}: {chosen}, the higher mean dev LAS "
                f"({means[chosen]:.2f}; {others})")
            continue
        results[stage.name] = []
        for seed in stage.seeds:
            folder = output / stage.name / f"seed{seed}"
            overrides = stage_overrides(stage, seed, treebank, root, checkpoints)
            configs = [config_path(name) for name in stage.configs()]
            if dry_run:
                say(shell_line(fit_command(configs[0], overrides, folder)))
                results[stage.name].append(Run(folder / configs[-1].stem / "version_0"))  # where it will be
                continue
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}, seed {seed}: training in {folder}")
            run_ = fit(configs[0], overrides, folder)
            dev = run_.dev()
            say(f"stage {i}/{len(pipeline.stages)} {stage.name}, seed {seed}: dev LAS {dev.get(MONITOR, float('nan')):.2f} "
                f"at step {dev.get('step', '?')} ({run_.directory})")
            results[stage.name].append(run_)
    return results


def test_scores(checkpoint: str | Path, test_file: Path, scratch: Path) -> dict[str, float]:
    """UAS and LAS (CoNLL 2018 definitions) of a saved parser on ``test_file``, parsed into ``scratch``
    (bf16 autocast where the processor does bf16 arithmetic)."""
    from parser.evaluate import evaluate
    from parser.predict import predict

    scratch.parent.mkdir(parents=True, exist_ok=True)
    predict(str(checkpoint), str(test_file), str(scratch), precision="auto")
    scores = evaluate(test_file, scratch)
    return {"uas": scores["uas"], "las": scores["las"]}


def table(pipeline: Pipeline, test_file: Path | None, output: Path) -> str:
    """A line per run: stage, seed folder, dev LAS, and test LAS when a test file is given."""
    lines = ["stage        run                 dev LAS" + ("  test LAS" if test_file else "")]
    for stage in pipeline.stages:
        for run_ in pipeline.results[stage.name]:
            name = "given" if run_.given else run_.directory.parts[-3]  # seed<S>
            line = f"{stage.name:<12} {name:<19} {run_.dev().get(MONITOR, float('nan')):7.2f}"
            if test_file:
                line += f"  {test_scores(run_.best, test_file, output / 'test' / f'{stage.name}-{name}.conllu')['las']:8.2f}"
            lines.append(line)
    return "\n".join(lines)


def best_run(runs: Sequence[Run]) -> Run:
    return max(runs, key=lambda r: r.dev().get(MONITOR, float("-inf")))


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    cli.add_argument("--dry-run", action="store_true", help="print the train.py commands, train nothing")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)

    def go() -> None:
        pipeline = read_pipeline(args.pipeline, args.until, args.seed)
        if malformed := [g for g in args.given if "=" not in g]:
            raise ConfigurationError(f"--given takes STAGE=CHECKPOINT, not {malformed[0]}")
        data = DependencyDataModule(args.treebank, root=args.root)
        data.paths("train")  # a missing treebank fails here, before anything trains
        test_file = data.path("test") if args.test else None
        try:
            run(pipeline, args.treebank, args.output, args.root, args.dry_run, dict(g.split("=", 1) for g in args.given))
        except RunFailed as error:
            print(f"error: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        if args.dry_run:
            return
        from parser.model import Parser

        final = best_run(pipeline.results[pipeline.final])
        saved = Parser.load(final.best).save(args.output / "parser")
        print(table(pipeline, test_file, args.output))
        print(f"final parser ({pipeline.final}, {final.directory}): {saved}")

    run_reporting_errors(go)


if __name__ == "__main__":
    main(sys.argv[1:])
