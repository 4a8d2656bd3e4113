"""A language's closed classes as a grammar sketch lists them, tagging its raw text where a
tagger that never saw the language cannot: the ``words`` of a facts file (configs/facts/),
each UPOS tag with its word forms::

    words:
      DET: [bi, yi, gi]        # the definite articles
      PRON: [man, yow, moom]
      CCONJ: [walla, waaye]

The unlabeled stream gives a word found there (its form lower-cased) that tag wherever its
own tag is ``_`` (``--data.lexicon FILE``); terms that read tags (GE) then read it as given,
and the tagger's prediction only for the other words. A form listed under two tags is
ambiguous and tags nothing. A file without ``words`` (a statistics file, a facts file of
word orders only) is an empty lexicon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from objectives.conventions import UPOS_TAGS, ConfigurationError
from parser.data.sentences import Sentence

__all__ = ["read_lexicon", "tag_words"]


def read_lexicon(path: str | Path) -> dict[str, str]:
    """Lower-cased form -> its UPOS tag, from the ``words`` of the YAML file ``path`` (forms
    listed under two tags left out); a ConfigurationError names the file and the entry."""
    try:
        spec = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{path}: not YAML ({str(error).splitlines()[0]})") from None
    words = spec.get("words") if isinstance(spec, dict) else None
    if words is None:
        return {}
    if not isinstance(words, dict):
        raise ConfigurationError(f"{path}: words is a mapping of UPOS tags to lists of word forms")
    tags: dict[str, set[str]] = {}
    for tag, forms in words.items():
        if tag not in UPOS_TAGS:
            raise ConfigurationError(f"{path}: words: {tag!r} is not a UPOS tag ({', '.join(UPOS_TAGS)})")
        if not isinstance(forms, list):
            raise ConfigurationError(f"{path}: words: {tag}: give a list of word forms, e.g. {tag}: [form, form]")
        for form in forms:
            if not isinstance(form, str) or not form.strip():
                raise ConfigurationError(f"{path}: words: {tag}: {form!r} is not a word form (quote a form that YAML "
                                         "reads as a number or a truth value: 'on', '10')")
            tags.setdefault(form.strip().lower(), set()).add(tag)
    return {form: next(iter(found)) for form, found in tags.items() if len(found) == 1}


def tag_words(sentence: Sentence, lexicon: Mapping[str, str]) -> Sentence:
    """``sentence`` whose words tagged ``_`` carry their tag in ``lexicon`` where it has one."""
    upos = [lexicon.get(word.lower(), "_") if tag == "_" else tag for word, tag in zip(sentence.words, sentence.upos)]
    return sentence if upos == sentence.upos else replace(sentence, upos=upos)
