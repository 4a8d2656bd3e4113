"""``parser.evaluate`` against the official CoNLL 2018 scorer on real treebanks.

The official script (``conll18_ud_eval.py`` v1.2, UFAL) is the copy that ``stanza==1.4.0``
ships in ``stanza/utils``; it is loaded from that file without importing stanza itself.
Predictions are gold files with random, tree-preserving re-attachments and random labels
(subtypes included); multiword tokens and empty nodes stay as in the gold file.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from parser.evaluate import evaluate

FILES = ["UD_English-EWT/en_ewt-ud-dev.conllu", "UD_French-GSD/fr_gsd-ud-dev.conllu",
         "UD_German-GSD/de_gsd-ud-dev.conllu"]  # fr/de: many multiword tokens; EWT: empty nodes


@pytest.fixture(scope="module")
def official():
    stanza = importlib.util.find_spec("stanza")
    assert stanza is not None, "install the test extra: pip install -e '.[test]' (stanza==1.4.0 ships the scorer)"
    path = Path(stanza.submodule_search_locations[0]) / "utils" / "conll18_ud_eval.py"
    spec = importlib.util.spec_from_file_location("conll18_ud_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _descendants(heads: dict[int, int], word: int) -> set[int]:
    found, frontier = {word}, [word]
    while frontier:
        parent = frontier.pop()
        children = [m for m, h in heads.items() if h == parent and m not in found]
        found.update(children)
        frontier += children
    return found


def _perturb_sentence(lines: list[str], labels: list[str], rng: random.Random) -> list[str]:
    """Re-attach about a quarter of the words (never creating a cycle or a second root),
    relabel about a quarter of them and retag about a tenth."""
    fields = [line.split("\t") for line in lines]
    rows = {int(row[0]): row for row in fields if row[0].isdigit()}  # words; the same lists as in fields
    heads = {m: int(row[6]) for m, row in rows.items()}
    for m in rows:
        if heads[m] != 0 and rng.random() < 0.25:
            heads[m] = rng.choice(sorted(set(rows) - _descendants(heads, m)))
        if rng.random() < 0.25:
            rows[m][7] = rng.choice(labels)
        if rng.random() < 0.1:
            rows[m][3] = rng.choice(["NOUN", "VERB", "ADJ", "X"])
        rows[m][6] = str(heads[m])
    return ["\t".join(row) for row in fields]


def _prediction(gold: Path, out: Path, seed: int) -> Path:
    rng = random.Random(seed)
    blocks = gold.read_text(encoding="utf-8").split("\n\n")
    labels = sorted({line.split("\t")[7] for block in blocks for line in block.splitlines()
                     if line.split("\t")[0].isdigit()})
    out.write_text("\n\n".join("\n".join(_perturb_sentence(b.splitlines(), labels, rng)) for b in blocks),
                   encoding="utf-8")
    return out


@pytest.mark.parametrize("name", FILES)
def test_scores_equal_the_official_scorer(name, ud_dir, tmp_path, official):
    gold = ud_dir / name
    pred = _prediction(gold, tmp_path / "pred.conllu", seed=len(name))
    reference = official.evaluate(official.load_conllu_file(str(gold)), official.load_conllu_file(str(pred)))
    ours = evaluate(gold, pred)
    assert 30 < ours["las"] < ours["uas"] < 95  # the perturbation changed heads and labels
    assert 80 < ours["upos"] < 99
    for metric in ("uas", "las", "clas", "upos"):
        assert ours[metric] == pytest.approx(100 * reference[metric.upper()].f1, abs=1e-9)


def _retokenised(gold: Path, out: Path, seed: int) -> Path:
    """The gold text tokenised otherwise, as a parser of raw text might: in each sentence at most
    one change (a multiword token left whole as one word, two words joined into one, a word cut
    in two), every fifth sentence joined to the next, no empty nodes; then heads, labels and tags
    perturbed as in ``_prediction``. Heads follow the words they named (a word removed: its
    neighbour kept)."""
    from parser.data.sentences import read_conllu

    rng = random.Random(seed)
    sentences = []
    for sentence in read_conllu(gold):
        rows = [t for t in sentence.tokenlist if isinstance(t["id"], int)]
        words = [{"form": t["form"], "upos": t["upos"], "deprel": t["deprel"]} for t in rows]
        for word, row in zip(words, rows):
            word["head"] = words[row["head"] - 1] if row["head"] else None
        tokens, inside = [], 0  # a token: [surface form, its words]
        for t in sentence.tokenlist:
            if isinstance(t["id"], tuple) and t["id"][1] == "-":
                tokens.append([t["form"], words[t["id"][0] - 1:t["id"][2]]])
                inside = t["id"][2]
            elif isinstance(t["id"], int) and t["id"] > inside:
                tokens.append([t["form"], [words[t["id"] - 1]]])
        change, k = rng.choice(["keep", "whole", "join", "cut"]), rng.randrange(len(tokens))
        if change == "whole" and len(tokens[k][1]) > 1 and _collapse(tokens, tokens[k][1]):
            tokens[k][1][0]["form"] = tokens[k][0]  # the multiword token as one word
            del tokens[k][1][1:]
        elif change == "join" and k + 1 < len(tokens) and len(tokens[k][1]) == len(tokens[k + 1][1]) == 1 \
                and _collapse(tokens, [tokens[k][1][0], tokens[k + 1][1][0]]):
            tokens[k][1][0]["form"] = tokens[k][0] = tokens[k][0] + tokens[k + 1][0]
            del tokens[k + 1]
        elif change == "cut" and len(tokens[k][1]) == 1 and len(tokens[k][0]) > 1:
            word = tokens[k][1][0]
            half = len(word["form"]) // 2
            tail = {"form": word["form"][half:], "upos": "X", "deprel": "dep", "head": word}
            word["form"], tokens[k][0] = word["form"][:half], word["form"][:half]
            tokens.insert(k + 1, [tail["form"], [tail]])
        if sentences and len(sentences) % 5 == 0 and sentences[-1][1] != "joined":
            root = next(w for token in tokens for w in token[1] if w["head"] is None)
            first_root = next(w for token in sentences[-1][0] for w in token[1] if w["head"] is None)
            root["head"], root["deprel"] = first_root, "parataxis"
            sentences[-1] = (sentences[-1][0] + tokens, "joined")
        else:
            sentences.append((tokens, "alone"))
    labels = sorted({w["deprel"] for tokens, _ in sentences for token in tokens for w in token[1]})
    blocks = []
    for tokens, _ in sentences:
        numbers, lines, n = {}, [], 0
        for _form, token_words in tokens:
            for word in token_words:
                n += 1
                numbers[id(word)] = n
        n = 0
        for form, token_words in tokens:
            if len(token_words) > 1:
                lines.append(f"{n + 1}-{n + len(token_words)}\t{form}" + "\t_" * 8)
            for word in token_words:
                n += 1
                head = numbers[id(word["head"])] if word["head"] is not None else 0
                lines.append(f"{n}\t{word['form']}\t_\t{word['upos']}\t_\t_\t{head}\t{word['deprel']}\t_\t_")
        blocks.append("\n".join(_perturb_sentence(lines, labels, rng)))
    out.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return out


def _collapse(tokens: list, group: list[dict]) -> bool:
    """Make ``group``'s words one (its first) where they are a subtree of the sentence (one of them
    hangs outside it): the first takes that one's head and label, the others' dependents hang
    from it. False (nothing changed) where they are not."""
    inside = {id(w) for w in group}
    tops = [w for w in group if w["head"] is None or id(w["head"]) not in inside]
    if len(tops) != 1:
        return False
    kept = group[0]
    kept["head"], kept["deprel"] = tops[0]["head"], tops[0]["deprel"]
    for _form, token_words in tokens:
        for word in token_words:
            if word is not kept and word["head"] is not None and id(word["head"]) in inside:
                word["head"] = kept
    return True


@pytest.mark.parametrize("name", FILES[:2])  # empty nodes, multiword tokens
def test_a_parse_of_raw_text_aligns_and_scores_as_the_official_scorer(name, ud_dir, tmp_path, official):
    """Another tokenisation of the same text: tokens, sentences, words, UPOS, UAS, LAS and CLAS
    all equal the official scorer's, multiword tokens and joined sentences included."""
    from parser.evaluate import scores

    gold = ud_dir / name
    pred = _retokenised(gold, tmp_path / "pred.conllu", seed=len(name))
    reference = official.evaluate(official.load_conllu_file(str(gold)), official.load_conllu_file(str(pred)))
    ours = scores(gold, pred)
    assert 90 < ours["words"].f1 < 100 and ours["sentences"].f1 < 95 and ours["tokens"].f1 < 100
    for metric, score in ours.items():
        official_name = metric.upper() if metric.upper() in reference else metric.capitalize()
        assert (score.precision, score.recall, score.f1) == pytest.approx(
            (100 * reference[official_name].precision, 100 * reference[official_name].recall,
             100 * reference[official_name].f1), abs=1e-9), metric
