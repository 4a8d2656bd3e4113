"""The parser end to end on a tiny random BERT: train steps, checkpoint, parse, CoNLL-U round trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything

from objectives.baselines import enumerate_trees
from objectives.entropy_regularizer import EntropyRegularizer
from objectives.ge import GeneralizedExpectation, estimate_targets
from objectives.kl import Distillation
from objectives.likelihood import Likelihood
from objectives.sampled import SampledSelfTraining
from objectives.schedule import Schedule
from objectives.tagging import TagLikelihood
from parser.data.batch import collate
from parser.crossing_margin import best, sweep
from parser.data.datamodule import DependencyDataModule
from parser.evaluate import Validity, evaluate, nonprojective_arcs, validity
from parser.decoding.decode import Decoding
from parser.model import Parser
from parser.network import EncoderOptions, Heads
from parser.predict import ConlluWriter, predict
from parser.data.sentences import read_conllu
from parser.training.teacher import Teacher, TeacherOptions
from parser.training.terms import Term


def tiny_parser(encoder_dir: Path, *terms: Term, heads: Heads = Heads(arc_size=32, label_size=16), **kwargs) -> Parser:
    """A parser on the tiny BERT with small heads, trained with ``terms``."""
    return Parser(encoder=str(encoder_dir), heads=heads, terms=list(terms), **kwargs)


def _trainer(tmp_path: Path, steps: int) -> Trainer:
    return Trainer(
        max_steps=steps,
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        check_val_every_n_epoch=1,
    )


def test_fit_checkpoint_parse_round_trip(tiny_bert_dir, small_treebank, tmp_path):
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                test=str(small_treebank), batch_tokens=400)
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), lr=5e-3, warmup_steps=2)
    trainer = _trainer(tmp_path, steps=12)
    trainer.fit(model, data)
    assert "val/uas" in trainer.callback_metrics and "val/las" in trainer.callback_metrics
    loss = float(trainer.callback_metrics["train/loss"])
    assert math.isfinite(loss)

    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    loaded = Parser.load(ckpt)
    assert loaded.network.label_vocab.itos == model.network.label_vocab.itos and not loaded.terms.terms

    parses = loaded.parse([["The", "dog", "barks", "."], ["Hi"]], marginals=True)
    assert [len(p.heads) for p in parses] == [4, 1]
    assert parses[1].heads == [0]
    assert sum(h == 0 for h in parses[0].heads) == 1
    assert torch.allclose(parses[0].marginals[:, 1:].sum(0), torch.ones(4), atol=1e-5)

    out = tmp_path / "pred.conllu"
    predict(str(ckpt), str(small_treebank), str(out), batch_size=8, device="cpu")
    gold, pred = read_conllu(small_treebank), read_conllu(out)
    assert [s.words for s in gold] == [s.words for s in pred]
    assert [s.upos for s in gold] == [s.upos for s in pred]
    scores = evaluate(small_treebank, out)
    assert 0 <= scores["las"] <= scores["uas"] <= 100

    written = tmp_path / "trainer-pred.conllu"  # the same through Trainer.predict and the writer callback
    data.predict = str(small_treebank)
    Trainer(logger=False, enable_progress_bar=False, callbacks=[ConlluWriter(str(written))]).predict(
        loaded, datamodule=data, return_predictions=False
    )
    assert written.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")


def test_training_decreases_the_loss(tiny_bert_dir, small_treebank):
    """A few optimiser steps on one batch lower the supervised loss (finite throughout)."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=300)
    data.setup("fit")
    model = tiny_parser(tiny_bert_dir, heads=Heads(32, 16, dropout=0.0), labels=data.label_vocab.itos)
    likelihood = Likelihood()
    batch = next(iter(data.val_dataloader()))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = likelihood(model(batch.words), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.7 * losses[0]


def test_ge_targets_come_from_the_labeled_sentences(tiny_bert_dir, small_treebank, tmp_path):
    """``targets_from: labeled``: the parser estimates the GE targets from the labeled split
    only, for every feature family (tag pairs, distances, labels: the parser's label vocabulary)."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                labeled_size=15, batch_tokens=300)
    ge = GeneralizedExpectation(["tag_pairs", "distances", "labels"], targets_from="labeled", min_count=3)
    model = tiny_parser(tiny_bert_dir, Term(ge, "unlabeled"))
    _trainer(tmp_path, steps=2).fit(model, data)
    labeled = collate(data.train_sentences, model.network.upos_vocab, model.network.label_vocab)
    assert len(data.train_sentences) == 15 and data.has_unlabeled
    expected = estimate_targets(ge.constraints, labeled.heads, labeled.upos, labeled.lengths, model.network.upos_vocab.itos,
                                3, labeled.labels, model.network.label_vocab.itos)
    assert ((expected > 0) & (expected < 1))[[c.label is not None for c in ge.constraints]].any()
    assert expected.isfinite().any() and expected.isnan().any()
    torch.testing.assert_close(ge.targets, expected.float(), equal_nan=True)
    assert math.isfinite(float(model.trainer.callback_metrics["train/generalized_expectation"]))


def test_bad_terms_are_refused():
    with pytest.raises(ValueError, match="decay"):
        Term(Likelihood(), weight=Schedule(1.0, decay="cosine"))
    with pytest.raises(ValueError, match="'labeled' or 'unlabeled'"):
        Parser(terms=[Term(Likelihood(), data="gold")])


def test_a_weight_decays_to_zero_over_the_run(tiny_bert_dir, small_treebank, tmp_path):
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                labeled_size=15, batch_tokens=300)
    ge = GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=3)
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), Term(ge, "unlabeled", Schedule(2.0, decay="linear"), "ge"))
    _trainer(tmp_path, steps=4).fit(model, data)
    metrics = model.trainer.callback_metrics
    assert float(metrics["train/weight/ge"]) == 0.5  # step 3 of 4: 2 * (4 - 3) / 4
    assert "train/weight/likelihood" not in metrics  # a constant weight is not logged


def test_training_needs_a_finite_length(tiny_bert_dir, small_treebank, tmp_path):
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=300)
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()))
    endless = Trainer(max_steps=-1, max_epochs=-1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="finite length"):
        endless.fit(model, data)


def test_a_parser_without_objectives_has_nothing_to_train(tiny_bert_dir, small_treebank, tmp_path):
    """The model names no objective: given no term, fit stops with one clear line."""
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=300)
    model = tiny_parser(tiny_bert_dir)
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="nothing to train"):
        trainer.fit(model, data)


def test_batches_arrive_tokenised_from_dataloader_workers(tiny_bert_dir, small_treebank, tmp_path):
    """The model hands its SubwordTokenizer to the data module; a worker process collates
    batches with their subwords, and scores equal those of tokenising in forward."""
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                batch_tokens=300, num_workers=1)
    data.setup("fit")
    model = tiny_parser(tiny_bert_dir, labels=data.label_vocab.itos).eval()
    _trainer(tmp_path, steps=1).validate(model, data)
    batch = next(iter(data.val_dataloader()))
    assert batch.subwords is not None
    with torch.no_grad():
        torch.testing.assert_close(model(batch.words, batch.subwords).arcs, model(batch.words).arcs)


def test_skipped_unlabeled_lines_are_counted_in_the_log(tiny_bert_dir, small_treebank, tmp_path):
    blocks = small_treebank.read_text(encoding="utf-8").split("\n\n")[:12]
    broken = [blocks[0].replace("\t", " ", 1), *blocks[1:5], blocks[5] + "\n1\tonly-two-columns"]
    unlabeled = tmp_path / "raw.conllu"
    unlabeled.write_text("\n\n".join(broken + blocks[6:]) + "\n\n", encoding="utf-8")
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                unlabeled=str(unlabeled), batch_tokens=300)
    model = tiny_parser(tiny_bert_dir, Term(EntropyRegularizer(), "unlabeled"))
    trainer = _trainer(tmp_path, steps=1)  # one pass of the stream reaches both bad lines (shuffle buffer > file)
    trainer.fit(model, data)
    assert trainer.callback_metrics["train/unlabeled_skipped"] == 2


@pytest.mark.parametrize("multiroot", [False, True])
def test_the_model_owns_the_tree_set_of_its_objectives(multiroot, tiny_bert_dir, small_treebank, tmp_path):
    """The decoding's tree set reaches training objectives (through ``setup``)."""
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), labeled_size=10,
                                batch_tokens=300)
    terms = [Term(Likelihood()), Term(EntropyRegularizer(), "unlabeled")]
    model = tiny_parser(tiny_bert_dir, *terms, decoding=Decoding(multiroot=multiroot))
    _trainer(tmp_path, steps=1).fit(model, data)
    assert all(term.objective.multiroot is multiroot for term in terms)


def test_tagger_learns_fills_upos_and_tags_raw_text_for_ge(tiny_bert_dir, small_treebank, tmp_path):
    """A tagging term: the tagging loss falls; predict fills UPOS only where the input has
    ``_`` and keeps every other column; GE runs on a plain-text corpus with predicted tags."""
    seed_everything(0)
    words = [s.words for s in read_conllu(small_treebank)]
    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join(" ".join(w) for w in words) + "\n", encoding="utf-8")
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                unlabeled=str(raw), batch_tokens=300)
    ge = GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=2)
    model = tiny_parser(tiny_bert_dir, Term(TagLikelihood()), Term(ge, "unlabeled"), lr=1e-2, warmup_steps=1)
    assert model.network is None and model.heads.tagger  # a term needs tag scores: the network will have a tagger
    trainer = _trainer(tmp_path, steps=12)
    trainer.fit(model, data)
    metrics = trainer.callback_metrics
    assert math.isfinite(float(metrics["train/generalized_expectation"])) and math.isfinite(float(metrics["train/tag_likelihood"]))
    assert 0 <= float(metrics["val/upos"]) <= 100

    ckpt = tmp_path / "tagger.ckpt"
    trainer.save_checkpoint(ckpt)
    blocks = small_treebank.read_text(encoding="utf-8").split("\n\n")[:3]
    untagged = tmp_path / "untagged.conllu"  # UPOS blanked on word 1 of each sentence only
    untagged.write_text("\n\n".join(b.replace("\tDET\t", "\t_\t", 1) for b in blocks) + "\n\n", encoding="utf-8")
    out = tmp_path / "tagged.conllu"
    predict(str(ckpt), str(untagged), str(out), device="cpu")
    given, written = read_conllu(untagged), read_conllu(out)
    for g, w in zip(given, written, strict=True):
        assert all(t == u for t, u in zip(g.upos, w.upos) if t != "_") and "_" not in w.upos
        assert [tok["xpos"] for tok in g.tokenlist] == [tok["xpos"] for tok in w.tokenlist]
    assert Parser.load(ckpt).parse([["The", "dog"]])[0].tags is not None
    written = tmp_path / "trainer-tagged.conllu"  # Trainer.predict's writer fills UPOS the same way
    data.predict = str(untagged)
    Trainer(logger=False, enable_progress_bar=False, callbacks=[ConlluWriter(str(written))]).predict(
        Parser.load(ckpt), datamodule=data, return_predictions=False)
    assert written.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")

    projective, spanning = tmp_path / "projective.conllu", tmp_path / "spanning.conllu"  # chosen at predict time
    predict(str(ckpt), str(small_treebank), str(projective), device="cpu", projective=True)
    predict(str(ckpt), str(small_treebank), str(spanning), device="cpu", projective=False)
    def crossing(path):
        return [s.source for s in read_conllu(path) if any(nonprojective_arcs(s.heads))]

    assert not crossing(projective) and crossing(spanning)  # the same parser's spanning trees cross
    # the margin sweep on the same file: its ends are these two decodings, as parser.evaluate scores them
    choices = sweep(Parser.load(ckpt), read_conllu(small_treebank), batch_size=8)
    for choice, path in ((choices[0], spanning), (choices[-1], projective)):
        scores = evaluate(small_treebank, path)
        assert (round(choice.uas, 6), round(choice.las, 6)) == (round(scores["uas"], 6), round(scores["las"], 6))
    assert choices[0].nonprojective > 0 and choices[-1].nonprojective == 0 and len(choices) > 2
    assert best(choices).las == max(c.las for c in choices)
    predict(str(ckpt), str(small_treebank), str(spanning), device="cpu", crossing_margin=choices[1].margin)
    assert round(evaluate(small_treebank, spanning)["las"], 6) == round(choices[1].las, 6)
    with pytest.raises(ValueError, match="not both"):
        predict(str(ckpt), str(small_treebank), str(spanning), device="cpu", projective=True, crossing_margin=1.0)


def test_ge_trains_the_tagger_on_raw_text_only_with_train_tags(tiny_bert_dir, small_treebank, tmp_path):
    """The tags GE reads on raw text are the tagger's distribution with its graph: GE's gradient
    reaches the tagger's weights with train_tags, and none does without."""
    seed_everything(0)
    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join(" ".join(s.words) for s in read_conllu(small_treebank)) + "\n", encoding="utf-8")
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                unlabeled=str(raw), batch_tokens=300)
    ge = GeneralizedExpectation("tag_pairs", targets_from="labeled", min_count=2)
    model = tiny_parser(tiny_bert_dir, Term(TagLikelihood()), Term(ge, "unlabeled"), lr=1e-2, warmup_steps=1)
    _trainer(tmp_path, steps=1).fit(model, data)
    batch = next(iter(data.train_dataloader()))[0]["unlabeled"]
    weights = list(model.network.tagger.parameters())
    for train_tags in (False, True):
        ge.train_tags = train_tags
        scores = model(batch.words, batch.subwords, batch.treebanks)
        loss = ge(scores, model.network.with_predicted_tags(batch, scores))
        grads = torch.autograd.grad(loss, weights, allow_unused=True)
        assert all(g is None for g in grads) != train_tags
        assert train_tags == any(g is not None and g.abs().sum() > 0 for g in grads)


def test_tagger_loss_decreases(tiny_bert_dir, small_treebank):
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=300)
    data.setup("fit")
    model = tiny_parser(tiny_bert_dir, heads=Heads(32, 16, dropout=0.0, tagger=True), labels=data.label_vocab.itos)
    batch = next(iter(data.val_dataloader()))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        logits = model(batch.words).tags
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), model.network.tag_targets(batch.upos).flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_a_teacher_from_another_treebank_distils_its_labels_by_name(tiny_bert_dir, small_treebank):
    """The teacher's label scores come in the student's label order, matched by name (a
    label the teacher never saw gets no mass), so the labeled KL runs across treebanks."""
    sentences = read_conllu(small_treebank)[:4]
    labels = sorted({d for s in sentences for d in s.deprels})
    teacher_labels = [*reversed(labels[1:]), "goeswith"]  # another order, one label missing, one extra
    student = tiny_parser(tiny_bert_dir, labels=labels)
    teacher = tiny_parser(tiny_bert_dir, labels=teacher_labels).eval()
    batch = collate(sentences, student.network.upos_vocab, student.network.label_vocab)
    given = Teacher([teacher.network]).scores(batch.words, labels, student.device)
    with torch.no_grad():
        own = teacher(batch.words).labels
    assert given.labels.shape[-1] == len(labels)
    assert torch.isneginf(given.labels[..., 0]).all()  # labels[0]: unknown to the teacher
    for j, name in enumerate(labels[1:], 1):
        torch.testing.assert_close(given.labels[..., j], own[..., teacher_labels.index(name)])
    loss = Distillation(labeled=True)(student(batch.words), batch, given)
    loss.backward()
    assert math.isfinite(float(loss))
    assert all(torch.isfinite(p.grad).all() for p in student.network.scorer.parameters() if p.grad is not None)


def test_several_teachers_teach_their_product_of_experts(tiny_bert_dir, small_treebank):
    """An ensemble teacher gives the mean of its parsers' arc and label scores, so its tree
    distribution is the normalised geometric mean of theirs: ``log p(d) = mean_i log p_i(d)
    - log Z`` for every tree (enumerated on a short sentence)."""
    sentences = [s for s in read_conllu(small_treebank) if len(s.words) <= 5][:2]
    labels = sorted({d for s in read_conllu(small_treebank) for d in s.deprels})
    parsers = []
    for seed in (1, 2):
        seed_everything(seed)
        parsers.append(tiny_parser(tiny_bert_dir, labels=labels).eval())
    words = [s.words for s in sentences]
    ensemble = Teacher([p.network for p in parsers]).scores(words, labels, torch.device("cpu"))
    with torch.no_grad():
        own = [p(words) for p in parsers]
    torch.testing.assert_close(ensemble.arcs, (own[0].arcs + own[1].arcs) / 2)
    torch.testing.assert_close(ensemble.labels, (own[0].labels + own[1].labels) / 2)
    n = len(words[0])
    heads = enumerate_trees(n, multiroot=False)[:, 1:]  # (T, n): every single-root tree of the first sentence

    def log_probs(arcs: torch.Tensor) -> torch.Tensor:  # log p(d) of each tree, arcs[b, head, dependent]
        score = arcs[0, : n + 1, : n + 1].double()[heads, torch.arange(1, n + 1)].sum(1)
        return score - torch.logsumexp(score, 0)

    geometric = (log_probs(own[0].arcs) + log_probs(own[1].arcs)) / 2
    torch.testing.assert_close(log_probs(ensemble.arcs), geometric - torch.logsumexp(geometric, 0))
    with pytest.raises(ValueError, match="one moving average"):
        Teacher([p.network for p in parsers], decay=0.9)


def test_a_cached_teacher_scores_each_sentence_once(tiny_bert_dir, small_treebank):
    """With ``cache_mib``, the teacher scores only the sentences it has not seen (once each,
    in one batch), and gives the batch's scores as without a cache where the sentences are,
    zeros beyond them."""
    sentences = read_conllu(small_treebank)[:5]
    labels = sorted({d for s in sentences for d in s.deprels})
    network = tiny_parser(tiny_bert_dir, labels=labels).eval().network
    words = [s.words for s in sentences]
    cpu = torch.device("cpu")
    batched = Teacher([network]).scores(words, labels, cpu)
    calls = []
    network.register_forward_hook(lambda module, inputs, output: calls.append(len(inputs[0])))
    cached = Teacher([network], cache_mib=64)
    first = cached.scores(words[:3] + words[:1], labels, cpu)  # the first sentence twice
    assert calls == [3] and len(cached.cache) == 3
    again = cached.scores(words[::-1], labels, cpu)  # three known sentences, two new
    assert calls == [3, 2] and len(cached.cache) == 5
    for i, sentence in enumerate(words):
        n = len(sentence) + 1
        row = again.arcs[len(words) - 1 - i]
        torch.testing.assert_close(row[:n, :n], batched.arcs[i, :n, :n])
        torch.testing.assert_close(again.labels[len(words) - 1 - i, :n, :n], batched.labels[i, :n, :n])
        assert not row[n:].any() and not row[:, n:].any()
        if i < 3:
            assert torch.equal(first.arcs[i, :n, :n], row[:n, :n])
    assert torch.equal(first.arcs[3], first.arcs[0])


def test_the_teacher_cache_keeps_the_latest_sentences_within_its_size(tiny_bert_dir, small_treebank):
    """Past ``cache_mib``, the least recently used sentences go first; a moving-average
    teacher (whose scores change every step) keeps none."""
    sentences = read_conllu(small_treebank)[:6]
    labels = sorted({d for s in sentences for d in s.deprels})
    network = tiny_parser(tiny_bert_dir, labels=labels).eval().network
    words = [s.words for s in sentences]
    sizes = []
    for sentence in words:
        alone = Teacher([network], cache_mib=64)
        alone.scores([sentence], labels, torch.device("cpu"))
        sizes.append(alone.cache.size)
    room = sizes[-1] + sizes[-2] + min(sizes[:-2]) // 2  # the last two sentences fit, no third one
    teacher = Teacher([network], cache_mib=room / 2**20)
    for sentence in words:
        teacher.scores([sentence], labels, torch.device("cpu"))
        assert teacher.cache.size <= teacher.cache.capacity
    assert len(teacher.cache) == 2 and teacher.cache.size == sizes[-1] + sizes[-2]
    assert teacher.cache.get(words[-1]) is not None and teacher.cache.get(words[-2]) is not None
    assert Teacher([network], decay=0.9, cache_mib=64).cache is None


def test_ema_teacher_follows_the_student(tiny_bert_dir, small_treebank, tmp_path):
    """Self-distillation from a moving average of the parser's own weights: the teacher
    starts as the parser and after each step moves (1 - decay) of the way to it."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), labeled_size=15,
                                batch_tokens=300)
    data.setup("fit")
    model = tiny_parser(tiny_bert_dir, Term(Distillation(), "unlabeled"), teacher=TeacherOptions(ema=0.5), warmup_steps=1, lr=1e-2,
                        labels=data.label_vocab.itos)
    start = [p.detach().clone() for p in model.network.parameters()]
    trainer = _trainer(tmp_path, steps=1)
    trainer.fit(model, data)
    assert math.isfinite(float(trainer.callback_metrics["train/distillation"]))
    teacher = dict(model._teacher.networks[0].named_parameters())
    moved = 0
    for (name, student), initial in zip(model.network.named_parameters(), start):
        torch.testing.assert_close(teacher[name], 0.5 * initial + 0.5 * student.detach())
        moved += not torch.equal(student, initial)
    assert moved > 0

    with pytest.raises(ValueError, match="not both"):
        TeacherOptions(str(tmp_path / "t.ckpt"), ema=0.9)


def test_self_training_on_sampled_trees_trains_from_a_teacher(tiny_bert_dir, small_treebank, tmp_path):
    """SampledSelfTraining as an unlabeled term: the teacher's scores reach it, it trains."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), labeled_size=15,
                                batch_tokens=300)
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), Term(SampledSelfTraining(samples=2), "unlabeled"),
                        teacher=TeacherOptions(ema=0.9), warmup_steps=1)
    trainer = _trainer(tmp_path, steps=2)
    trainer.fit(model, data)
    assert math.isfinite(float(trainer.callback_metrics["train/sampled_self_training"]))


def test_ge_with_teacher_targets_trains_on_plain_text(tiny_bert_dir, small_treebank, tmp_path):
    """GE whose targets are the teacher's rates on each batch: the term asks for a teacher
    (the model gives it one) and reads the tagger's tags on untagged text."""
    seed_everything(0)
    raw = tmp_path / "raw.txt"
    raw.write_text("".join(" ".join(s.words) + "\n" for s in read_conllu(small_treebank)), encoding="utf-8")
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), unlabeled=str(raw),
                                batch_tokens=300)
    ge = GeneralizedExpectation("tag_pairs", targets_from="teacher")
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), Term(TagLikelihood()), Term(ge, "unlabeled"),
                        teacher=TeacherOptions(ema=0.9), warmup_steps=1)
    trainer = _trainer(tmp_path, steps=2)
    trainer.fit(model, data)
    assert model._teacher is not None and math.isfinite(float(trainer.callback_metrics["train/generalized_expectation"]))


def test_character_vectors_and_word_dropout_train_save_and_load(tiny_bert_dir, small_treebank, tmp_path):
    """Character vectors, word dropout, the layer mix and an LSTM train end to end, the
    parts that start from scratch at ``lr`` and the transformer's unfrozen layers at
    ``encoder_lr``, and a checkpoint rebuilds the same parser."""
    seed_everything(0)
    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank), batch_tokens=400)
    options = EncoderOptions(characters=16, word_dropout=0.2, layer_mix=True, lstm_layers=1, lstm_size=8, freeze=1)
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), encoder_options=options, lr=5e-3, encoder_lr=1e-4,
                        warmup_steps=1)
    trainer = _trainer(tmp_path, steps=3)
    trainer.fit(model, data)
    scratch, transformer = trainer.optimizers[0].param_groups
    assert scratch["initial_lr"] == 5e-3 and transformer["initial_lr"] == 1e-4
    ids = {id(p) for p in scratch["params"]}
    encoder = model.network.encoder
    assert all(id(p) in ids for p in [*encoder.characters.parameters(), *encoder.lstm.parameters(), encoder.mix_weights])
    assert {id(p) for p in transformer["params"]} == {id(p) for p in encoder.model.encoder.layer[1:].parameters()}
    trainer.save_checkpoint(tmp_path / "chars.ckpt")
    loaded, words = Parser.load(tmp_path / "chars.ckpt"), [["Jàng", "na", "téere", "bi", "."]]
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(words).arcs, model(words).arcs)
    assert loaded.network.encoder.hidden_size == 16 and loaded.network.encoder.word_dropout == 0.2


def test_an_untrained_parser_writes_trees_that_ud_accepts(tiny_bert_dir, small_treebank, tmp_path):
    """Random label scores still give HEAD 0 the label root and no other word (parse and
    predict decode alike); one root per sentence, no cycle."""
    torch.manual_seed(0)
    sentences = read_conllu(small_treebank)
    parser = tiny_parser(tiny_bert_dir, labels=sorted({d for s in sentences for d in s.deprels}))
    saved = parser.save(tmp_path / "untrained")
    predict(str(saved), str(small_treebank), str(tmp_path / "out.conllu"))
    assert validity(tmp_path / "out.conllu") == Validity(sentences=len(sentences), root_labels=0, roots=0, cycles=0)


class SlopeOfNaN(Likelihood):
    """The likelihood plus ``sqrt(0 * arcs)``: a finite loss whose gradient is NaN (the 0 * inf
    a penalty's square root at 0 once hid)."""

    def forward(self, scores, batch, teacher=None, step=0):
        return super().forward(scores, batch, teacher, step) + (scores.arcs.float().sum() * 0).sqrt()


def test_a_gradient_that_is_not_finite_stops_the_run_in_one_line_before_the_step(tiny_bert_dir, small_treebank, tmp_path):
    from parser.cli import Failure

    data = DependencyDataModule(treebank=None, train=str(small_treebank), dev=str(small_treebank),
                                test=str(small_treebank), batch_tokens=400)
    model = tiny_parser(tiny_bert_dir, Term(SlopeOfNaN()), lr=5e-3, warmup_steps=2)
    with pytest.raises(Failure, match=r"^step 0: the gradient is not finite .* terms at loss [0-9.]+, slope_of_na_n [0-9.]+: "):
        _trainer(tmp_path, steps=3).fit(model, data)
    assert all(parameter.isfinite().all() for parameter in model.parameters())  # no step spread the NaN
    model = tiny_parser(tiny_bert_dir, Term(Likelihood()), lr=5e-3, warmup_steps=2)
    _trainer(tmp_path, steps=3).fit(model, data)  # a finite gradient trains on
