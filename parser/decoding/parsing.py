"""Word lists in, parses out: a network's scores decoded into trees, tags and marginals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from objectives.mtt import marginals as arc_marginals

from parser.data.batch import Batch, collate
from parser.data.sentences import Sentence
from parser.decoding.decode import Decoding, root_label
from parser.network import Network


@dataclass
class Parse:
    """One parsed sentence: ``heads[i]``/``labels[i]``/``tags[i]`` for word i+1 (``tags``:
    predicted UPOS, ``None`` without a tagger); ``marginals`` ``(n+1, n+1)``."""

    words: list[str]
    heads: list[int]
    labels: list[str]
    marginals: Tensor | None = None
    tags: list[str] | None = None


def parse_batch(network: Network, decoding: Decoding, batch: Batch, marginals: bool = False) -> list[Parse]:
    """Each sentence of ``batch`` parsed by ``decoding`` (arc marginals on request)."""
    scores = network(batch.words, batch.subwords, batch.treebanks)
    lengths = batch.lengths.to(scores.arcs.device)
    heads, labels = decoding(scores.arcs, scores.labels, lengths, root_label(network.label_vocab.itos))
    mu = arc_marginals(scores.arcs, lengths, decoding.multiroot) if marginals else None
    tags = None if scores.tags is None else network.best_tags(scores.tags).tolist()
    label_names, tag_names = network.label_vocab.itos, network.upos_vocab.itos
    return [Parse(words=list(batch.words[i]), heads=heads[i, 1 : n + 1].tolist(),
                  labels=[label_names[l] for l in labels[i, 1 : n + 1].tolist()],
                  marginals=None if mu is None else mu[i, : n + 1, : n + 1].cpu(),
                  tags=None if tags is None else [tag_names[t] for t in tags[i][1 : n + 1]])
            for i, n in enumerate(batch.lengths.tolist())]


@torch.no_grad()
def parse_words(network: Network, decoding: Decoding, sentences: Sequence[Sequence[str]], batch_size: int = 32,
                marginals: bool = False, treebank: str | Sequence[str | None] | None = None,
                progress: Callable[[int], object] | None = None) -> list[Parse]:
    """Parse pre-tokenised sentences (each a list of words), in length-sorted batches, in
    the order given. A string is refused, not split: ``text.split()`` it first.
    ``treebank``: the sentences' treebank (one name, or one per sentence), for a parser
    with treebank vectors (``EncoderOptions.treebank_embedding``); None: ``<other>``.
    ``progress`` is called with each batch's number of sentences once it is parsed."""
    for sentence in [sentences] if isinstance(sentences, str) else sentences:
        if isinstance(sentence, str) or not all(isinstance(word, str) for word in sentence):
            raise TypeError(
                "Parser.parse takes a list of sentences, each a list of words, e.g. "
                f'[["The", "dog", "barks", "."]]; got {sentence!r}: tokenise it first (e.g. text.split())')
        if not sentence:
            raise ValueError("Parser.parse: an empty sentence has nothing to parse")
    network.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths batch well
    parses: list[Parse | None] = [None] * len(sentences)
    treebanks = [treebank] * len(sentences) if treebank is None or isinstance(treebank, str) else list(treebank)
    for start in range(0, len(order), batch_size):
        ids = order[start : start + batch_size]
        chunk = [Sentence(list(sentences[i]), ["_"] * len(sentences[i]), None, None, None, "parse()", i + 1) for i in ids]
        batch = dataclasses.replace(collate(chunk, network.upos_vocab, None), treebanks=[treebanks[i] for i in ids])
        for i, parse in zip(ids, parse_batch(network, decoding, batch, marginals)):
            parses[i] = parse
        if progress is not None:
            progress(len(ids))
    return parses
