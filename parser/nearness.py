"""Which treebanks are nearest a new language, counted from what its user has: K trees and raw text.

    treeexp nearness --target TREES.conllu --trees 100 [--raw TEXT ...] [--candidates UD_A Kazakh ... | --root UD_DIR]

Each candidate treebank is sampled the same way (its train, dev then test file, the first
``--candidate-words`` words) and compared with the target by three counts, no training:

- ``upos_ngrams``: Jensen-Shannon divergence of UPOS unigram, bigram and trigram distributions
  (mean over the three orders; bits, 0 for the same distribution, at most 1);
- ``head_direction``: for each (child UPOS, universal relation), the share of heads on the left,
  its absolute difference averaged with the two's mean frequencies as weights (0 to 1);
- ``subword_overlap``: the share of the raw text's tokens (multilingual-e5-small pieces, or
  whitespace words) that occur in the candidate's words (0 to 1, a similarity).

The ranking is by the mean of the candidate's ranks under the measures asked for (1 is nearest).
Without ``--raw``, the target file's sentences after the first K are the raw text (their words only).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from objectives.conventions import ConfigurationError

from parser.cli import run_reporting_errors
from parser.data.datamodule import treebank_files
from parser.data.sentences import Sentence, parse_record, read_conllu, read_sentences, records
from parser.fetch import default_root

MEASURES = ("upos_ngrams", "head_direction", "subword_overlap")
SIMILARITIES = {"subword_overlap"}  # higher is nearer; the others are distances
RAW_TEXT_MEASURES = ("subword_overlap",)  # the measures that read no tree of the target
ORDERS = (1, 2, 3)  # UPOS n-gram orders
CANDIDATE_WORDS = 10_000  # every release of the many-language and relatives sets has at least this many
SMOOTHING = 0.5  # added to every count of an n-gram or a direction


@dataclass
class Profile:
    """What the measures compare of a sample of sentences: UPOS n-gram counts (one Counter per
    order), heads on the left and arcs per (child UPOS, universal relation), and the token counts
    of its words (raw text: pieces or words)."""

    ngrams: list[Counter] = field(default_factory=lambda: [Counter() for _ in ORDERS])
    left: Counter = field(default_factory=Counter)
    arcs: Counter = field(default_factory=Counter)
    tokens: Counter = field(default_factory=Counter)
    words: int = 0


def tree_profile(sentences: Iterable[Sentence]) -> Profile:
    """The UPOS n-grams (with ``<s>``/``</s>`` at the ends) and head directions of annotated sentences."""
    profile = Profile()
    for sentence in sentences:
        tags = ["<s>", *sentence.upos, "</s>"]
        for order, counts in zip(ORDERS, profile.ngrams):
            counts.update(tuple(tags[i:i + order]) for i in range(len(tags) - order + 1))
        for child, (head, relation) in enumerate(zip(sentence.heads, sentence.deprels), 1):
            if head:  # the root's arc has no side
                key = (sentence.upos[child - 1], relation.split(":")[0])
                profile.arcs[key] += 1
                profile.left[key] += head < child
        profile.words += len(sentence)
    return profile


def jensen_shannon(first: Counter, second: Counter, smoothing: float = SMOOTHING) -> float:
    """Jensen-Shannon divergence in bits (0 to 1) of two count tables, each smoothed by
    ``smoothing`` over the union of their keys."""
    keys = list(first.keys() | second.keys())
    p = np.array([first[k] for k in keys], dtype=np.float64) + smoothing
    q = np.array([second[k] for k in keys], dtype=np.float64) + smoothing
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2
    return float((p * np.log2(p / m)).sum() + (q * np.log2(q / m)).sum()) / 2


def upos_ngrams(target: Profile, candidate: Profile) -> float:
    """The mean over orders 1-3 of the Jensen-Shannon divergence of UPOS n-gram counts (bits)."""
    return float(np.mean([jensen_shannon(t, c) for t, c in zip(target.ngrams, candidate.ngrams)]))


def head_direction(target: Profile, candidate: Profile) -> float:
    """Mean absolute difference of the share of heads on the left per (child UPOS, relation) seen
    in both, weighted by the mean of its two frequency shares; shares smoothed by half an arc
    each side. 1 where the two share no (child UPOS, relation)."""
    keys = list(target.arcs.keys() & candidate.arcs.keys())
    if not keys:
        return 1.0

    def shares(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
        arcs = np.array([profile.arcs[k] for k in keys], dtype=np.float64)
        left = np.array([profile.left[k] for k in keys], dtype=np.float64)
        return (left + SMOOTHING) / (arcs + 2 * SMOOTHING), arcs / sum(profile.arcs.values())

    (p, f), (q, g) = shares(target), shares(candidate)
    weights = (f + g) / 2
    return float((weights * np.abs(p - q)).sum() / weights.sum())


def subword_overlap(target: Profile, candidate: Profile) -> float:
    """The share of the target's raw-text tokens (occurrences) whose type occurs in the candidate's
    words; 1 for a text within the candidate's, not symmetric."""
    total = sum(target.tokens.values())
    return sum(n for token, n in target.tokens.items() if token in candidate.tokens) / total if total else 0.0


class NoCandidates(ConfigurationError):
    """Nothing to rank: no treebank but the target's own among the candidates."""


MEASURE_FUNCTIONS = {"upos_ngrams": upos_ngrams, "head_direction": head_direction, "subword_overlap": subword_overlap}


@functools.cache
def e5_pieces():
    """multilingual-e5-small's tokenizer, loaded once a process."""
    from transformers import AutoTokenizer

    from parser.network.pretrained import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("multilingual-e5-small"))


class Tokenizer:
    """Words to the tokens ``subword_overlap`` counts: multilingual-e5-small's pieces (``e5``) or
    the words themselves (``words``)."""

    def __init__(self, kind: str = "e5"):
        self.kind = kind
        if kind == "e5":
            self.pieces = e5_pieces()
        elif kind != "words":
            raise ConfigurationError(f"tokens must be 'e5' or 'words', not {kind!r}")

    def count(self, sentences: Sequence[Sentence]) -> Counter:
        """Token counts of the sentences' words."""
        if self.kind == "words":
            return Counter(word for sentence in sentences for word in sentence.words)
        encoded = self.pieces([s.words for s in sentences], is_split_into_words=True, add_special_tokens=False)
        return Counter(piece for ids in encoded["input_ids"] for piece in ids)


def candidate_folders(name: str, root: Path) -> list[Path]:
    """A candidate as treebank folders (or a file): ``name`` is a folder or a file, a treebank folder
    under ``root`` (``UD_Kazakh-KTB``) (also without ``UD_``) or a language (``Kazakh``: every
    ``UD_Kazakh-*`` there)."""
    path = next((p for p in (Path(name), root / name, root / f"UD_{name}") if p.exists()), None)
    folders = [path] if path else sorted(root.glob(f"UD_{name}-*"))
    if not folders:
        raise ConfigurationError(f"no treebank {name!r}: neither a path nor a treebank or language under {root}")
    return folders


def candidate_files(name: str, root: Path) -> list[Path]:
    """A candidate's CoNLL-U files (:func:`candidate_folders`), each folder's train, dev then test."""
    return [f for folder in candidate_folders(name, root) for f in ([folder] if folder.is_file() else treebank_files(folder))]


def sample(files: Sequence[Path], words: int) -> Iterator[Sentence]:
    """The files' annotated sentences in turn until ``words`` words (the sentence that passes it
    included), read lazily: a large treebank costs only what is used."""
    seen = 0
    for path in files:
        for record in records(path, text=False):
            if seen >= words:
                return
            sentence = parse_record(path, record, text=False, trees=True)
            seen += len(sentence)
            yield sentence


@dataclass
class Nearness:
    """One candidate's measures against the target and its rank (1 nearest), mean rank over the measures."""

    treebank: str
    files: list[str]
    words: int
    measures: dict[str, float]
    mean_rank: float = 0.0
    rank: int = 0

    def row(self) -> dict:
        return {"treebank": self.treebank, "rank": self.rank, "mean_rank": self.mean_rank, **self.measures,
                "words": self.words, "files": self.files}


def mean_ranks(values: np.ndarray, similar: Sequence[bool]) -> np.ndarray:
    """``(C, M)`` measures of C candidates -> ``(C,)`` each candidate's mean over the M measures of
    its rank (1 nearest; ties share their mean rank); ``similar[m]``: higher is nearer."""
    keyed = np.where(np.array(similar), -values, values)
    ranks = np.empty_like(keyed)
    for m in range(keyed.shape[1]):
        column = keyed[:, m]
        for i, value in enumerate(column):
            ranks[i, m] = (column < value).sum() + ((column == value).sum() + 1) / 2
    return ranks.mean(1)


def rank(target: Sequence[Sentence], raw: Sequence[Sentence], candidates: dict[str, Sequence[Path]],
         measures: Sequence[str] = MEASURES, tokens: str = "e5",
         candidate_words: int = CANDIDATE_WORDS) -> list[Nearness]:
    """The candidates (name: its files) ranked for the target's trees and raw text, nearest first."""
    unknown = [m for m in measures if m not in MEASURE_FUNCTIONS]
    if unknown or not measures:
        raise ConfigurationError(f"measures must be among {', '.join(MEASURES)}, not {', '.join(unknown) or 'none'}")
    if not candidates:
        raise NoCandidates("no candidate treebanks")
    if "subword_overlap" in measures and not raw:
        raise ConfigurationError("subword_overlap needs raw text: give --raw, or fewer --trees than the target file has")
    tokenizer = Tokenizer(tokens) if "subword_overlap" in measures else None
    mine = tree_profile(target)
    if tokenizer:
        mine.tokens = tokenizer.count(raw)
    results = []
    for name, files in candidates.items():
        sentences = list(sample(files, candidate_words))
        theirs = tree_profile(sentences)
        if tokenizer:
            theirs.tokens = tokenizer.count(sentences)
        used = sorted({s.path for s in sentences}, key=[str(f) for f in files].index)
        results.append(Nearness(name, used, theirs.words, {m: MEASURE_FUNCTIONS[m](mine, theirs) for m in measures}))
    values = np.array([[r.measures[m] for m in measures] for r in results])
    for result, mean in zip(results, mean_ranks(values, [m in SIMILARITIES for m in measures])):
        result.mean_rank = float(mean)
    results.sort(key=lambda r: r.mean_rank)
    for position, result in enumerate(results, 1):
        result.rank = position
    return results


def folders_of(path: Path) -> set[Path]:
    """The folder a file is in, as spelled and with links resolved: a treebank's file is the target's
    where either is the target's (a test file linked into the target's folder from elsewhere is its own)."""
    return {path.absolute().parent, path.resolve().parent}


def rank_target(target: Path, trees: int | None, raw: Sequence[Sentence] | None, root: Path,
                names: Sequence[str] | None = None, measures: Sequence[str] | None = None, tokens: str = "e5",
                candidate_words: int = CANDIDATE_WORDS) -> list[Nearness]:
    """The treebanks ``names`` (folders or names under ``root``, languages; default every ``UD_*``
    folder there) ranked for the first ``trees`` trees of the ``target`` file (None: all) and
    the ``raw`` text (None: the file's sentences after them), the target's own folder left out;
    by ``measures`` (None: every one, and with no tree the raw text's, subword_overlap)."""
    if trees == 0:
        if needing := [m for m in measures or () if m not in RAW_TEXT_MEASURES]:
            raise ConfigurationError(f"{', '.join(needing)} counts trees, and --trees 0 gives none: "
                                     "the raw text's measure is subword_overlap")
        measures = measures or RAW_TEXT_MEASURES
    if names is None and not root.is_dir():
        raise ConfigurationError(f"no folder of treebanks {root}: give --root or --candidates")
    sentences = read_conllu(target)
    labeled = sentences[:trees]
    raw = sentences[len(labeled):] if raw is None else raw
    mine = folders_of(target)
    names = names or sorted(p.name for p in root.glob("UD_*") if p.is_dir() and any(p.glob("*.conllu")))
    candidates = {name: files for name in names
                  if (files := [f for f in candidate_files(name, root) if not folders_of(f) & mine])}
    return rank(labeled, raw, candidates, measures or MEASURES, tokens, candidate_words)


def relative_shares(ranked: Sequence[dict], nearest: int | None, share: float, alike: bool = False) -> dict[str, float]:
    """The ``nearest`` first of ``ranked`` (rows of :meth:`Nearness.row`, nearest first; None: all) sharing
    ``share`` of a training epoch, each in proportion to ``1 / mean_rank``, or equally where
    ``alike`` (``--data.relatives``)."""
    kept = ranked[:nearest]
    weights = [1.0 if alike else 1 / row["mean_rank"] for row in kept]
    return {row["treebank"]: share * weight / sum(weights) for row, weight in zip(kept, weights)}


def table(results: Sequence[Nearness]) -> str:
    """The ranking as aligned text: rank, treebank, each measure, mean rank."""
    measures = list(results[0].measures) if results else []
    width = max([len("treebank"), *(len(r.treebank) for r in results)])
    header = f"{'rank':>4}  {'treebank':<{width}}" + "".join(f"  {m:>15}" for m in measures) + f"  {'mean rank':>9}"
    lines = [f"{r.rank:>4}  {r.treebank:<{width}}" + "".join(f"  {r.measures[m]:>15.4f}" for m in measures)
             + f"  {r.mean_rank:>9.2f}" for r in results]
    return "\n".join([header, *lines])


def main(argv: Sequence[str] | None = None) -> None:
    cli = argparse.ArgumentParser(prog="treeexp nearness", description=__doc__.split("\n\n")[0])
    cli.add_argument("--target", type=Path, required=True, help="the target's trees (CoNLL-U)")
    cli.add_argument("--trees", type=int, help="only its first K trees (default: all; 0: none, the file is raw text)")
    cli.add_argument("--raw", type=Path, nargs="+",
                     help="the target's raw text (.txt one sentence per line, or CoNLL-U; default: the target file "
                          "after the first K trees)")
    cli.add_argument("--candidates", nargs="+",
                     help="treebanks (folders or names under --root) or languages (Kazakh: UD_Kazakh-*); "
                          "default: every UD_* folder under --root")
    cli.add_argument("--root", type=Path, help="the folder of UD treebanks (default: $UD_DIR, else data/ud)")
    cli.add_argument("--measure", nargs="+", choices=MEASURES,
                     help="the measures the ranking averages (default: all; with --trees 0 subword_overlap)")
    cli.add_argument("--tokens", choices=("e5", "words"), default="e5",
                     help="subword_overlap's tokens: multilingual-e5-small pieces or whitespace words")
    cli.add_argument("--candidate-words", type=int, default=CANDIDATE_WORDS,
                     help="words sampled from each candidate (its train, dev, then test file)")
    cli.add_argument("--json", action="store_true", help="print a JSON list of rows instead of a table")
    args = cli.parse_args(argv)

    def run() -> None:
        for option, value, least in (("--trees", args.trees, 0), ("--candidate-words", args.candidate_words, 1)):
            if value is not None and value < least:
                raise ConfigurationError(f"{option} must be at least {least}, not {value}")
        raw = [s for path in args.raw for s in read_sentences(path)] if args.raw else None
        results = rank_target(args.target, args.trees, raw, args.root or default_root(), args.candidates,
                              args.measure, args.tokens, args.candidate_words)
        print(json.dumps([r.row() for r in results], ensure_ascii=False) if args.json else table(results))

    run_reporting_errors(run)


if __name__ == "__main__":
    main()
