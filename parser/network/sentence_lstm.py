"""A bidirectional LSTM over each sentence's word vectors, as in Dozat & Manning (2017)."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class SentenceLSTM(nn.Module):
    """Word vectors ``(B, N+1, H_in)`` -> contextual vectors ``(B, N+1, 2 * size)``.

    The root vector (position 0) is read as the sentence's first item, so the words see it
    and it sees them; positions past each sentence's ``n`` words stay zero. Dozat & Manning
    and UDPipe 2 put such layers between the word embeddings and the biaffine scorer; on a
    pretrained transformer they add a sequence model that is trained from scratch at the
    scorer's learning rate.

    Args:
        n_in: the size of an input word vector.
        size: the size of each direction's state.
        layers: stacked bidirectional layers.
        dropout: dropout between layers.
    """

    def __init__(self, n_in: int, size: int = 400, layers: int = 1, dropout: float = 0.33):
        super().__init__()
        if size < 1 or layers < 1:
            raise ValueError(f"the LSTM needs a positive size and number of layers, got {size} and {layers}")
        self.size = 2 * size
        self.lstm = nn.LSTM(n_in, size, layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)

    def forward(self, vectors: Tensor, lengths: Tensor) -> Tensor:
        """``vectors`` ``(B, N+1, H_in)``, ``lengths`` ``(B,)`` words per sentence -> ``(B, N+1, 2 size)``."""
        packed = pack_padded_sequence(vectors, (lengths + 1).cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=vectors.shape[1])
        return out
