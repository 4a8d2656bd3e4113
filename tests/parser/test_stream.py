"""SentenceStream: lazy, sharded across processes and workers, reproducible, resumable,
lenient with malformed unlabeled lines."""

import gzip
import itertools
from types import SimpleNamespace

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import parser.data.sentences
import parser.data.stream
from parser.data.sentences import ConlluError
from parser.data.stream import SentenceStream, Source
from parser.data.vocab import build_upos_vocab

UPOS = build_upos_vocab()


def corpus(path, n, start=0):
    """n sentences of 1..12 words, sentence i's first word naming i."""
    path.write_text("".join(f"s{i} " + "w " * (i % 12) + "\n" for i in range(start, start + n)))
    return path


def stream(sources, **kwargs):
    kwargs = {"batch_tokens": 40, "max_sentences": 8, "shuffle_buffer": 20, **kwargs}
    return SentenceStream([Source(str(s)) for s in sources], UPOS, **kwargs)


def one_pass(data, monkeypatch=None, worker=None):
    """The batches of the stream's first pass (as worker ``(id, num_workers)`` when given)."""
    if worker is not None:
        info = SimpleNamespace(id=worker[0], num_workers=worker[1])
        monkeypatch.setattr(parser.data.stream, "get_worker_info", lambda: info)
    batches = []
    for batch in data:
        if data.state_dict()["pass"] > 0:
            break
        batches.append(batch)
    return batches


def indices(batches):
    return [k for batch in batches for k in batch.index.tolist()]


def test_shards_of_two_processes_by_two_workers_cover_a_pass_once(tmp_path, monkeypatch):
    first, second = corpus(tmp_path / "a.txt", 50), corpus(tmp_path / "b.txt.gz", 0)
    second.write_bytes(gzip.compress(corpus(tmp_path / "b.txt", 33, start=50).read_bytes()))
    seen = []
    for rank in range(2):
        for worker in range(2):
            data = stream([first, second], num_replicas=2, rank=rank)
            batches = one_pass(data, monkeypatch, (worker, 2))
            assert {k % 4 for k in indices(batches)} == {2 * rank + worker}
            for batch in batches:
                assert len(batch.lengths) <= 8 and len(batch.lengths) * int(batch.lengths.max()) <= 40
            seen += [w[0] for batch in batches for w in batch.words]
    assert sorted(seen) == sorted(f"s{i}" for i in range(83))


def test_real_workers_take_their_own_shards(tmp_path):
    path = corpus(tmp_path / "a.txt", 40)
    for rank in range(2):
        loader = StatefulDataLoader(stream([path], num_replicas=2, rank=rank), batch_size=None, num_workers=2)
        batches = list(itertools.islice(loader, 4))
        assert [{k % 4 for k in b.index.tolist()} for b in batches] == [{2 * rank}, {2 * rank + 1}] * 2


def test_passes_are_reproducible_from_the_seed(tmp_path):
    path = corpus(tmp_path / "a.txt", 60)
    first = [b.index.tolist() for b in itertools.islice(stream([path], seed=3), 12)]
    assert [b.index.tolist() for b in itertools.islice(stream([path], seed=3), 12)] == first
    assert [b.index.tolist() for b in itertools.islice(stream([path], seed=4), 12)] != first
    passes = [indices(one_pass(stream([path], seed=3)))]
    data = stream([path], seed=3)
    data.load_state_dict({"pass": 1, "start": 0, "batches": 0})
    passes.append(indices(one_pass_from(data, 1)))
    assert sorted(passes[0]) == sorted(passes[1]) == list(range(60)) and passes[0] != passes[1]


def one_pass_from(data, number):
    batches = []
    for batch in data:
        if data.state_dict()["pass"] > number:
            break
        batches.append(batch)
    return batches


def test_state_dict_resumes_with_the_next_batch(tmp_path):
    path = corpus(tmp_path / "a.txt", 70)
    expected = [b.index.tolist() for b in itertools.islice(stream([path]), 30)]  # more than one pass
    for cut in (3, 11, 20):
        data = stream([path])
        head = [b.index.tolist() for b in itertools.islice(data, cut)]
        resumed = stream([path])
        resumed.load_state_dict(data.state_dict())
        assert head + [b.index.tolist() for b in itertools.islice(resumed, 30 - cut)] == expected


def test_loader_with_workers_resumes_with_the_next_batch(tmp_path):
    path = corpus(tmp_path / "a.txt", 70)
    def loader():
        return StatefulDataLoader(stream([path]), batch_size=None, num_workers=2)
    expected = [b.index.tolist() for b in itertools.islice(loader(), 16)]
    first = loader()
    iterator = iter(first)
    head = [next(iterator).index.tolist() for _ in range(7)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [b.index.tolist() for b in itertools.islice(resumed, 9)] == expected


def test_malformed_lines_are_skipped_logged_and_counted(tmp_path, caplog):
    """Malformed sentences are skipped (and counted); blank lines of text are paragraph
    breaks, read as ``parser.data.sentences`` reads them, not malformed."""
    text = tmp_path / "a.txt"
    text.write_bytes(b"good one\n\nna\xefve line\n \nalso good\n")
    block = "1\tA\ta\tDET\t_\t_\t0\troot\t_\t_\n"
    conllu = tmp_path / "b.conllu"
    conllu.write_text(block + "\n" + "1\tB\tb\n\n" + block.replace("\tA\t", "\t\t") + "\n" + block + "\n")
    data = stream([text, conllu], shuffle_buffer=100)
    batches = one_pass(data)
    assert sorted(w[0] for b in batches for w in b.words) == ["A", "A", "also", "good"]
    assert sum(b.skipped for b in batches) == 3
    for where in (f"{text}:3: not UTF-8 text", f"{conllu}:3: expected 10", f"{conllu}:5: empty FORM"):
        assert where in caplog.text
    assert f"{text}:2" not in caplog.text and f"{text}:4" not in caplog.text
    with pytest.raises(ConlluError, match=f"{text}:3: not UTF-8"):
        next(iter(stream([text], on_bad="error")))
    with pytest.raises(ConlluError, match=f"{conllu}:3: expected 10"):
        next(iter(stream([conllu], on_bad="error")))


def test_a_shard_without_sentences_is_an_error_not_a_hang(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("only one\n")
    with pytest.raises(ConlluError, match="no usable sentence for shard 1 of 2"):
        next(iter(stream([path], num_replicas=2, rank=1)))


def test_reading_is_lazy(tmp_path, monkeypatch):
    path = corpus(tmp_path / "big.txt", 20_000)
    read = []
    monkeypatch.setattr(parser.data.sentences, "open_bytes", lambda name: CountingFile(name, read))
    next(iter(stream([path], shuffle_buffer=100)))
    assert 0 < sum(read) < path.stat().st_size / 10


class CountingFile:
    """A binary file that records how many bytes were read from it."""

    def __init__(self, name, read):
        self.file, self.read = open(name, "rb"), read

    def peek(self, n):
        return self.file.peek(n)

    def __iter__(self):
        for line in self.file:
            self.read.append(len(line))
            yield line

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.file.close()
