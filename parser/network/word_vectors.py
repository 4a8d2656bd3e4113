"""Word vectors of a language's own raw text, added to the encoder's: what a multilingual encoder
that has seen little of the language lacks (UDPipe 2 feeds such vectors beside its encoder).

The vectors are a word2vec text file (``treeexp vectors``, or any published ``.vec`` file such as
fastText's); a parser keeps them fixed and learns a projection into its word vectors that starts
at zero, so a parser started from another (``--model.init``) parses at first as that one did.
Inside a parser the table travels with the weights and the vocabulary with the encoder's files
(:data:`VOCABULARY`), so a checkpoint loads without the ``.vec`` file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from objectives.conventions import ConfigurationError

VOCABULARY = "word_vectors.txt"  # among the encoder's files: the vector size, then one word a line


def read_vectors(path: str | Path) -> tuple[list[str], Tensor]:
    """A word2vec text file (a ``count size`` header line, then ``word x_1 ... x_size`` lines):
    its words and their vectors ``(V, size)``; a word met again keeps its first vector.
    ConfigurationError names the file and line of a malformed one."""
    words, rows, seen = [], [], set()
    with open(path, encoding="utf-8") as lines:
        header = lines.readline().split()
        if len(header) != 2 or not all(part.isdigit() for part in header):
            raise ConfigurationError(f"{path}:1: not a word2vec text file (its first line is 'COUNT SIZE')")
        size = int(header[1])
        for number, line in enumerate(lines, 2):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if len(parts) != size + 1:
                raise ConfigurationError(f"{path}:{number}: {len(parts) - 1} numbers where the header says {size}")
            try:
                vector = [float(x) for x in parts[1:]]
            except ValueError:
                raise ConfigurationError(f"{path}:{number}: a vector of numbers expected") from None
            if parts[0] not in seen:
                seen.add(parts[0])
                words.append(parts[0])
                rows.append(vector)
    if not words:
        raise ConfigurationError(f"{path}: no vector")
    return words, torch.tensor(rows, dtype=torch.float32)


class WordVectors(nn.Module):
    """Fixed vectors of ``words`` (unknown words: zeros) projected to ``hidden`` (weights and bias
    start at zero). ``vectors``: ``(V, size)``, or None for zeros a checkpoint's weights replace."""

    def __init__(self, words: Sequence[str], size: int, hidden: int, vectors: Tensor | None = None):
        super().__init__()
        self.words = list(words)
        self._index = {word: i for i, word in enumerate(self.words, 1)}
        table = torch.zeros(len(self.words) + 1, size)  # row 0: a word not in the table
        if vectors is not None:
            table[1:] = vectors
        self.register_buffer("table", table)
        self.projection = nn.Linear(size, hidden)
        nn.init.zeros_(self.projection.weight)
        nn.init.zeros_(self.projection.bias)

    @classmethod
    def from_file(cls, path: str | Path, hidden: int) -> WordVectors:
        words, vectors = read_vectors(path)
        return cls(words, vectors.shape[1], hidden, vectors)

    @classmethod
    def from_vocabulary(cls, path: Path, hidden: int) -> WordVectors:
        """From the :data:`VOCABULARY` file :meth:`save_vocabulary` wrote (the table: zeros)."""
        size, *words = path.read_text(encoding="utf-8").split("\n")[:-1]
        return cls(words, int(size), hidden)

    def save_vocabulary(self, directory: str | Path) -> None:
        (Path(directory) / VOCABULARY).write_text("".join(f"{x}\n" for x in [self.table.shape[1], *self.words]),
                                                  encoding="utf-8")

    def ids(self, words: list[list[str]], n_words: int) -> Tensor:
        """Each word's row ``(B, N+1)`` (position 0 and padding: 0): the word, else its lower case."""
        rows = [[0, *(self._index.get(w, self._index.get(w.lower(), 0)) for w in sentence)]
                + [0] * (n_words - len(sentence)) for sentence in words]
        return torch.tensor(rows, device=self.table.device)

    def forward(self, words: list[list[str]], n_words: int) -> Tensor:
        """``(B, N+1, hidden)``: each word's vector projected."""
        return self.projection(self.table[self.ids(words, n_words)])
