"""Character-level word vectors: a bidirectional GRU over each word's UTF-8 bytes."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from objectives.conventions import ConfigurationError


class CharacterEncoder(nn.Module):
    """Words -> vectors read from their spelling, as UDPipe 2's character-level word
    embeddings (Straka 2018): the final states of a bidirectional GRU over the word's
    characters, concatenated. It reads UTF-8 bytes, so it needs no vocabulary and takes
    every script; affixes reach the parser even where the subword tokenizer splits a word
    badly (morphologically rich, low-resource languages).

    Args:
        size: the vector size per word (even: each direction gives half).
        embedding_size: the size of a byte's embedding.
        max_bytes: longer words are read as their first and last ``max_bytes // 2`` bytes.
    """

    def __init__(self, size: int = 256, embedding_size: int = 64, max_bytes: int = 32):
        super().__init__()
        if size < 2 or size % 2:
            raise ConfigurationError(f"characters: the size must be a positive even number, got {size}")
        self.size, self.max_bytes = size, max_bytes
        self.embedding = nn.Embedding(257, embedding_size, padding_idx=0)  # byte b has id b + 1
        self.gru = nn.GRU(embedding_size, size // 2, batch_first=True, bidirectional=True)

    def byte_ids(self, words: list[str]) -> tuple[Tensor, Tensor]:
        """``(U, L)`` byte ids (0 pads) and ``(U,)`` lengths of U words."""
        half = self.max_bytes // 2
        encoded = [w.encode("utf-8") or b" " for w in words]
        encoded = [b if len(b) <= self.max_bytes else b[:half] + b[-half:] for b in encoded]
        ids = torch.zeros(len(encoded), max(map(len, encoded)), dtype=torch.long)
        for i, b in enumerate(encoded):
            ids[i, : len(b)] = torch.frombuffer(bytearray(b), dtype=torch.uint8).long() + 1
        return ids, torch.tensor([len(b) for b in encoded])

    def forward(self, words: list[list[str]], n_words: int) -> Tensor:
        """``(B, N+1, size)`` vectors of B sentences' words at positions 1..n, zeros at the
        root (0) and beyond the sentence. Each distinct word of the batch is read once."""
        index: dict[str, int] = {}
        for sentence in words:
            for word in sentence:
                index.setdefault(word, len(index))
        device = self.embedding.weight.device
        ids, lengths = self.byte_ids(list(index))
        packed = pack_padded_sequence(self.embedding(ids.to(device)), lengths, batch_first=True, enforce_sorted=False)
        _, final = self.gru(packed)  # (2, U, size / 2): forward and backward final states
        vectors = torch.cat([final[0], final[1]], dim=-1)  # (U, size)
        positions = torch.tensor([b * (n_words + 1) + i + 1 for b, s in enumerate(words) for i in range(len(s))])
        which = torch.tensor([index[w] for s in words for w in s])
        out = vectors.new_zeros(len(words) * (n_words + 1), self.size)
        out[positions.to(device)] = vectors[which.to(device)]
        return out.view(len(words), n_words + 1, self.size)
