"""A language's statistics for GE: one file format (a rules file whose every constraint is a
rate with a tolerance, docs/usage.md#a-languages-statistics), written from what a user has.

    treeexp statistics count TREES.conllu --trees 20 --output stats.yaml [--families label_sides pair_sides valency]
    treeexp statistics facts configs/facts/wolof.yaml --output stats.yaml
    treeexp statistics measure stats.yaml PARSER TEXT.conllu [--sentences 500]   # a parser's rates beside the targets

``count``: the rates of the first K trees (every tree without ``--trees``: with a whole
treebank, the oracle a user never has, reported as such), each with a tolerance of
``--z`` bootstrap standard errors (sentences resampled; Effland & Collins 2023's margins);
rates counted over fewer than ``--min-count`` words or arcs are left out. ``facts``: a
linguist's facts file (:mod:`objectives.ge.facts`) written out as the constraints GE reads.
Either file is a GE term's ``constraints`` (``targets_from: rules``). ``measure``: each
statistic's expected rate under a parser on a text (its own tagger tagging it, as GE's
training does), beside the target and, where the text has trees, the gold rate: how far a
parser is from what a language is known to do, before or after GE.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import yaml

from objectives.distribution import TreeCRF
from objectives.ge import FAMILIES, LABEL_SIDES, MIN_COUNT, PAIR_SIDES, VALENCY, Constraint, load_constraints
from objectives.ge.compiled import compile_constraints
from objectives.ge.counts import denominators, gold_counts, label_groups, rates, statistics, tag_distributions
from objectives.ge.facts import read_facts

from parser.cli import run_reporting_errors
from parser.runs import config_path
from parser.data.batch import collate
from parser.data.sentences import Sentence, read_conllu
from parser.data.vocab import build_label_vocab, build_upos_vocab

UPOS_VOCAB = tuple(build_upos_vocab().itos)  # <pad>, <unk> (also `_`), the 17 UD tags
DEFAULT_FAMILIES = (LABEL_SIDES, PAIR_SIDES, VALENCY)  # ESR's child-relation-side, head-child side, valency


def counted_rates(constraints: Sequence[Constraint], sentences: Sequence[Sentence],
                  min_count: int = MIN_COUNT) -> tuple[torch.Tensor, torch.Tensor]:
    """Each constraint's rate in the gold trees of ``sentences`` and the words or arcs it is
    counted over: two ``(K,)`` float64, the rate NaN where that is below ``min_count``."""
    labels = build_label_vocab(sentences)
    batch = collate(sentences, build_upos_vocab(), labels)
    ids = compile_constraints(constraints, UPOS_VOCAB, None, labels.itos)
    fires, over = gold_counts(ids, batch.heads, batch.upos, batch.lengths, len(UPOS_VOCAB), batch.labels)
    return rates(fires, over, min_count)[: len(constraints)], over[: len(constraints)]


def counted_statistics(families: Sequence[str], sentences: Sequence[Sentence], min_count: int = MIN_COUNT,
                       resamples: int = 200, z: float = 1.0, seed: int = 1) -> list[Constraint]:
    """The constraints of ``families`` with their rates in ``sentences`` as targets and ``z``
    standard errors as tolerances, those counted over too few words or arcs left out.

    The standard error is the bootstrap's (``resamples`` resamplings of the sentences), at
    least the binomial one of the rate smoothed by half a count, ``sqrt(q (1 - q) / n)`` with
    ``q = (k + 1/2) / (n + 1)``: a rate never seen in a small sample (bootstrap error 0) is
    not taken for exactly 0."""
    constraints = [c for family in families for c in FAMILIES[family]()]
    counted, over = counted_rates(constraints, sentences, min_count)
    kept = [i for i, rate in enumerate(counted.tolist()) if not math.isnan(rate)]
    constraints, counted, over = [constraints[i] for i in kept], counted[kept], over[kept]
    generator = torch.Generator().manual_seed(seed)
    draws = [counted_rates(constraints, [sentences[i] for i in torch.randint(len(sentences), (len(sentences),),
                                                                              generator=generator).tolist()], 1)[0]
             for _ in range(resamples)]
    smoothed = ((counted * over + 0.5) / (over + 1)).clamp(max=1)
    errors = (smoothed * (1 - smoothed) / over).sqrt()
    if resamples > 1:
        errors = errors.maximum(_nanstd(torch.stack(draws)))
    return [dataclasses.replace(c, target=round(rate, 4), tolerance=round(z * error, 4))
            for c, rate, error in zip(constraints, counted.tolist(), errors.tolist())]


def _nanstd(draws: torch.Tensor) -> torch.Tensor:
    """The standard deviation of each column ``(R, K) -> (K,)`` over its finite values (0 where fewer than two)."""
    finite = draws.isfinite()
    n = finite.sum(0)
    mean = draws.nan_to_num(0.0).sum(0) / n.clamp_min(1)
    squares = torch.where(finite, (draws - mean) ** 2, 0.0).sum(0)
    return torch.where(n > 1, (squares / (n - 1).clamp_min(1)).sqrt(), 0.0)


def statistics_yaml(constraints: Sequence[Constraint], header: str) -> str:
    """A statistics (rules) file that :func:`objectives.ge.load_constraints` reads back, with
    ``header`` as comments; a field at its default is left out."""
    defaults = {f.name: f.default for f in dataclasses.fields(Constraint)}
    entries = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(c).items()
                if v is not None and v != defaults[k]} for c in constraints]
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + yaml.safe_dump({"constraints": entries}, sort_keys=False, default_flow_style=None, allow_unicode=True)


@torch.no_grad()
def measured_rates(parser, constraints: Sequence[Constraint], sentences: Sequence[Sentence],
                   batch_size: int = 32) -> torch.Tensor:
    """Each constraint's expected rate ``(K,)`` float64 under ``parser`` (a loaded
    :class:`~parser.model.Parser`) on the words of ``sentences``, batch-level sums over all of
    them, the tags its tagger's distributions where a word has none (NaN where a rate is
    counted over nothing)."""
    network = parser.network.eval()
    ids = compile_constraints(constraints, network.upos_vocab.itos, None, network.label_vocab.itos)
    totals = None
    for start in range(0, len(sentences), batch_size):
        chunk = [dataclasses.replace(s, upos=["_"] * len(s)) for s in sentences[start : start + batch_size]]
        batch = collate(chunk, network.upos_vocab, None)
        scores = network(batch.words)
        tags = tag_distributions(network.with_predicted_tags(batch, scores).upos, batch.lengths,
                                 len(network.upos_vocab), torch.float64)
        mu = TreeCRF(scores.arcs.double(), batch.lengths, parser.decoding.multiroot, validate_args=False).marginals
        labels = label_groups(ids, scores.labels.double().softmax(-1))
        stats = statistics(ids, mu, tags, labels)
        totals = stats if totals is None else totals + stats
    k = len(ids.child)
    over = denominators(ids, totals[:k], totals[k : 2 * k])  # expected arcs: below 1 is no reason to drop a rate
    return torch.where(over > 0, totals[:k] / over.clamp_min(1e-12), torch.nan)[: len(constraints)]


def measure_table(constraints: Sequence[Constraint], measured: torch.Tensor, gold: torch.Tensor | None) -> str:
    """A line per statistic: what it counts, target ± tolerance, the parser's rate, how far
    outside the band it lies (0 inside), and the gold rate where known."""
    header = ["statistic", "target", "parser", "outside", *(["gold"] if gold is not None else [])]
    lines, outside = [header], []
    for i, c in enumerate(constraints):
        what = " ".join(str(x) for x in (c.child, c.label or "", c.direction or "", "of", c.parent, "per", c.per) if x)
        rate = measured[i].item()
        gap = max(abs(rate - c.target) - (c.tolerance or 0.0), 0.0) if rate == rate else float("nan")
        outside.append(gap)
        lines.append([what, f"{c.target:.3f} ± {c.tolerance or 0:.3f}", f"{rate:.3f}", f"{gap:.3f}",
                      *([f"{gold[i].item():.3f}"] if gold is not None else [])])
    widths = [max(len(line[j]) for line in lines) for j in range(len(header))]
    table = ["  ".join(cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in enumerate(zip(line, widths)))
             for line in lines]
    mean = sum(g for g in outside if g == g) / max(sum(g == g for g in outside), 1)
    return "\n".join([*table, f"mean distance outside the bands: {mean:.4f} over {len(constraints)} statistics"])


def count_once(train: Path, trees: int | None, output: Path, resamples: int = 200) -> Path:
    """``output``: the statistics of ``train``'s first ``trees`` trees (None: all, an oracle), as
    ``treeexp statistics count`` writes them; counted only when ``output`` is not there yet."""
    if not output.is_file():
        main(["count", str(train), *(["--trees", str(trees)] if trees is not None else []),
              "--resamples", str(resamples), "--output", str(output)])
    return output


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="treeexp statistics", description=__doc__.split("\n\n")[0])
    sources = parser.add_subparsers(dest="source", required=True)
    count = sources.add_parser("count", help="rates counted on annotated trees, tolerances from a bootstrap")
    count.add_argument("trees", type=Path, nargs="+", help="CoNLL-U files with the trees, read in turn")
    count.add_argument("--trees", dest="size", type=int, help="only the first K trees (default: all: an oracle)")
    count.add_argument("--skip", type=int, default=0, help="trees left out at the start (before the first K)")
    count.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=list(DEFAULT_FAMILIES))
    count.add_argument("--min-count", type=int, default=MIN_COUNT, help="least words or arcs a rate is counted over")
    count.add_argument("--resamples", type=int, default=200, help="bootstrap resamplings of the trees")
    count.add_argument("--z", type=float, default=1.0, help="tolerance: this many bootstrap standard errors")
    count.add_argument("--seed", type=int, default=1)
    count.add_argument("--output", type=Path, required=True)
    facts = sources.add_parser("facts", help="a linguist's facts file written out as constraints")
    facts.add_argument("facts", type=Path)
    facts.add_argument("--output", type=Path, required=True)
    measure = sources.add_parser("measure", help="a parser's expected rates of the statistics on a text")
    measure.add_argument("statistics", type=Path, help="a statistics, rules or facts file")
    measure.add_argument("parser", help="a saved parser (.ckpt or directory)")
    measure.add_argument("text", type=Path, help="CoNLL-U (trees, when it has them, give the gold rates too)")
    measure.add_argument("--sentences", type=int, default=None, help="only the first N sentences")
    args = parser.parse_args(argv)
    command = "treeexp statistics " + shlex.join(sys.argv[1:] if argv is None else argv)

    def run() -> None:
        if args.source == "measure":
            from parser.model import Parser

            constraints = load_constraints(config_path(args.statistics))
            sentences = read_conllu(args.text)[: args.sentences]
            has_trees = all(s.heads is not None and "_" not in s.upos for s in sentences)
            gold = counted_rates(constraints, sentences, 1)[0] if has_trees else None
            print(measure_table(constraints, measured_rates(Parser.load(args.parser), constraints, sentences), gold))
            return
        if args.source == "facts":
            constraints = read_facts(config_path(args.facts))
            header = f"GE statistics from the facts of {args.facts}\n{command}"
        else:
            sentences = [s for path in args.trees for s in read_conllu(path)][args.skip:]
            sentences = sentences[: args.size] if args.size is not None else sentences
            if not sentences:
                raise ValueError(f"no trees in {', '.join(map(str, args.trees))} after --skip {args.skip}")
            constraints = counted_statistics(args.families, sentences, args.min_count, args.resamples, args.z, args.seed)
            what = f"the first {args.size} trees" if args.size is not None else f"all {len(sentences)} trees (an oracle)"
            header = (f"GE statistics of {' + '.join(args.families)}: rates in {what} of "
                      f"{', '.join(map(str, args.trees))}, tolerance {args.z:g} bootstrap standard errors\n{command}")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(statistics_yaml(constraints, header), encoding="utf-8")
        print(f"{len(constraints)} statistics -> {args.output}")

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
