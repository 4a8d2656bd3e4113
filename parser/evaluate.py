"""UAS, LAS, CLAS and UPOS accuracy of a predicted CoNLL-U file against the gold file.

Definitions of the CoNLL 2018 shared task scorer (conll18_ud_eval.py) for gold
tokenisation: every syntactic word counts, punctuation included; DEPREL is compared on
its universal part (before ``:``); CLAS is the F1 over content words, i.e. gold words
with a content gold DEPREL against system words with a content system DEPREL, a word
being correct when HEAD and universal DEPREL match; UPOS is the share of words with the
gold tag. Both files must hold valid trees, over the same words or over the same text tokenised
otherwise (a parse of raw text: words aligned as the official scorer aligns them,
:mod:`parser.word_alignment`, and tokens, sentences and words F1 reported); ``--validate`` first counts
what UD's validator rejects in PRED: HEAD 0 without DEPREL ``root`` or the reverse, sentences
without exactly one word on the root, cycles.

    python -m parser.evaluate GOLD PRED [--nonprojective] [--validate]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from objectives.arborescence import is_tree

from parser.cli import run_reporting_errors
from parser.data.sentences import ConlluError, Sentence, parse_record, read_conllu, records
from parser.data.vocab import universal_deprel
from parser.word_alignment import align, check_same_text, tokenised

ROOT = "root"  # UD: DEPREL is root exactly where HEAD is 0

# As in conll18_ud_eval.py: everything but the functional relations
# (aux case cc clf cop det mark), punct and non-UD labels.
CONTENT_DEPRELS = frozenset({
    "nsubj", "obj", "iobj", "csubj", "ccomp", "xcomp", "obl", "vocative", "expl",
    "dislocated", "advcl", "advmod", "discourse", "nmod", "appos", "nummod", "acl", "amod",
    "conj", "fixed", "flat", "compound", "list", "parataxis", "orphan", "goeswith",
    "reparandum", "root", "dep",
})


@dataclass(frozen=True)
class Score:
    """Counts of correct, gold and system words; precision, recall and F1 in percent."""

    correct: int
    gold: int
    system: int

    @property
    def precision(self) -> float:
        return 100 * self.correct / self.system if self.system else 0.0

    @property
    def recall(self) -> float:
        return 100 * self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        total = self.gold + self.system
        return 200 * self.correct / total if total else 0.0


def aligned(gold_path: str | os.PathLike, pred_path: str | os.PathLike) -> list[tuple[Sentence, Sentence]]:
    """The (gold, predicted) sentence pairs of two files over the same words; ConlluError
    where they first differ."""
    gold, pred = read_conllu(gold_path), read_conllu(pred_path)
    for g, p in zip(gold, pred):
        if g.words != p.words:
            k = next((k for k, (a, b) in enumerate(zip(g.words, p.words)) if a != b),
                     min(len(g), len(p)))
            found = repr(p.words[k]) if k < len(p) else "the end of the sentence"
            expected = repr(g.words[k]) if k < len(g) else "the end of the sentence"
            raise ConlluError(f"{p.source}: word {k + 1} is {found} but {g.source} has {expected}"
                              " (both files must hold the same words)")
    if len(gold) != len(pred):
        shorter, longer = (pred, gold) if len(pred) < len(gold) else (gold, pred)
        raise ConlluError(f"{longer[len(shorter)].source}: sentence {len(shorter) + 1} has no counterpart:"
                          f" {pred_path} has {len(pred)} sentences, {gold_path} has {len(gold)}")
    return list(zip(gold, pred))


def labeled_attachments(gold: Sentence, pred: Sentence) -> list[bool]:
    """Per word of two analyses of the same words: whether LAS counts it, i.e. its HEAD and
    the universal part of its DEPREL are both the gold ones."""
    return [head == gold_head and universal_deprel(deprel) == universal_deprel(gold_deprel)
            for gold_head, gold_deprel, head, deprel in zip(gold.heads, gold.deprels, pred.heads, pred.deprels,
                                                            strict=True)]


def scores(gold_path: str | os.PathLike, pred_path: str | os.PathLike) -> dict[str, Score]:
    """``{"upos", "uas", "las", "clas"}`` -> Score of the predicted file against the gold one. Where
    the predicted file tokenises the text otherwise (a parse of raw text) its words are aligned to
    the gold ones first (:mod:`parser.word_alignment`), and ``tokens``, ``sentences`` and ``words``
    come first, as in the official scorer's table."""
    gold, pred = read_conllu(gold_path), read_conllu(pred_path)
    gold_words, pred_words = _flat(gold), _flat(pred)
    if len(gold) == len(pred) and all(g.words == p.words for g, p in zip(gold, pred)):
        return _attachment_scores(gold_words, pred_words, {k: k for k in range(len(gold_words.heads))})
    gold_text, pred_text = tokenised(gold), tokenised(pred)
    check_same_text(gold_text, pred_text)
    pairs = align(gold_text.words, pred_text.words)
    return {"tokens": _same_spans(gold_text.tokens, pred_text.tokens),
            "sentences": _same_spans(gold_text.sentences, pred_text.sentences),
            "words": Score(len(pairs), len(gold_text.words), len(pred_text.words)),
            **_attachment_scores(gold_words, pred_words, pairs)}


@dataclass(frozen=True)
class _Words:
    """A file's words in one list: UPOS, universal DEPREL and the file-wide index of the head (None: the root)."""

    upos: list[str]
    deprels: list[str]
    heads: list[int | None]


def _flat(sentences: Sequence[Sentence]) -> _Words:
    upos, deprels, heads = [], [], []
    for sentence in sentences:
        base = len(heads)
        upos += sentence.upos
        deprels += [universal_deprel(d) for d in sentence.deprels]
        heads += [base + head - 1 if head else None for head in sentence.heads]
    return _Words(upos, deprels, heads)


def _same_spans(gold: Sequence[tuple[int, int]], system: Sequence[tuple[int, int]]) -> Score:
    return Score(len(set(gold) & set(system)), len(gold), len(system))


def _attachment_scores(gold: _Words, system: _Words, pairs: dict[int, int]) -> dict[str, Score]:
    """UPOS, UAS, LAS and CLAS of the aligned ``pairs`` (system word -> gold word): a head is
    right where both words hang from the root or the system head is aligned to the gold head."""
    upos = uas = las = clas = 0
    for s, g in pairs.items():
        upos += gold.upos[g] == system.upos[s]
        head = system.heads[s]
        right = gold.heads[g] is None if head is None else pairs.get(head, -1) == gold.heads[g]
        uas += right
        labeled = right and gold.deprels[g] == system.deprels[s]
        las += labeled
        clas += labeled and gold.deprels[g] in CONTENT_DEPRELS
    gold_words, system_words = len(gold.heads), len(system.heads)
    return {"upos": Score(upos, gold_words, system_words), "uas": Score(uas, gold_words, system_words),
            "las": Score(las, gold_words, system_words),
            "clas": Score(clas, sum(d in CONTENT_DEPRELS for d in gold.deprels),
                          sum(d in CONTENT_DEPRELS for d in system.deprels))}


def evaluate(gold_path: str | os.PathLike, pred_path: str | os.PathLike) -> dict[str, float]:
    """``{"upos", "uas", "las", "clas"}`` F1 scores in percent (UAS, LAS and UPOS are accuracies)."""
    return {name: score.f1 for name, score in scores(gold_path, pred_path).items()}


def score_checkpoint(checkpoint: str | os.PathLike, gold: str | os.PathLike, predicted: str | os.PathLike,
                     **options) -> dict[str, float]:
    """A saved parser's :func:`evaluate` scores on ``gold``, parsed into ``predicted`` with
    :func:`parser.predict.predict`'s ``options`` (decoder, precision, ``overwrite_upos``). UPOS is
    scored only with ``overwrite_upos`` (the parser's own tags; else the gold file's, copied through)."""
    from parser.predict import predict

    Path(predicted).parent.mkdir(parents=True, exist_ok=True)
    predict(str(checkpoint), str(gold), str(predicted), **options)
    scores = evaluate(gold, predicted)
    if not options.get("overwrite_upos"):
        del scores["upos"]
    return scores


def nonprojective_arcs(heads: Sequence[int]) -> list[bool]:
    """Whether each word's arc is non-projective (``heads[m-1]`` heads word m, 0 the root):
    some word strictly between the head and the word is not the head's descendant, i.e.
    the arc crosses another arc or the root's (Kübler, McDonald & Nivre 2009)."""
    def dominated_by(head: int, word: int) -> bool:
        while word != 0 and word != head:
            word = heads[word - 1]
        return word == head

    return [not all(dominated_by(h, k) for k in range(min(h, m) + 1, max(h, m)))
            for m, h in enumerate(heads, 1)]


@dataclass(frozen=True)
class Crossings:
    """Non-projectivity of gold and predicted trees, and head accuracy on crossing arcs."""

    sentences: int
    gold_trees: int  # sentences whose gold tree is non-projective
    predicted_trees: int
    gold_arcs: int  # words on a non-projective gold arc
    predicted_arcs: int
    predicted_arcs_correct: int  # predicted non-projective arcs with the gold head
    gold_arcs_found: int  # gold non-projective arcs predicted with the right head

    def format(self) -> str:
        share = lambda n, total: f"{100 * n / total:.1f}%" if total else "-"
        return "\n".join([
            f"non-projective trees: gold {share(self.gold_trees, self.sentences)}, "
            f"predicted {share(self.predicted_trees, self.sentences)} of {self.sentences} sentences",
            f"words on crossing arcs: gold {self.gold_arcs}, predicted {self.predicted_arcs}",
            f"head accuracy on predicted crossing arcs: {share(self.predicted_arcs_correct, self.predicted_arcs)}; "
            f"gold crossing arcs found: {share(self.gold_arcs_found, self.gold_arcs)}",
        ])


def crossings(gold_path: str | os.PathLike, pred_path: str | os.PathLike) -> Crossings:
    """How often gold and predicted trees are non-projective, and how right crossing arcs are."""
    counts = [0] * 6
    pairs = aligned(gold_path, pred_path)
    for g, p in pairs:
        gold_np, pred_np = nonprojective_arcs(g.heads), nonprojective_arcs(p.heads)
        right = [a == b for a, b in zip(g.heads, p.heads)]
        for i, value in enumerate((any(gold_np), any(pred_np), sum(gold_np), sum(pred_np),
                                   sum(r for r, n in zip(right, pred_np) if n), sum(r for r, n in zip(right, gold_np) if n))):
            counts[i] += value
    return Crossings(len(pairs), *counts)


@dataclass(frozen=True)
class Validity:
    """What UD's validator rejects in a file's trees: counts of words and sentences."""

    sentences: int
    root_labels: int  # words whose HEAD is 0 and DEPREL not root, or DEPREL root and HEAD not 0
    roots: int  # sentences without exactly one word on the root
    cycles: int  # sentences in which some word's heads never lead to the root

    def format(self) -> str:
        return (f"UD validity of {self.sentences} sentences: {self.root_labels} words with HEAD 0 but not DEPREL "
                f"root or the reverse, {self.roots} sentences without exactly one root, {self.cycles} with a cycle")


def validity(path: str | os.PathLike) -> Validity:
    """Count the trees of ``path`` (every HEAD an integer in range) that break UD's rules."""
    sentences = root_labels = roots = cycles = 0
    for record in records(path, text=False):
        sentence = parse_record(path, record, text=False, trees=True)
        sentences += 1
        root_labels += sum((head == 0) != (universal_deprel(deprel) == ROOT)
                           for head, deprel in zip(sentence.heads, sentence.deprels))
        roots += sentence.heads.count(0) != 1
        cycles += not bool(is_tree(torch.tensor([[0, *sentence.heads]]))[0])
    return Validity(sentences, root_labels, roots, cycles)


def format_table(results: dict[str, Score]) -> str:
    """The scores as a table like the official scorer's."""
    lines = ["Metric     | Precision |    Recall |  F1 Score",
             "-----------+-----------+-----------+-----------"]
    for name, score in results.items():
        lines.append(f"{name.upper():<11}|{score.precision:10.2f} |{score.recall:10.2f}"
                     f" |{score.f1:10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description="UAS, LAS and CLAS (CoNLL 2018 definitions).")
    cli.add_argument("gold", help="gold CoNLL-U file")
    cli.add_argument("pred", help="predicted CoNLL-U file: the same words, or the same text tokenised otherwise "
                                  "(a parse of raw text: its words aligned as the official scorer aligns them)")
    cli.add_argument("--nonprojective", action="store_true",
                     help="also report non-projective tree shares (gold, predicted) and head accuracy on crossing arcs")
    cli.add_argument("--validate", action="store_true",
                     help="first count what UD's validator rejects in PRED (HEAD 0 without DEPREL root or the "
                          "reverse, sentences without exactly one root, cycles)")
    cli.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = cli.parse_args(argv)
    if args.validate:
        print(run_reporting_errors(lambda: validity(args.pred)).format())
    print(format_table(run_reporting_errors(lambda: scores(args.gold, args.pred))))
    if args.nonprojective:
        print(crossings(args.gold, args.pred).format())


if __name__ == "__main__":
    main()
