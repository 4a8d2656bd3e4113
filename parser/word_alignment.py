"""Two tokenisations of the same text aligned word to word, as the CoNLL 2018 shared task's
scorer (conll18_ud_eval.py) defines it, for scoring a parse of raw text against the gold file.

Both files must spell the same text once whitespace is removed (inside forms too: Vietnamese
tokens hold spaces). A token (a multiword-token line, or a word outside one) is its span of
characters in that text; a word has its token's span. Tokens and sentences match where their
spans are equal. Words outside multiword tokens align where their spans are equal; a stretch
where either side has a multiword token aligns the words of both sides inside it by the
longest common subsequence of their lower-cased forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parser.data.sentences import ConlluError, Sentence


@dataclass(frozen=True)
class Word:
    """A syntactic word: its token's character span, whether that token is a multiword one, and its form."""

    start: int
    end: int
    multiword: bool
    form: str


@dataclass
class Tokenised:
    """A file's text without whitespace, its token and sentence spans (each sentence's
    ``file:line`` beside), and its words."""

    text: str
    tokens: list[tuple[int, int]]
    sentences: list[tuple[int, int]]
    sources: list[str]
    words: list[Word]


def tokenised(sentences: Sequence[Sentence]) -> Tokenised:
    """The spans and words of ``sentences``, the words in the order of their ``words``."""
    text: list[str] = []
    tokens, spans, sources, words = [], [], [], []
    offset = 0  # characters so far
    for sentence in sentences:
        first, multiword_end = offset, 0  # the last multiword token's last word id
        span = (offset, offset)
        for token in sentence.tokenlist:
            identifier = token["id"]
            if isinstance(identifier, tuple) and identifier[1] == ".":
                continue  # an empty node: not a word
            form = "".join(token["form"].split())
            if isinstance(identifier, int) and identifier <= multiword_end:
                words.append(Word(span[0], span[1], True, form))
                continue
            span = (offset, offset + len(form))
            text.append(form)
            offset = span[1]
            tokens.append(span)
            if isinstance(identifier, tuple):  # 3-4: the words 3 and 4 follow, sharing its span
                multiword_end = identifier[2]
            else:
                words.append(Word(span[0], span[1], False, form))
        spans.append((first, offset))
        sources.append(sentence.source)
    return Tokenised("".join(text), tokens, spans, sources, words)


def check_same_text(gold: Tokenised, system: Tokenised) -> None:
    """ConlluError naming the sentence of each file where their texts first differ (they must
    be one text, tokenised twice)."""
    if gold.text != system.text:
        at = next((i for i, (a, b) in enumerate(zip(gold.text, system.text)) if a != b),
                  min(len(gold.text), len(system.text)))

        def source(file: Tokenised) -> str:
            return next((where for (_, end), where in zip(file.sentences, file.sources) if at < end),
                        f"{file.sources[-1]} (its end)" if file.sources else "(empty)")

        shown = slice(max(at - 10, 0), at + 10)  # a few characters either side of the first difference
        raise ConlluError(f"{source(system)}: the text reads {system.text[shown]!r} where {source(gold)} reads "
                          f"{gold.text[shown]!r} (both files must hold the same text, whitespace aside)")


def align(gold: Sequence[Word], system: Sequence[Word]) -> dict[int, int]:
    """system word index -> gold word index of the words aligned."""
    pairs: dict[int, int] = {}
    g = s = 0
    while g < len(gold) and s < len(system):
        if gold[g].multiword or system[s].multiword:
            g, s, g_end, s_end = _multiword_stretch(gold, system, g, s)
            pairs.update(_common_forms(gold, system, range(g, g_end), range(s, s_end)))
            g, s = g_end, s_end
        elif (gold[g].start, gold[g].end) == (system[s].start, system[s].end):
            pairs[s] = g
            g, s = g + 1, s + 1
        elif gold[g].start <= system[s].start:
            g += 1
        else:
            s += 1
    return pairs


def _multiword_stretch(gold: Sequence[Word], system: Sequence[Word], g: int, s: int) -> tuple[int, int, int, int]:
    """(g, s, g_end, s_end): the words of a stretch holding a multiword token, starting where one
    side's current word is in one (the other side's current word skipped where it starts before
    it) and going on, the side whose next word starts first taking it, while either side's next
    word is in a multiword token or starts before the stretch's end, which a multiword token
    taken extends to its own."""
    if gold[g].multiword:
        end = gold[g].end
        s += not system[s].multiword and system[s].start < gold[g].start
    else:
        end = system[s].end
        g += not gold[g].multiword and gold[g].start < system[s].start
    g_end, s_end = g, s

    def goes_on(words: Sequence[Word], k: int) -> bool:
        return k < len(words) and (words[k].multiword or words[k].start < end)

    while goes_on(gold, g_end) or goes_on(system, s_end):
        if g_end < len(gold) and (s_end >= len(system) or gold[g_end].start <= system[s_end].start):
            words, k, g_end = gold, g_end, g_end + 1
        else:
            words, k, s_end = system, s_end, s_end + 1
        if words[k].multiword:
            end = max(end, words[k].end)
    return g, s, g_end, s_end


def _common_forms(gold: Sequence[Word], system: Sequence[Word], golds: range, systems: range) -> dict[int, int]:
    """The pairs of a longest common subsequence of the lower-cased forms, matched from the left."""
    a = [gold[k].form.lower() for k in golds]
    b = [system[k].form.lower() for k in systems]
    longest = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]  # longest[i][j]: of a[i:] and b[j:]
    for i in reversed(range(len(a))):
        for j in reversed(range(len(b))):
            longest[i][j] = (longest[i + 1][j + 1] + 1 if a[i] == b[j]
                             else max(longest[i + 1][j], longest[i][j + 1]))
    pairs, i, j = {}, 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs[systems[j]] = golds[i]
            i, j = i + 1, j + 1
        elif longest[i][j] == longest[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs
