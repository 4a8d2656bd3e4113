"""``treeexp statistics``: a language's statistics counted on K trees (bootstrap tolerances)
or written from a facts file, in the one format GE reads back."""

import math
from pathlib import Path

import pytest
import torch

from objectives.ge import FAMILIES, MIN_COUNT, load_constraints, read_facts
from parser import runs, statistics
from parser.data.lexicon import read_lexicon
from parser.data.sentences import read_conllu

WOLOF_DEV = "UD_Wolof-WTB/wo_wtb-ud-dev.conllu"


@pytest.fixture(scope="module")
def wolof_dev(ud_dir):
    return read_conllu(ud_dir / WOLOF_DEV)


def test_counted_rates_are_the_gold_rates_with_rare_ones_left_out(wolof_dev):
    families = ["tag_pairs", "label_sides", "pair_sides", "valency"]
    counted = statistics.counted_statistics(families, wolof_dev, resamples=0)
    everything = [c for family in families for c in FAMILIES[family]()]
    rates, over = statistics.counted_rates(everything, wolof_dev)
    kept = [(c, rate, n) for c, rate, n in zip(everything, rates.tolist(), over.tolist()) if not math.isnan(rate)]
    assert 0 < len(counted) == len(kept) < len(everything) and all(n >= MIN_COUNT for _, _, n in kept)
    for rule, (constraint, rate, n) in zip(counted, kept):
        assert (rule.parent, rule.child, rule.direction, rule.label, rule.per) == (
            constraint.parent, constraint.child, constraint.direction, constraint.label, constraint.per)
        assert rule.target == pytest.approx(rate, abs=5e-5)
        q = min((rate * n + 0.5) / (n + 1), 1.0)  # a rate per head may exceed 1: then no floor
        assert rule.tolerance == pytest.approx(math.sqrt(q * (1 - q) / n), abs=5e-5)  # no resampling: the floor
    noun = sum(r.target for r in counted if r.child == "NOUN" and r.label is not None)  # label_sides: a distribution
    assert 0.9 < noun <= 1 + 1e-3  # but for the relations too rare to keep
    assert any(r.per == "head" and r.target > 1 for r in counted)  # some tag has more than one dependent on a side


def test_bootstrap_tolerances_shrink_with_more_trees(wolof_dev):
    def keyed(sentences):
        return {(c.parent, c.child): c for c in statistics.counted_statistics(["pair_sides"], sentences, resamples=15)}

    few, many = keyed(wolof_dev[:30]), keyed(wolof_dev[:240])
    shared = [key for key in few if key in many and 0.1 < many[key].target < 0.9]
    assert shared
    assert sum(few[k].tolerance > many[k].tolerance for k in shared) > 0.8 * len(shared)
    again = list(keyed(wolof_dev[:30]).values())
    assert again == list(few.values())  # seeded


def test_the_command_writes_a_file_ge_reads_back(ud_dir, tmp_path, capsys):
    output = tmp_path / "stats.yaml"
    statistics.main(["count", str(ud_dir / WOLOF_DEV), "--skip", "10", "--trees", "40", "--families", "tag_pairs",
                     "distances", "--resamples", "20", "--output", str(output)])
    wolof = read_conllu(ud_dir / WOLOF_DEV)[10:50]
    assert load_constraints(output) == statistics.counted_statistics(["tag_pairs", "distances"], wolof, resamples=20)
    text = output.read_text()
    assert text.startswith("# GE statistics of tag_pairs + distances: rates in the first 40 trees")
    assert "treeexp statistics count" in text and "-> " + str(output) in capsys.readouterr().out
    statistics.main(["count", str(ud_dir / WOLOF_DEV), "--families", "valency", "--resamples", "0", "--output", str(output)])
    assert "(an oracle)" in output.read_text().splitlines()[0]


def test_facts_are_written_as_the_constraints_they_mean(tmp_path):
    output = tmp_path / "facts_stats.yaml"
    facts = Path(__file__).resolve().parents[1] / "configs" / "facts" / "welsh.yaml"
    statistics.main(["facts", str(facts), "--output", str(output)])
    assert load_constraints(output) == read_facts(facts)


def test_bad_input_is_one_line(tmp_path, capsys):
    missing = tmp_path / "none.conllu"
    with pytest.raises(SystemExit) as raised:
        statistics.main(["count", str(missing), "--output", str(tmp_path / "x.yaml")])
    assert raised.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    empty = tmp_path / "empty.conllu"
    empty.write_text("")
    with pytest.raises(SystemExit):
        statistics.main(["count", str(empty), "--output", str(tmp_path / "x.yaml")])
    assert "empty file" in capsys.readouterr().err


def test_counts_summed_over_batches_of_like_length_are_those_of_one_batch(wolof_dev):
    """Any batch size counts the same (a treebank with long sentences is counted in bounded memory)."""
    constraints = [c for family in ("label_sides", "pair_sides", "valency") for c in FAMILIES[family]()]
    whole = statistics.counted_rates(constraints, wolof_dev[:60], batch_words=10**9)
    for batch_words in (1, 300):
        batched = statistics.counted_rates(constraints, wolof_dev[:60], batch_words=batch_words)
        for one, other in zip(whole, batched):
            torch.testing.assert_close(one, other, equal_nan=True, rtol=1e-12, atol=1e-12)
    assert whole[0].isfinite().sum() > 100


def test_counting_is_float64_and_needs_no_labels_for_tag_families(wolof_dev):
    rates, over = statistics.counted_rates(FAMILIES["tag_pairs"](), wolof_dev[:5])
    assert rates.dtype == torch.float64 and over.dtype == torch.float64


def test_a_parsers_rates_are_measured_batch_by_batch_beside_the_targets(tiny_bert_dir, wolof_dev, tmp_path, capsys):
    """``measure``: a parser's expected rates, summed over batches (any batch size gives the
    same), its tagger tagging the text; with trees the gold rates beside them."""
    from parser.model import Parser
    from parser.network import Heads

    model = Parser(str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16, tagger=True))
    model.build(sorted({d for s in wolof_dev for d in s.deprels}))
    model.save(tmp_path / "parser")
    facts = Path(__file__).resolve().parents[1] / "configs" / "facts" / "wolof.yaml"
    constraints = read_facts(facts)
    parser = Parser.load(tmp_path / "parser")
    one, many = (statistics.measured_rates(parser, constraints, wolof_dev[:12], size) for size in (12, 5))
    torch.testing.assert_close(one, many)
    assert ((one > 0) & (one < 1)).all()
    statistics.main(["measure", str(facts), str(tmp_path / "parser"), str(ud_dir_file(wolof_dev)), "--sentences", "12"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["statistic", "target", "parser", "outside", "gold"]
    assert table[2].startswith("any obj right of VERB per arc") and len(table) == len(constraints) + 4
    assert table[-3].startswith("mean distance outside the bands:")  # the facts file's words tag the text too
    gaps = statistics.outside_bands(constraints, statistics.measured_rates(parser, constraints, wolof_dev[:12],
                                                                           lexicon=read_lexicon(facts)))
    assert all(gap >= 0 for gap in gaps) and any(gap > 0 for gap in gaps)  # a parser that never trained
    assert [round(g, 3) for g in gaps] == [float(line.split()[-2]) for line in table[1:-3]]
    with_words = statistics.facts_distance(parser, facts, wolof_dev[:12])  # the facts file's words tag the text
    assert with_words == pytest.approx(float(table[-3].split()[5]), abs=5e-5) and with_words > 0
    assert table[-2].startswith(f"lexicon: {len(read_lexicon(facts))} forms tag ") and "as the text does" in table[-2]
    assert table[-1].startswith("tagger: ") and "listed words tagged as listed" in table[-1]


def test_the_tagger_is_measured_against_the_facts_files_words(tiny_bert_dir, wolof_dev, capsys):
    """``tagger_agreement``: the listed words the parser's tagger tags as the list does, any batch
    size alike; a tagger that says DET everywhere agrees on exactly the words listed as DET."""
    from parser.model import Parser
    from parser.network import Heads

    model = Parser(str(tiny_bert_dir), heads=Heads(arc_size=32, label_size=16, tagger=True))
    model.build(sorted({d for s in wolof_dev for d in s.deprels}))
    lexicon = read_lexicon(Path(__file__).resolve().parents[1] / "configs" / "facts" / "wolof.yaml")
    words = [w.lower() for s in wolof_dev[:20] for w in s.words]
    listed = sum(w in lexicon for w in words)
    assert listed > 20 and statistics.tagger_agreement(model, lexicon, wolof_dev[:20], 20) == \
        statistics.tagger_agreement(model, lexicon, wolof_dev[:20], 3)
    with torch.no_grad():
        model.network.tagger[-1].bias[model.network.upos_vocab.index("DET")] = 1e4
    determiners = sum(lexicon.get(w) == "DET" for w in words)
    assert 0 < determiners < listed
    assert statistics.tagger_agreement(model, lexicon, wolof_dev[:20]) == (determiners, listed)


def ud_dir_file(sentences) -> Path:
    """The file the sentences were read from."""
    return Path(sentences[0].path)


def test_the_shipped_rules_file_is_what_treeexp_statistics_rules_writes(ud_dir, tmp_path, capsys):
    output = tmp_path / "rules.yaml"
    statistics.main(["rules", "--root", str(ud_dir), "--output", str(output)])
    assert output.read_text() == (runs.CONFIGS / "rules" / "naseem_ud.yaml").read_text()
    assert capsys.readouterr().out.splitlines()[-1].startswith("coverage")
