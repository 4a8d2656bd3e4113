"""A language's closed classes (the ``words`` of a facts file) tag its raw text: read with one-line
errors, applied only where a word has no tag, through the stream and ``--data.lexicon statistics``."""

from pathlib import Path

import pytest
import yaml

import train
from objectives.conventions import UPOS_TAGS, ConfigurationError
from parser.data.lexicon import read_lexicon, tag_words
from parser.data.sentences import read_sentences
from parser.data.stream import SentenceStream, Source
from parser.data.vocab import build_upos_vocab

FACTS = Path(__file__).resolve().parents[2] / "configs" / "facts"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "facts.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_forms_are_lower_cased_and_a_form_under_two_tags_tags_nothing(tmp_path):
    lexicon = read_lexicon(write(tmp_path, "facts: []\nwords:\n  DET: [Bi, yi, la]\n  PRON: [man, la]\n  NUM: ['on']\n"))
    assert lexicon == {"bi": "DET", "yi": "DET", "man": "PRON", "on": "NUM"}
    assert read_lexicon(write(tmp_path, "facts:\n  - order: SVO\n")) == {}  # word orders only: no lexicon


@pytest.mark.parametrize("text, message", [
    ("words: [bi, yi]\n", "words is a mapping of UPOS tags"),
    ("words:\n  ART: [bi]\n", "'ART' is not a UPOS tag"),
    ("words:\n  DET: bi\n", "DET: give a list of word forms"),
    ("words:\n  NUM: [on]\n", "True is not a word form \\(quote a form"),
    ("words: {DET: [bi\n", "not YAML"),
])
def test_a_bad_lexicon_is_named_in_one_line(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError, match=f"^{path}: .*{message}"):
        read_lexicon(path)


def test_only_untagged_words_take_the_lexicons_tag(tmp_path):
    (tmp_path / "s.txt").write_text("Xale bi lekk na\n", encoding="utf-8")
    sentence, = read_sentences(tmp_path / "s.txt")
    tagged = tag_words(sentence, {"bi": "DET", "xale": "NOUN", "na": "AUX"})
    assert tagged.upos == ["NOUN", "DET", "_", "AUX"] and sentence.upos == ["_"] * 4
    given = tag_words(tagged, {"xale": "VERB", "lekk": "VERB"})
    assert given.upos == ["NOUN", "DET", "VERB", "AUX"]  # a tag already there stays


def test_the_stream_tags_raw_text_with_the_lexicon(tmp_path):
    vocab = build_upos_vocab()
    (tmp_path / "raw.txt").write_text("xale bi lekk na\nmuus mi dem na\n", encoding="utf-8")
    stream = SentenceStream([Source(str(tmp_path / "raw.txt"))], vocab, upos=False,
                            lexicon={"bi": "DET", "mi": "DET", "na": "AUX"})
    batch = next(iter(stream))
    tags = {word: vocab.itos[int(tag)] for words, row in zip(batch.words, batch.upos) for word, tag in zip(words, row[1:])}
    assert tags == {"xale": "<unk>", "bi": "DET", "lekk": "<unk>", "na": "AUX", "muus": "<unk>", "mi": "DET", "dem": "<unk>"}


def test_data_lexicon_statistics_reads_the_words_of_the_languages_facts_file(tiny_bert_dir):
    wolof = FACTS / "wolof.yaml"
    config = ["--config", "configs/no_treebank.yaml", "--model.encoder", str(tiny_bert_dir), "--data.lexicon", "statistics"]
    cli = train.main([*config, "--statistics", str(wolof)], run=False)
    assert cli.datamodule.lexicon == read_lexicon(wolof) and cli.datamodule.lexicon["bi"] == "DET"
    with pytest.raises(ConfigurationError, match="--data.lexicon statistics reads the language's statistics"):
        train.main([*config, "--model.terms", "[]"], run=False)


@pytest.mark.parametrize("facts", sorted(FACTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_facts_file_lists_each_form_under_one_tag(facts):
    words = yaml.safe_load(facts.read_text(encoding="utf-8"))["words"]
    forms = [form.lower() for listed in words.values() for form in listed]
    assert set(words) <= set(UPOS_TAGS) and len(forms) == len(set(forms)) == len(read_lexicon(facts))
