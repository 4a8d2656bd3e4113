"""The teacher: frozen networks whose scores the terms that need one learn from."""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

from objectives.conventions import ConfigurationError
from objectives.objective import Scores

from parser.data.vocab import reindex_labels
from parser.network import Network

TREE_SETS = {True: "multi-root", False: "single-root"}


@dataclasses.dataclass(frozen=True)
class TeacherOptions:
    """Which teacher the terms that need one learn from (``--model.teacher``).

    Attributes:
        checkpoints: a saved parser of this framework (``.ckpt`` or ``Parser.save`` directory)
            or a list of them (an ensemble: the mean of their scores); frozen and not saved in
            the student's checkpoints.
        ema: instead, the moving average of the student's own weights with this decay
            (self-distillation that needs no other parser).
        cache_mib: keep a file teacher's scores of up to this many MiB of sentences in CPU
            memory, so that a sentence seen again costs it no forward pass (:class:`Teacher`); 0: none.
    """

    checkpoints: str | list[str] | None = None
    ema: float | None = None
    cache_mib: float = 1024

    def __post_init__(self) -> None:
        if self.checkpoints and self.ema is not None:
            raise ConfigurationError("give --model.teacher (a file) or --model.teacher.ema (a moving average), not both")

    @classmethod
    def of(cls, teacher: str | list[str] | dict | TeacherOptions | None, ema: float | None = None,
           cache_mib: float | None = None) -> TeacherOptions:
        """``--model.teacher``'s value (a checkpoint, a list of them, or the options, as an object
        or a dict), with the settings that were its neighbours before it was one value
        (``--model.teacher_ema``, ``--model.teacher_cache_mib``: old commands, old checkpoints'
        hyperparameters) in their place when given."""
        options = teacher if isinstance(teacher, cls) else cls(**teacher) if isinstance(teacher, dict) else cls(teacher)
        given = {"ema": ema, "cache_mib": cache_mib}
        return dataclasses.replace(options, **{name: value for name, value in given.items() if value is not None})

    @property
    def given(self) -> bool:
        return bool(self.checkpoints) or self.ema is not None

    def build(self, student: Network, multiroot: bool, load: Callable[[str], tuple[Network, bool]]) -> Teacher:
        """The teacher of ``student`` (a parser of ``multiroot`` trees); ``load`` reads a saved
        parser's network and whether it parses multi-root trees."""
        if self.ema is not None:
            return Teacher.moving_average(student, self.ema)
        paths = [self.checkpoints] if isinstance(self.checkpoints, str) else self.checkpoints
        return Teacher.frozen([(path, *load(path)) for path in paths], multiroot, self.cache_mib)


class Teacher:
    """Networks outside the student's parameters, ``state_dict`` and optimiser: parsers from
    checkpoints (:meth:`frozen`), or the exponential moving average of the student's own
    weights (:meth:`moving_average`: ``t = decay * t + (1 - decay) * s`` after every optimiser
    step, from the student as it begins to train). Several frozen parsers teach as their
    product of experts: the mean of their scores, so ``p(d) ~ prod_i p_i(d)^(1/n)``, as sure as
    each where they agree and less sure where they do not. The moving average's state goes
    into the student's checkpoints, so that a resumed run goes on with it.

    A frozen teacher with ``cache_mib`` > 0 keeps its scores of each sentence in CPU memory
    (least recently used out first, at most that many MiB), so that a sentence seen again (the
    next epoch of a small unlabeled corpus) costs it no forward pass. On CPU a network's scores
    of a sentence do not depend on the batch it comes in, so a run with the cache trains as
    one without it, and a resumed run, whose cache starts empty, as the run it resumes."""

    def __init__(self, networks: Sequence[Network], decay: float | None = None, cache_mib: float = 0):
        if not networks or (decay is not None and len(networks) != 1):
            raise ValueError("a teacher is one or more frozen networks, or one moving average")
        self.networks = [network.requires_grad_(False) for network in networks]
        self.decay = decay
        self.cache = SentenceScores(cache_mib) if cache_mib > 0 and decay is None else None

    @classmethod
    def frozen(cls, parsers: Sequence[tuple[str, Network, bool]], student_multiroot: bool, cache_mib: float = 0) -> Teacher:
        """The networks of the parsers saved at these paths (``(path, network, multiroot)``),
        each of which must parse the student's tree set."""
        for path, _, multiroot in parsers:
            if multiroot != student_multiroot:
                raise ConfigurationError(
                    f"the teacher {path} parses {TREE_SETS[multiroot]} trees, this parser {TREE_SETS[student_multiroot]} "
                    f"ones: give --model.decoding.multiroot {multiroot} or another teacher")
        return cls([network for _, network, _ in parsers], cache_mib=cache_mib)

    @classmethod
    def moving_average(cls, student: Network, decay: float) -> Teacher:
        return cls([copy.deepcopy(student)], decay)

    def to(self, device: torch.device) -> Teacher:
        for network in self.networks:
            network.to(device)
        return self

    @torch.no_grad()
    def scores(self, words: list[list[str]], labels: Sequence[str], device: torch.device,
               treebanks: Sequence[str | None] | None = None) -> Scores:
        """The teachers' mean scores of ``words`` (arcs ``[B, N+1, N+1]``, labels ``[B, N+1, N+1, L]``),
        their labels in the student's vocabulary ``labels`` (by name: a teacher from another
        treebank gives no mass to labels it never saw); with a cache, zeros where a sentence is
        shorter than the batch's longest. ``treebanks``: each sentence's (treebank vectors)."""
        if self.cache is None:
            return self._mean_scores(words, labels, device, treebanks)
        known = {tuple(sentence): self.cache.get(sentence) for sentence in words}
        position = {tuple(sentence): i for i, sentence in enumerate(words)}
        missing = [sentence for sentence, scores in known.items() if scores is None]
        if missing:
            fresh = self._mean_scores([list(sentence) for sentence in missing], labels, device,
                                      None if treebanks is None else [treebanks[position[s]] for s in missing])
            arcs, label_scores = fresh.arcs.cpu(), fresh.labels.cpu()  # one copy from the device
            for i, sentence in enumerate(missing):
                n = len(sentence) + 1  # each its own storage, not a view of the batch
                known[sentence] = Scores(arcs[i, :n, :n].clone(), label_scores[i, :n, :n].clone())
                self.cache.put(sentence, known[sentence])
        sentences = [known[tuple(sentence)] for sentence in words]
        return Scores(_stack_padded([s.arcs for s in sentences]).to(device),
                      _stack_padded([s.labels for s in sentences]).to(device))

    def _mean_scores(self, words: list[list[str]], labels: Sequence[str], device: torch.device,
                     treebanks: Sequence[str | None] | None) -> Scores:
        arcs, label_scores = [], []
        for network in self.networks:
            scores = network.to(device).eval()(words, None, treebanks)
            arcs.append(scores.arcs)
            label_scores.append(reindex_labels(scores.labels, network.label_vocab.itos, labels))
        return Scores(torch.stack(arcs).mean(0), torch.stack(label_scores).mean(0))

    @torch.no_grad()
    def follow(self, student: Network) -> None:
        """One step of the moving average toward ``student`` (nothing for a frozen teacher)."""
        if self.decay is not None:
            self.networks[0].follow(student, self.decay)

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps: the moving average's weights (a frozen teacher is its file)."""
        return None if self.decay is None else self.networks[0].state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.networks[0].load_state_dict(state)


class SentenceScores:
    """A teacher's scores by sentence (its words), the least recently used dropped beyond
    ``mib`` MiB."""

    def __init__(self, mib: float):
        self.capacity = int(mib * 2**20)
        self.size = 0
        self._scores: OrderedDict[tuple[str, ...], Scores] = OrderedDict()

    def __len__(self) -> int:
        return len(self._scores)

    def get(self, words: Sequence[str]) -> Scores | None:
        scores = self._scores.get(tuple(words))
        if scores is not None:
            self._scores.move_to_end(tuple(words))
        return scores

    def put(self, words: Sequence[str], scores: Scores) -> None:
        """Keep a sentence's ``(N+1, N+1)`` arc and ``(N+1, N+1, L)`` label scores."""
        self._scores[tuple(words)] = scores
        self.size += _bytes(scores)
        while self.size > self.capacity and self._scores:
            self.size -= _bytes(self._scores.popitem(last=False)[1])


def _bytes(scores: Scores) -> int:
    return sum(t.numel() * t.element_size() for t in (scores.arcs, scores.labels))


def _stack_padded(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``(n_i+1, n_i+1, ...)`` tensors -> ``(B, N+1, N+1, ...)``, zeros beyond each one."""
    size = max(t.shape[0] for t in tensors)
    out = tensors[0].new_zeros(len(tensors), size, size, *tensors[0].shape[2:])
    for i, t in enumerate(tensors):
        out[i, : t.shape[0], : t.shape[1]] = t
    return out
