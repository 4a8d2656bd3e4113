import pytest
import torch
from lightning.pytorch import seed_everything

from parser.network import EncoderOptions
from parser.network.characters import CharacterEncoder
from tests.conftest import first_trees, started_without_feature


@pytest.fixture
def characters():
    torch.manual_seed(0)
    return CharacterEncoder(size=8, embedding_size=4, max_bytes=6)


def alone(characters, word: str) -> torch.Tensor:
    """The GRU run on one word's bytes with no packing: the final states of both directions."""
    ids, _ = characters.byte_ids([word])
    _, final = characters.gru(characters.embedding(ids))
    return torch.cat([final[0, 0], final[1, 0]])


@torch.no_grad()
def test_each_word_is_read_alone_and_padding_is_zero(characters):
    words = [["Jàng", "na", "téere", "bi", "."], ["na", "Jàng"]]
    out = characters(words, n_words=5)
    assert out.shape == (2, 6, 8)
    for b, sentence in enumerate(words):
        for i, word in enumerate(sentence, start=1):
            torch.testing.assert_close(out[b, i], alone(characters, word))
    assert out[:, 0].eq(0).all() and out[1, 3:].eq(0).all()
    torch.testing.assert_close(out[0, 2], out[1, 1])  # the same word, the same vector


def test_bytes_of_long_words_keep_both_ends_and_empty_words_are_read():
    characters = CharacterEncoder(size=4, max_bytes=6)
    ids, lengths = characters.byte_ids(["unbelievable", "ñ", ""])
    assert lengths.tolist() == [6, 2, 1]
    assert bytes((ids[0, :6] - 1).tolist()) == b"unbble"
    assert bytes((ids[1, :2] - 1).tolist()) == "ñ".encode() and ids[1, 2:].eq(0).all()
    with pytest.raises(ValueError, match="even"):
        CharacterEncoder(size=5)


def test_gradients_reach_the_byte_embeddings(characters):
    characters([["a", "bc"]], n_words=2).sum().backward()
    assert characters.embedding.weight.grad[1 + ord("b")].abs().sum() > 0
    assert characters.embedding.weight.grad[0].eq(0).all()  # the padding id learns nothing


def test_a_parser_with_characters_started_from_one_without_parses_as_it_did(tiny_bert_dir, ud_dir, tmp_path):
    """--model.init from a parser without character vectors: the LSTM's columns that read them
    start at zero, so with no update the parses are the other parser's."""
    seed_everything(0)
    trees = first_trees(ud_dir, "UD_Wolof-WTB", 20, tmp_path / "train.conllu")
    other, started = started_without_feature(tiny_bert_dir, trees, tmp_path, EncoderOptions(lstm_layers=1, lstm_size=16),
                                             EncoderOptions(lstm_layers=1, lstm_size=16, characters=8))
    weight = started.network.encoder.lstm.lstm.weight_ih_l0
    assert weight.shape[1] == other.network.encoder.lstm.lstm.weight_ih_l0.shape[1] + 8 and not weight[:, -8:].any()
