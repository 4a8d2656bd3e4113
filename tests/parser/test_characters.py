import pytest
import torch

from parser.network.characters import CharacterEncoder


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
