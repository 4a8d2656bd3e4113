import pytest
import torch

from parser.network.encoder import WordEncoder
from parser.network.sentence_lstm import SentenceLSTM


def test_each_sentence_is_read_alone_root_first_and_padding_stays_zero():
    torch.manual_seed(0)
    lstm = SentenceLSTM(6, size=5, layers=2).eval()
    vectors, lengths = torch.randn(3, 5, 6), torch.tensor([4, 1, 2])
    out = lstm(vectors, lengths)
    assert out.shape == (3, 5, 10) and lstm.size == 10
    for b, n in enumerate(lengths.tolist()):
        alone, _ = lstm.lstm(vectors[b : b + 1, : n + 1])
        torch.testing.assert_close(out[b, : n + 1], alone[0])
        assert out[b, n + 1 :].eq(0).all()
    # the backward direction reads the words before the root: the root's vector depends on them
    changed = vectors.clone()
    changed[0, 3] += 1
    assert not torch.allclose(lstm(changed, lengths)[0, 0], out[0, 0])
    with pytest.raises(ValueError, match="LSTM"):
        SentenceLSTM(6, size=0)


def test_the_encoder_gives_the_lstm_output(tiny_bert_dir):
    plain = WordEncoder(str(tiny_bert_dir)).eval()
    with_lstm = WordEncoder(str(tiny_bert_dir), lstm_layers=1, lstm_size=8).eval()
    assert with_lstm.hidden_size == 16
    words = [["Hello", "world", "!"], ["Hi"]]
    with torch.no_grad():
        out = with_lstm(words)
        expected = with_lstm.lstm(plain(words), torch.tensor([3, 1]))
    assert out.shape == (2, 4, 16) and out[1, 2:].eq(0).all()
    torch.testing.assert_close(out, expected)
