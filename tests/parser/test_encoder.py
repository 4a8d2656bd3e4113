import itertools
from functools import partial
from pathlib import Path

import pytest
import torch

from parser.network.encoder import WordEncoder
from parser.network.pretrained import E5_NAMES, MINILM_NAMES, resolve_model_path

SHORT = ["The", "parser", "reads", "unbelievably", "tokenizable", "words", "."]
LONG = [
    "In", "the", "beginning", "the", "committee's", "extraordinarily", "complicated",
    "reorganisation", "plan", "was", "postponed", ",", "reconsidered", ",", "rewritten", "and",
    "finally", "approved", "by", "an", "overwhelming", "majority", "of", "the",
    "participating", "representatives", "after", "several", "inconclusive", "meetings", "that",
    "lasted", "well", "into", "the", "night",
]

close = partial(torch.testing.assert_close, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return WordEncoder(model=str(tiny_bert_dir)).eval()


def reference(encoder, sentence, pooling="first"):
    """Plain single-pass encoding with a Python loop over words: (n+1, H)."""
    enc = encoder.tokenizer(sentence, is_split_into_words=True, return_tensors="pt")
    hidden = encoder.model(**enc).last_hidden_state[0]
    word_ids = enc.word_ids(0)
    vectors = [hidden[0]]
    for w in range(len(sentence)):
        columns = [i for i, x in enumerate(word_ids) if x == w]
        vectors.append(hidden[columns[0]] if pooling == "first" else hidden[columns].mean(0))
    return torch.stack(vectors)


@torch.no_grad()
@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_matches_reference_and_pads_with_zeros(tiny_bert_dir, pooling):
    encoder = WordEncoder(model=str(tiny_bert_dir), pooling=pooling).eval()
    other = ["A", "short", "one"]
    out = encoder([SHORT, other])
    assert out.shape == (2, len(SHORT) + 1, encoder.hidden_size) and encoder.hidden_size == 32
    close(out[0], reference(encoder, SHORT, pooling))
    close(out[1, :4], reference(encoder, other, pooling))
    assert out[1, 4:].eq(0).all()


@torch.no_grad()
def test_vanishing_words_get_the_unknown_vector(encoder):
    sentence = ["a", "\u200b", "b", "", "\x00"]
    out = encoder([sentence])[0]
    unk = encoder.tokenizer.unk_token
    close(out, reference(encoder, ["a", unk, "b", unk, unk]))


@torch.no_grad()
@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_sentence_that_fits_is_identical_with_small_windows(tiny_bert_dir, encoder, pooling):
    plain = WordEncoder(model=str(tiny_bert_dir), pooling=pooling).eval()
    windowed = WordEncoder(model=str(tiny_bert_dir), pooling=pooling, max_length=16).eval()
    sentence = SHORT[:3]
    assert len(windowed.tokenizer(sentence, is_split_into_words=True)["input_ids"]) <= 16
    torch.testing.assert_close(windowed([sentence]), plain([sentence]), atol=1e-6, rtol=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("stride", [128, 4])
def test_long_sentence_reads_each_word_from_its_most_central_window(tiny_bert_dir, stride):
    encoder = WordEncoder(model=str(tiny_bert_dir), max_length=16, stride=stride).eval()
    out = encoder([LONG, SHORT])
    assert out.shape == (2, len(LONG) + 1, 32)
    assert torch.isfinite(out).all()
    assert out[0].norm(dim=-1).gt(0).all(), "every word and the root get a vector"
    close(out[1, : len(SHORT) + 1], reference(encoder, SHORT))

    tokens = encoder.tokenizer(LONG, is_split_into_words=True, add_special_tokens=False)
    ids, word_ids = tokens["input_ids"], tokens.word_ids()
    width = encoder.subwords.window
    starts = encoder.subwords._window_starts(len(ids))
    assert len(starts) > 2 and starts[0] == 0 and starts[-1] + width == len(ids)
    assert all(0 < b - a <= width - encoder.subwords.stride for a, b in itertools.pairwise(starts))

    cls, sep = encoder.tokenizer.cls_token_id, encoder.tokenizer.sep_token_id
    windows = [torch.tensor([[cls, *ids[s : s + width], sep]]) for s in starts]
    hidden = [encoder.model(input_ids=w).last_hidden_state[0] for w in windows]
    for t, w in enumerate(word_ids):
        if t > 0 and word_ids[t - 1] == w:
            continue  # first-subword pooling
        centrality = [min(t - s, s + width - 1 - t) for s in starts]
        k = centrality.index(max(centrality))
        close(out[0, w + 1], hidden[k][1 + t - starts[k]])
    root = torch.stack([h[0] for h in hidden]).mean(0)
    close(out[0, 0], root)


def test_gradients_reach_the_transformer_unless_frozen(tiny_bert_dir):
    encoder = WordEncoder(model=str(tiny_bert_dir), dropout=0.1).train()
    encoder([SHORT]).sum().backward()
    assert encoder.model.embeddings.word_embeddings.weight.grad is not None

    frozen = WordEncoder(model=str(tiny_bert_dir), freeze=True).train()
    assert frozen.training and not frozen.model.training
    assert not any(p.requires_grad for p in frozen.parameters())
    assert not frozen([SHORT]).requires_grad

    embeddings_frozen = WordEncoder(model=str(tiny_bert_dir), freeze="embeddings").train()
    assert embeddings_frozen.model.training
    embeddings_frozen([SHORT]).sum().backward()
    assert embeddings_frozen.model.embeddings.word_embeddings.weight.grad is None
    assert embeddings_frozen.model.encoder.layer[0].attention.self.query.weight.grad is not None
    for wrong in ("layers", 0, embeddings_frozen.model.config.num_hidden_layers, 1.5):
        with pytest.raises(ValueError, match="freeze"):
            WordEncoder(model=str(tiny_bert_dir), freeze=wrong)


def test_freezing_the_lower_layers_stops_backpropagation_above_them(tiny_bert_dir):
    encoder = WordEncoder(model=str(tiny_bert_dir), freeze=1, layer_mix=True).train()
    assert encoder.model.training
    layers = encoder.model.encoder.layer
    assert len(layers) > 1
    encoder([SHORT, LONG]).sum().backward()
    trained = {name for name, p in encoder.model.named_parameters() if p.grad is not None}
    assert trained == {name for name, p in encoder.model.named_parameters() if p.requires_grad}
    assert trained and all(name.startswith("encoder.layer.") and not name.startswith("encoder.layer.0.")
                           for name in trained)
    assert all(p.grad is not None for p in layers[-1].parameters())
    assert encoder.mix_weights.grad is not None  # the mix still reads the fixed layers


@torch.no_grad()
def test_autocast(encoder):
    full = encoder([SHORT, LONG])
    with torch.autocast(full.device.type, dtype=torch.bfloat16):
        half = encoder([SHORT, LONG])
    assert half.shape == full.shape and torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), full, atol=0.1, rtol=0.1)


def test_rejects_bad_arguments(tiny_bert_dir):
    with pytest.raises(ValueError, match="pooling"):
        WordEncoder(model=str(tiny_bert_dir), pooling="max")
    for max_length in (2, 129):
        with pytest.raises(ValueError, match="max_length"):
            WordEncoder(model=str(tiny_bert_dir), max_length=max_length)


def test_resolve_model_path(monkeypatch, tmp_path):
    for name in MINILM_NAMES:
        path = Path(resolve_model_path(name))
        files = ("config.json", "tokenizer.json", "model.safetensors")
        assert all((path / f).is_file() for f in files)
    monkeypatch.setattr("parser.network.pretrained.e5.model_dir", lambda: tmp_path)
    assert all(resolve_model_path(name) == str(tmp_path) for name in E5_NAMES)
    assert resolve_model_path("bert-base-cased") == "bert-base-cased"
    assert resolve_model_path("/some/local/dir") == "/some/local/dir"


@pytest.mark.slow
@torch.no_grad()
def test_shipped_minilm_offline():
    encoder = WordEncoder().eval()
    out = encoder([["Offline", "encoders", "work", "."], ["Yes", "!"]])
    assert encoder.hidden_size == 384 and out.shape == (2, 5, 384)
    assert torch.isfinite(out).all() and out[1, 3:].eq(0).all()


def test_windows_of_very_different_lengths_run_in_chunks_with_the_same_result(tiny_bert_dir):
    """A long word (a URL) among short sentences: chunking windows by length changes
    nothing but the padding (the 9 GB spike of the default EWT run)."""
    encoder = WordEncoder(str(tiny_bert_dir)).eval()
    words = [["http://www.example.com/" + "a/b-c_d" * 12], *[["Thanks", "!"]] * 20, ["Hi"]]
    with torch.no_grad():
        one_chunk = encoder(words)
        encoder.PADDED_SUBWORDS_PER_CHUNK = 64  # several chunks
        chunked = encoder(words)
    torch.testing.assert_close(chunked, one_chunk, rtol=1e-5, atol=1e-5)


def test_layer_mix_weighs_every_layer(tiny_bert_dir):
    """The scalar mix starts uniform over the embeddings and each layer; all its weight on
    the last layer gives the last layer's vectors; its weights train."""
    words = [["The", "dog", "barks", "."], ["Hi"]]
    last = WordEncoder(str(tiny_bert_dir)).eval()
    mixed = WordEncoder(str(tiny_bert_dir), layer_mix=True).eval()
    assert mixed.mix_weights.shape == (3,)  # embeddings + 2 layers
    with torch.no_grad():
        assert not torch.allclose(mixed(words), last(words))
        mixed.mix_weights.copy_(torch.tensor([-1e4, -1e4, 0.0]))
        torch.testing.assert_close(mixed(words), last(words))
    mixed.mix_weights.data.zero_()
    mixed(words).sum().backward()
    assert mixed.mix_weights.grad.abs().sum() > 0 and mixed.mix_gamma.grad is not None


def test_column_word_names_the_word_of_every_window_column(tiny_bert_dir):
    """Each pooled subword's column holds its word; special tokens and padding hold -1; a
    long sentence cut into windows keeps every word in every window it appears in."""
    encoder = WordEncoder(str(tiny_bert_dir), max_length=12, stride=4)
    sub = encoder.subwords([LONG, SHORT])
    assert sub.column_word.shape == sub.input_ids.shape
    torch.testing.assert_close(sub.column_word[sub.token_window, sub.token_column], sub.token_target)
    outside = sub.attention_mask.eq(0) | sub.input_ids.eq(encoder.tokenizer.cls_token_id) | sub.input_ids.eq(encoder.tokenizer.sep_token_id)
    assert sub.column_word[outside].eq(-1).all() and sub.column_word[~outside].ge(1).all()


def test_word_dropout_masks_whole_words_in_training_only(tiny_bert_dir):
    encoder = WordEncoder(str(tiny_bert_dir), word_dropout=0.5)
    mask_id = encoder.tokenizer.mask_token_id
    sub = encoder.subwords([LONG, SHORT])
    torch.manual_seed(0)
    dropped = encoder._drop_words(sub, 2 * (len(LONG) + 1))
    changed = dropped.ne(sub.input_ids)
    assert dropped[changed].eq(mask_id).all() and 0 < changed.sum() < sub.attention_mask.sum()
    for word in sub.column_word[sub.column_word >= 0].unique():  # all of a word's subwords, or none
        columns = sub.column_word.eq(word)
        assert changed[columns].all() or not changed[columns].any()
    assert not changed[sub.column_word < 0].any()
    with torch.no_grad():
        encoder.eval()
        torch.testing.assert_close(encoder([SHORT]), WordEncoder(str(tiny_bert_dir)).eval()([SHORT]))
    with pytest.raises(ValueError, match="word_dropout"):
        WordEncoder(str(tiny_bert_dir), word_dropout=1.0)


def test_character_vectors_are_concatenated(tiny_bert_dir):
    plain = WordEncoder(str(tiny_bert_dir)).eval()
    with_chars = WordEncoder(str(tiny_bert_dir), characters=16).eval()
    assert with_chars.hidden_size == 32 + 16
    with torch.no_grad():
        out = with_chars([SHORT, ["Hi"]])
        torch.testing.assert_close(out[..., :32], plain([SHORT, ["Hi"]]))
    assert out.shape == (2, len(SHORT) + 1, 48) and out[:, 0, 32:].eq(0).all() and out[1, 2:].eq(0).all()
