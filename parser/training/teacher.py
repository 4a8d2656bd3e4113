"""The teacher: frozen networks whose scores the terms that need one learn from."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from objectives.conventions import ConfigurationError
from objectives.objective import Scores

from parser.data.vocab import reindex_labels
from parser.network import Network

TREE_SETS = {True: "multi-root", False: "single-root"}


class Teacher:
    """Networks outside the student's parameters, ``state_dict`` and optimiser: parsers from
    checkpoints (:meth:`frozen`), or the exponential moving average of the student's own
    weights (:meth:`moving_average`: ``t = decay * t + (1 - decay) * s`` after every optimiser
    step, from the student as it begins to train). Several frozen parsers teach as their
    product of experts: the mean of their scores, so ``p(d) ~ prod_i p_i(d)^(1/n)``, as sure as
    each where they agree and less sure where they do not. The moving average's state goes
    into the student's checkpoints, so that a resumed run goes on with it."""

    def __init__(self, networks: Sequence[Network], decay: float | None = None):
        if not networks or (decay is not None and len(networks) != 1):
            raise ValueError("a teacher is one or more frozen networks, or one moving average")
        self.networks = [network.requires_grad_(False) for network in networks]
        self.decay = decay

    @classmethod
    def frozen(cls, parsers: Sequence[tuple[str, Network, bool]], student_multiroot: bool) -> Teacher:
        """The networks of the parsers saved at these paths (``(path, network, multiroot)``),
        each of which must parse the student's tree set."""
        for path, _, multiroot in parsers:
            if multiroot != student_multiroot:
                raise ConfigurationError(
                    f"the teacher {path} parses {TREE_SETS[multiroot]} trees, this parser {TREE_SETS[student_multiroot]} "
                    f"ones: give --model.decoding.multiroot {multiroot} or another teacher")
        return cls([network for _, network, _ in parsers])

    @classmethod
    def moving_average(cls, student: Network, decay: float) -> Teacher:
        return cls([copy.deepcopy(student)], decay)

    def to(self, device: torch.device) -> Teacher:
        for network in self.networks:
            network.to(device)
        return self

    @torch.no_grad()
    def scores(self, words: list[list[str]], labels: Sequence[str], device: torch.device) -> Scores:
        """The teachers' mean scores of ``words`` (arcs ``[B, N, N]``, labels ``[B, N, N, L]``),
        their labels in the student's vocabulary ``labels`` (by name: a teacher from another
        treebank gives no mass to labels it never saw)."""
        arcs, label_scores = [], []
        for network in self.networks:
            scores = network.to(device).eval()(words)
            arcs.append(scores.arcs)
            label_scores.append(reindex_labels(scores.labels, network.label_vocab.itos, labels))
        return Scores(torch.stack(arcs).mean(0), torch.stack(label_scores).mean(0))

    @torch.no_grad()
    def follow(self, student: Network) -> None:
        """One step of the moving average toward ``student`` (nothing for a frozen teacher)."""
        if self.decay is not None:
            torch._foreach_lerp_(self.networks[0].parts(), [p.detach() for p in student.parts()], 1 - self.decay)

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps: the moving average's weights (a frozen teacher is its file)."""
        return None if self.decay is None else self.networks[0].state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.networks[0].load_state_dict(state)
