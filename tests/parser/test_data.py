import gzip
import io
import logging
import multiprocessing
import pickle
import shutil
from pathlib import Path
from unittest import mock
from urllib.error import URLError

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.utilities import CombinedLoader

from objectives.conventions import ConfigurationError
from parser import fetch
from parser.data.batch import Batch, collate
from parser.data.datamodule import DependencyDataModule, expand_files
from parser.data.sentences import ConlluError, has_upos, read_conllu, read_sentences, read_text, write_conllu
from parser.data.stream import Source
from parser.data.vocab import Vocab, build_label_vocab, build_upos_vocab, reindex_labels

FIXTURES = Path(__file__).parent / "fixtures"
MWT = FIXTURES / "mwt_empty.conllu"

# A valid 3-word sentence; tests break one of its lines.
WORDS = [
    "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_",
    "2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_",
    "3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_",
]


def write(path, *sentences):
    """Write sentences, each a list of lines after a sent_id comment, as CoNLL-U."""
    path.write_text("".join(write_lines(lines) for lines in sentences), encoding="utf-8")
    return path


def write_lines(lines):
    """One CoNLL-U sentence (a sent_id comment, then ``lines``) as text."""
    return "\n".join(["# sent_id = s", *lines]) + "\n\n"


def with_line(index, line):
    return [line if i == index else word for i, word in enumerate(WORDS)]


def test_read_keeps_syntactic_words_only():
    first, second = read_conllu(MWT)
    assert first.words == ["Vamos", "a", "el", "mercado", "."]
    assert first.upos == ["VERB", "ADP", "DET", "NOUN", "PUNCT"]
    assert first.heads == [0, 4, 4, 1, 1]
    assert first.deprels == ["root", "case", "det", "obl:arg", "punct"]
    assert (first.source, second.source) == (f"{MWT}:1", f"{MWT}:13")
    assert second.words == ["Sue", "likes", "coffee", "and", "Bill", "tea", "."]
    assert len(second.tokenlist) == 8  # the empty node 5.1 stays in the TokenList


def test_round_trip_fixture_is_byte_identical():
    out = io.StringIO()
    write_conllu(read_conllu(MWT), out)
    assert out.getvalue() == MWT.read_text(encoding="utf-8")


def test_round_trip_ewt_dev_is_byte_identical(ud_dir, tmp_path):
    dev, out = ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu", tmp_path / "dev.conllu"
    write_conllu(read_conllu(dev), out)
    assert out.read_bytes() == dev.read_bytes()


def test_comments_are_written_as_read_however_they_are_spelled(tmp_path):
    """Comment lines the metadata dict cannot hold as written (UD releases have each of these: a
    key twice, no value, no space after '=', two spaces, a trailing space) come back verbatim,
    predictions written or not."""
    comments = ["# -:- coding= UTF-8 -:-", "# text[fra] = one", "# text[fra] = two", "# title_en =", "# text =A b",
                "# text_ga =  A b ", "# newpar"]
    source = tmp_path / "odd.conllu"
    source.write_text("\n".join(comments) + "\n1\tA\ta\tNOUN\t_\t_\t0\troot\t_\t_\n2\tb\tb\tX\t_\t_\t1\tdep\t_\t_\n\n",
                      encoding="utf-8")
    out = io.StringIO()
    write_conllu(read_conllu(source), out)
    assert out.getvalue() == source.read_text(encoding="utf-8")
    write_conllu(read_conllu(source), tmp_path / "pred.conllu", heads=[[2, 0]], deprels=[["dep", "root"]])
    assert (tmp_path / "pred.conllu").read_text(encoding="utf-8").splitlines()[:len(comments)] == comments


def test_write_replaces_only_head_and_deprel(tmp_path):
    sentences = read_conllu(MWT)
    heads = [[0, 1, 4, 1, 4], [2, 0, 2, 2, 2, 5, 2]]
    deprels = [["root", "dep", "det", "obj", "punct"], ["nsubj", "root"] + ["dep"] * 5]
    out = tmp_path / "pred.conllu"
    write_conllu(sentences, out, heads=heads, deprels=deprels)

    for old, new in zip(MWT.read_text().split("\n"), out.read_text().split("\n"), strict=True):
        old_columns, new_columns = old.split("\t"), new.split("\t")
        if old_columns[0].isdigit():
            assert new_columns[:6] + new_columns[8:] == old_columns[:6] + old_columns[8:]
        else:
            assert new == old  # comments, blank lines, 2-3 and 5.1
    predicted = read_conllu(out)
    assert [s.heads for s in predicted] == heads
    assert [s.deprels for s in predicted] == deprels
    assert sentences[0].heads == [0, 4, 4, 1, 1]  # the input is left alone


def test_write_checks_prediction_lengths():
    with pytest.raises(ValueError, match="2 head predictions for 5 words"):
        write_conllu(read_conllu(MWT)[:1], io.StringIO(), heads=[[0, 1]])


@pytest.mark.parametrize("lines, line, message", [
    (with_line(1, "2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_"), 3, "10 tab-separated columns"),
    (with_line(1, "2\tdog\tdog\tNOUN\tNN\t_\tx\tnsubj\t_\t_"), 3, "HEAD 'x' is not an integer"),
    (with_line(1, "2\tdog\tdog\tNOUN\tNN\t_\t4\tnsubj\t_\t_"), 3, r"HEAD 4 outside 0\.\.3"),
    (with_line(1, "3\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_"), 3, "word ID 3 where 2 was expected"),
    (with_line(1, "2\tdog\tdog\tNOUN\tNN\t_\t_\tnsubj\t_\t_"), 3, "missing HEAD"),
    (with_line(0, "1\tThe\tthe\tDET\tDT\t_\t0\tdet\t_\t_"), 1, "2 words attached to the root"),
    (with_line(2, "3\tbarks\tbark\tVERB\tVBZ\t_\t1\troot\t_\t_"), 1, "cycle"),
])
def test_malformed_input_names_file_and_line(tmp_path, lines, line, message):
    path = write(tmp_path / "bad.conllu", WORDS, lines)  # the broken sentence starts on line 6
    with pytest.raises(ConlluError, match=message) as error:
        read_conllu(path)
    assert str(error.value).startswith(f"{path}:{5 + line}:")


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.conllu"
    path.write_text("\n")
    with pytest.raises(ConlluError, match=f"{path}:1: empty file"):
        read_conllu(path)


def test_without_trees_head_and_deprel_may_be_missing(tmp_path):
    cycle = with_line(2, "3\tbarks\tbark\tVERB\tVBZ\t_\t1\troot\t_\t_")
    no_tree = [line.replace("\t2\tdet\t", "\t_\t_\t") for line in WORDS]
    sentences = read_conllu(write(tmp_path / "x.conllu", cycle, no_tree), trees=False)
    assert [s.heads for s in sentences] == [None, None]
    assert [s.deprels for s in sentences] == [None, None]


def test_partial_trees_read_with_partial_and_collate_to_ignored_heads(tmp_path):
    """HEAD ``_`` is an unknown arc with ``partial`` (its DEPREL ``_`` an unknown label,
    -100 in the batch); without it the file is an error naming file and line."""
    unknown = [WORDS[0], WORDS[1].replace("\t3\tnsubj\t", "\t_\t_\t"), WORDS[2].replace("\troot\t", "\t_\t")]
    path = write(tmp_path / "partial.conllu", WORDS, unknown)
    with pytest.raises(ConlluError, match=f"{path}:8: missing HEAD"):
        read_conllu(path)
    sentences = read_conllu(path, partial=True)
    assert [s.heads for s in sentences] == [[2, 3, 0], [2, None, 0]]
    labels = build_label_vocab(sentences)
    assert "_" not in labels
    batch = collate(sentences, build_upos_vocab(), labels)
    assert batch.heads[1].tolist() == [0, 2, -100, 0]
    assert batch.labels[1].tolist() == [-100, labels.index("det"), -100, -100]
    # the given arcs must agree with some tree
    cycle = [WORDS[0], WORDS[1].replace("\t3\tnsubj", "\t1\tnsubj"), WORDS[2].replace("\t0\troot", "\t_\troot")]
    with pytest.raises(ConlluError, match=f"{tmp_path / 'cycle.conllu'}:1: invalid tree: cycle"):
        read_conllu(write(tmp_path / "cycle.conllu", cycle), partial=True)


def test_skip_invalid_trees_logs_the_count(tmp_path, caplog):
    cycle = with_line(2, "3\tbarks\tbark\tVERB\tVBZ\t_\t1\troot\t_\t_")
    path = write(tmp_path / "x.conllu", WORDS, cycle, WORDS)
    with caplog.at_level(logging.WARNING):
        sentences = read_conllu(path, on_invalid="skip")
    assert [s.source for s in sentences] == [f"{path}:1", f"{path}:11"]
    assert "skipped 1 sentences with invalid trees" in caplog.text


def test_gzip_files_read_like_plain_ones(tmp_path):
    packed = tmp_path / "x.conllu.gz"
    packed.write_bytes(gzip.compress(MWT.read_bytes()))
    assert [s.words for s in read_conllu(packed)] == [s.words for s in read_conllu(MWT)]
    assert read_conllu(packed)[1].source == f"{packed}:13"
    text = tmp_path / "x.txt.gz"
    text.write_bytes(gzip.compress(b"a b\nc\n"))
    assert [s.words for s in read_sentences(text)] == [["a", "b"], ["c"]]


@pytest.mark.parametrize("name, content, message", [
    ("latin1.conllu", write_lines(WORDS).replace("dog", "d\xf6g").encode("latin-1"),
     r":3: not UTF-8 text \(byte 0xf6 at byte 4 of the line\)"),
    ("latin1.txt", "ok\nna\xefve\n".encode("latin-1"), r":2: not UTF-8 text \(byte 0xef at byte 3 of the line\)"),
    ("packed.conllu", gzip.compress(write_lines(WORDS).encode(), mtime=0), r":1: binary file \(gzip-compressed\): name it \*\.gz"),
    ("image.conllu", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", r":1: binary file \(NUL bytes\)"),
    ("plain.conllu.gz", write_lines(WORDS).encode(), r":1: unreadable gzip data"),
    ("cut.conllu.gz", gzip.compress(write_lines(WORDS).encode(), mtime=0)[:-12], r"unreadable gzip data"),
    ("empty_form.conllu", write_lines(with_line(1, "2\t\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_")).encode(), ":3: empty FORM"),
])
def test_unreadable_bytes_name_the_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConlluError, match=message) as error:
        read_sentences(path)
    assert str(error.value).startswith(f"{path}:")


def test_read_text(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text("The dog barks .\n  Cats\tsleep \n")
    first, second = read_text(path)
    assert (first.words, second.words) == (["The", "dog", "barks", "."], ["Cats", "sleep"])
    assert first.upos == ["_"] * 4 and first.heads is None and first.deprels is None
    assert not has_upos([first]) and has_upos(read_conllu(MWT))
    assert second.source == f"{path}:2"
    out = tmp_path / "parsed.conllu"
    write_conllu([second], out, heads=[[2, 0]], deprels=[["nsubj", "root"]])
    assert out.read_text() == ("# text = Cats sleep\n"
                               "1\tCats\t_\t_\t_\t_\t2\tnsubj\t_\t_\n"
                               "2\tsleep\t_\t_\t_\t_\t0\troot\t_\t_\n\n")


def test_blank_lines_of_text_separate_paragraphs(tmp_path):
    """Blank lines (spaces and tabs too, CRLF, several in a row) are no sentences: the
    sentence after them starts a paragraph (``# newpar`` in the output); lines keep their numbers."""
    path = tmp_path / "raw.txt"
    path.write_bytes(b"\na b\n\nc d e\r\n \t \n\n\nf\ng\n\n")
    sentences = read_text(path)
    assert [s.words for s in sentences] == [["a", "b"], ["c", "d", "e"], ["f"], ["g"]]
    assert [s.line for s in sentences] == [2, 4, 8, 9]
    assert ["newpar" in s.tokenlist.metadata for s in sentences] == [False, True, True, False]
    out = tmp_path / "parsed.conllu"
    write_conllu(sentences, out)
    assert out.read_text().count("# newpar\n# text = ") == 2
    assert [s.words for s in read_conllu(out, trees=False)] == [s.words for s in sentences]
    with pytest.raises(ConlluError, match="empty file"):
        (tmp_path / "blank.txt").write_text("\n \n\n")
        read_text(tmp_path / "blank.txt")


def test_vocab():
    vocab = Vocab.from_iterable(["b", "a", "b", "<pad>"], specials=["<pad>", "<unk>"], unk="<unk>")
    assert vocab.itos == ["<pad>", "<unk>", "a", "b"]
    assert (vocab.index("b"), vocab.index("zzz"), len(vocab)) == (3, 1, 4)
    assert Vocab.from_iterable(["x"]).index("y") == -100
    assert Vocab.from_state_dict(vocab.state_dict()) == vocab
    assert pickle.loads(pickle.dumps(vocab)).index("a") == 2


def test_upos_and_label_vocab():
    upos = build_upos_vocab()
    assert len(upos) == 19 and upos.index("<pad>") == 0 and upos.index("_") == upos.index("<unk>")
    labels = build_label_vocab(read_conllu(MWT))
    assert "obl:arg" in labels and "obl" not in labels and "<unk>" not in labels


def test_collate_follows_the_tensor_conventions(tmp_path):
    sentences = read_conllu(MWT)
    upos, labels = build_upos_vocab(), build_label_vocab(sentences[:1])
    batch = collate(sentences, upos, labels, index=[7, 3])
    assert batch.words == [s.words for s in sentences]
    assert batch.lengths.tolist() == [5, 7]
    assert batch.index.tolist() == [7, 3]
    assert batch.upos.shape == batch.heads.shape == batch.labels.shape == (2, 8)
    assert batch.heads[0].tolist() == [0, 0, 4, 4, 1, 1, 0, 0]
    assert batch.upos[0, [0, 6, 7]].tolist() == [0, 0, 0]
    assert batch.upos[1, 1] == upos.index("PROPN")
    first_labels = [labels.index(d) for d in sentences[0].deprels]
    assert batch.labels[0].tolist() == [-100, *first_labels, -100, -100]
    # "nsubj", "conj" and "orphan" are not in the first sentence: unseen -> -100
    assert batch.labels[1, [1, 5, 6]].tolist() == [-100] * 3
    assert batch.labels[1, 2] == labels.index("root")

    text = tmp_path / "raw.txt"
    text.write_text("Cats sleep\n")
    unlabeled = collate(read_text(text), upos, labels)
    assert unlabeled.heads is None and unlabeled.labels is None
    assert unlabeled.upos[0].tolist() == [0, upos.index("<unk>"), upos.index("<unk>")]


def test_batch_moves_to_device_as_a_dataclass():
    batch = move_data_to_device(collate(read_conllu(MWT), build_upos_vocab(), None), "cpu")
    assert isinstance(batch, Batch) and batch.labels is None and batch.heads.shape == (2, 8)


@pytest.fixture
def treebank(tmp_path):
    """A UD-style root with treebank UD_Tiny: the fixture as train, WORDS as dev and test."""
    directory = tmp_path / "ud" / "UD_Tiny"
    directory.mkdir(parents=True)
    shutil.copy(MWT, directory / "xx_tiny-ud-train.conllu")
    write(directory / "xx_tiny-ud-dev.conllu", WORDS)
    write(directory / "xx_tiny-ud-test.conllu", WORDS, WORDS)
    return tmp_path / "ud"


def test_datamodule_labeled_only(treebank):
    data = DependencyDataModule("UD_Tiny", root=str(treebank), batch_tokens=100)
    data.setup("fit")
    assert len(data.train_sentences) == 2 and not data.has_unlabeled
    assert data.label_vocab == build_label_vocab(data.train_sentences)
    batches = list(data.train_dataloader())
    assert all(isinstance(b, Batch) for b in batches)
    assert sorted(i for b in batches for i in b.index.tolist()) == [0, 1]
    dev = next(iter(data.val_dataloader()))
    expected = [data.label_vocab.index(d) for d in ("det", "nsubj", "root")]
    assert dev.labels[0, 1:].tolist() == expected

    data.setup("test")
    assert len(data.test_sentences) == 2


def test_several_treebanks_read_as_one(treebank):
    """A list of treebanks (a multilingual parser) reads each split's files in order; the
    labeled sentences may end inside any file, the rest of it and the files after it stream."""
    second = treebank / "UD_Other"
    shutil.copytree(treebank / "UD_Tiny", second)
    data = DependencyDataModule(["UD_Tiny", "UD_Other"], root=str(treebank))
    data.setup("fit")
    data.setup("test")
    assert len(data.train_sentences) == 4 and len(data.dev_sentences) == 2 and len(data.test_sentences) == 4
    assert [s.path for s in data.train_sentences[1:3]] == [str(treebank / "UD_Tiny" / "xx_tiny-ud-train.conllu"),
                                                           str(second / "xx_tiny-ud-train.conllu")]
    with pytest.raises(ValueError, match="several files"):
        data.path("train")
    for size, sources in ((1, [("UD_Tiny", 13), ("UD_Other", None)]), (3, [("UD_Other", 13)])):
        data = DependencyDataModule(["UD_Tiny", "UD_Other"], root=str(treebank), labeled_size=size)
        data.setup("fit")
        assert len(data.train_sentences) == size
        expected = [Source(str(treebank / name / "xx_tiny-ud-train.conllu"), *([line] if line else []))
                    for name, line in sources]
        assert data.unlabeled_sources == expected
    files = DependencyDataModule(None, train=[str(p) for p in data.paths("train")], dev=str(data.paths("dev")[0]))
    files.setup("fit")
    assert len(files.train_sentences) == 4


def test_relatives_are_labeled_beside_the_target_at_their_share(treebank):
    """A relative (here a test-only release) gives all its trees as labeled ones, whatever
    labeled_size keeps of the target's; only the target validates; an epoch draws the
    relative at its share."""
    other = treebank / "UD_Other"
    other.mkdir()
    write(other / "xx_other-ud-test.conllu", WORDS, WORDS, WORDS)
    data = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=1, relatives={"UD_Other": 0.75})
    data.setup("fit")
    assert [s.treebank for s in data.train_sentences] == ["UD_Tiny"] + ["UD_Other"] * 3
    assert data.unlabeled_sources == [Source(str(treebank / "UD_Tiny" / "xx_tiny-ud-train.conllu"), 13)]
    assert len(data.dev_sentences) == 1 and data.treebanks("train") == ["UD_Tiny", "UD_Other"]
    assert data.treebanks("dev") == ["UD_Tiny"]
    assert data._sampler(data.train_sentences, shuffle=True).shares == [0.25, 0.75]
    write(other / "xx_other-ud-train.conllu", WORDS, WORDS)
    (other / "xx_other-ud-dev.conllu").write_text("not CoNLL-U\n")  # past the cap: never read
    capped = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=1, relatives={"UD_Other": 0.75},
                                  max_treebank_sentences=2)
    capped.setup("fit")
    assert [s.source.split(":")[0] for s in capped.train_sentences[1:]] == [str(other / "xx_other-ud-train.conllu")] * 2
    for relatives, message in (({"UD_Tiny": 0.5}, "a relative of itself"), ({"UD_None": 0.5}, "no treebank folder"),
                               ({"UD_Other": 1.0}, "group shares 1 must be positive")):
        with pytest.raises(ConfigurationError, match=message):
            DependencyDataModule("UD_Tiny", root=str(treebank), relatives=relatives).setup("fit")


def test_relatives_alone_are_the_trees_of_a_language_with_none(treebank):
    """With no tree of the target (labeled_size 0), the relatives are every labeled tree, their
    shares fill the epoch, and the target's whole file is raw text."""
    for name in ("UD_Other", "UD_Third"):
        (treebank / name).mkdir()
        write(treebank / name / "xx_other-ud-test.conllu", WORDS, WORDS)
    data = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=0,
                                relatives={"UD_Other": 0.25, "UD_Third": 0.75})
    data.setup("fit")
    assert [s.treebank for s in data.train_sentences] == ["UD_Other"] * 2 + ["UD_Third"] * 2
    assert data.unlabeled_sources == [Source(str(treebank / "UD_Tiny" / "xx_tiny-ud-train.conllu"))]
    assert data._sampler(data.train_sentences, shuffle=True).shares == [0.25, 0.75]
    with pytest.raises(ConfigurationError, match="group shares 0.25, 0.5 must .* sum to 1"):
        DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=0, relatives={"UD_Other": 0.25, "UD_Third": 0.5})


def test_datamodule_semi_supervised(treebank, tmp_path):
    text = tmp_path / "extra.txt"
    text.write_text("more words here\n")
    data = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=1, unlabeled=str(text),
                                batch_tokens=6, max_batch_sentences=1)
    data.setup("fit")
    assert [s.words[0] for s in data.train_sentences] == ["Vamos"]
    train = treebank / "UD_Tiny" / "xx_tiny-ud-train.conllu"
    assert data.unlabeled_sources == [Source(str(train), 13), Source(str(text))]
    assert data.has_unlabeled and not data.unlabeled_has_upos  # the text file has no tags
    assert data.label_vocab == build_label_vocab(data.train_sentences)

    loader = data.train_dataloader()
    assert isinstance(loader, CombinedLoader)
    iter(loader)
    assert len(loader) == 1  # the labeled side sets the length; the stream runs on
    seen = []
    for _ in range(3):
        for step, _, _ in loader:
            assert step["labeled"].heads is not None
            assert step["unlabeled"].heads is None and step["unlabeled"].labels is None
            seen.append(step["unlabeled"].words[0][0])
    assert sorted(seen[:2]) == ["Sue", "more"]  # one pass over both sources, across two epochs
    assert seen[2] in ("Sue", "more")  # and on into the next pass

    data = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=1)
    data.setup("fit")
    assert data.unlabeled_has_upos
    tagged = next(iter(data.train_dataloader()))[0]["unlabeled"]
    assert (tagged.upos[:, 1:] > data.upos_vocab.unk_index).any()
    raw = DependencyDataModule("UD_Tiny", root=str(treebank), labeled_size=1, unlabeled_tags="drop")
    raw.setup("fit")
    assert not raw.unlabeled_has_upos  # the rest of the treebank as raw text: no gold tags either
    step = next(iter(raw.train_dataloader()))[0]
    assert step["unlabeled"].words == tagged.words
    lengths = step["unlabeled"].lengths
    assert step["unlabeled"].upos[:, 1:].eq(data.upos_vocab.unk_index).logical_or(step["unlabeled"].upos[:, 1:].eq(0)).all()
    assert step["unlabeled"].upos[:, 1:].eq(data.upos_vocab.unk_index).sum() == lengths.sum()
    assert (step["labeled"].upos[:, 1:] > data.upos_vocab.unk_index).any()  # the labeled sentences keep theirs
    with pytest.raises(ValueError, match="unlabeled_tags"):
        DependencyDataModule("UD_Tiny", root=str(treebank), unlabeled_tags="none")
    data = DependencyDataModule("UD_Tiny", root=str(treebank))
    data.setup("fit")
    assert not data.has_unlabeled and not data.unlabeled_has_upos


def test_datamodule_unlabeled_files_globs_and_lists(treebank, tmp_path):
    for name in ("a.txt", "b.txt.gz", "c.conllu"):
        (tmp_path / name).write_bytes(b"")
    data = DependencyDataModule("UD_Tiny", root=str(treebank))
    assert expand_files(str(tmp_path / "*.txt*")) == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt.gz")]
    assert expand_files([str(tmp_path / "c.conllu"), str(tmp_path / "a.*")]) == [str(tmp_path / n) for n in ("c.conllu", "a.txt")]
    with pytest.raises(FileNotFoundError, match="nothing matches .*/none\\*"):
        expand_files(str(tmp_path / "none*"))
    with pytest.raises(FileNotFoundError, match="unlabeled file .*missing.txt not found"):
        expand_files([str(tmp_path / "a.txt"), str(tmp_path / "missing.txt")])
    data = DependencyDataModule("UD_Tiny", root=str(treebank), unlabeled=str(tmp_path / "a.txt"))
    (tmp_path / "a.txt").write_bytes(b"\n\n")
    with pytest.raises(ConlluError, match="a.txt:1: no sentence that parses"):
        data.setup("fit")


def test_datamodule_state_dict_and_predict(treebank, tmp_path):
    trained = DependencyDataModule("UD_Tiny", root=str(treebank))
    trained.setup("fit")
    text = tmp_path / "in.txt"
    text.write_text("a b c\nd\n")
    restored = DependencyDataModule("UD_Tiny", root=str(treebank), predict=str(text))
    restored.load_state_dict(trained.state_dict())
    assert restored.label_vocab == trained.label_vocab
    restored.setup("predict")
    batch = next(iter(restored.predict_dataloader()))
    assert sorted(batch.index.tolist()) == [0, 1] and batch.heads is None


def test_datamodule_missing_files_suggest_fetch(tmp_path):
    data = DependencyDataModule("UD_Nowhere", root=str(tmp_path))
    with pytest.raises(FileNotFoundError) as error:
        data.setup("fit")
    message = str(error.value)
    assert str(tmp_path / "UD_Nowhere" / "*-ud-train.conllu") in message
    assert "python -m parser.fetch UD_Nowhere" in message


def test_fetch_fails_fast_offline(tmp_path, capsys):
    with mock.patch("parser.fetch.urlopen", side_effect=URLError("no network")) as urlopen:
        with pytest.raises(fetch.FetchError, match="could not reach .*no network.*manually into"):
            fetch.fetch("UD_English-EWT", root=tmp_path)
        assert urlopen.call_args.kwargs["timeout"] <= 10
        with pytest.raises(SystemExit) as exit_:
            fetch.main(["UD_English-EWT", "--root", str(tmp_path)])
    assert str(tmp_path / "UD_English-EWT") in str(exit_.value.code)
    assert not (tmp_path / "UD_English-EWT").exists()


class Recorder(LightningModule):
    """Records the sentences of every training step (labeled, unlabeled indices)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append((batch["labeled"].index.tolist(), batch["unlabeled"].index.tolist()))
        return (self.weight - 1) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("num_workers, saved_at", [(0, 6), (0, 4), (2, 6), (2, 7)])
def test_resuming_a_fit_continues_with_the_next_batches(ud_dir, tmp_path, num_workers, saved_at):
    """A checkpoint mid-epoch (or at an epoch's end) resumes the labeled batches and the
    unlabeled stream where they were, also with DataLoader workers."""
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:60]
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")

    def fit(steps, ckpt_path=None, callbacks=()):
        data = DependencyDataModule(None, train=str(small), dev=str(small), labeled_size=16, batch_tokens=200,
                                    shuffle_buffer=6, num_workers=num_workers, seed=7)
        model = Recorder()
        trainer = Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=bool(callbacks), callbacks=list(callbacks))
        trainer.fit(model, data, ckpt_path=ckpt_path)
        assert not multiprocessing.active_children(), "the workers of a finished fit stop with it"
        return model.seen, trainer

    expected, trainer = fit(10)
    assert trainer.num_training_batches == 3  # 10 steps cross three epochs
    saving = ModelCheckpoint(dirpath=tmp_path, filename="at", every_n_train_steps=saved_at)
    head, _ = fit(saved_at, callbacks=[saving])
    tail, _ = fit(10, ckpt_path=tmp_path / "at.ckpt")
    assert head + tail == expected


def test_label_scores_are_reindexed_by_name():
    """Scores over one label vocabulary in another's order: missing labels get -inf,
    labels only the source has are left out; the same vocabulary is a no-op."""
    scores = torch.tensor([[1.0, 2.0, 3.0]])
    moved = reindex_labels(scores, ["nsubj", "obj", "list"], ["obj", "amod", "nsubj"])
    assert moved.tolist() == [[2.0, float("-inf"), 1.0]]
    assert reindex_labels(scores, ["a", "b", "c"], ["a", "b", "c"]) is scores
    assert reindex_labels(scores, ["a", "b", "c"], ["x"]) is None
