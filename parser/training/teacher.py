"""The teacher: a frozen network whose scores the terms that need one learn from."""

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
    """A network outside the student's parameters, ``state_dict`` and optimiser: a parser
    from a checkpoint (:meth:`frozen`), or the exponential moving average of the student's
    own weights (:meth:`moving_average`: ``t = decay * t + (1 - decay) * s`` after every
    optimiser step, from the student as it begins to train). Its state (the average) goes
    into the student's checkpoints, so that a resumed run goes on with it."""

    def __init__(self, network: Network, decay: float | None = None):
        self.network = network.requires_grad_(False)
        self.decay = decay

    @classmethod
    def frozen(cls, network: Network, path: str, multiroot: bool, student_multiroot: bool) -> Teacher:
        """The network of the parser saved at ``path``, which must parse the student's tree set."""
        if multiroot != student_multiroot:
            raise ConfigurationError(
                f"the teacher {path} parses {TREE_SETS[multiroot]} trees, this parser {TREE_SETS[student_multiroot]} "
                f"ones: give --model.decoding.multiroot {multiroot} or another teacher")
        return cls(network)

    @classmethod
    def moving_average(cls, student: Network, decay: float) -> Teacher:
        return cls(copy.deepcopy(student), decay)

    @torch.no_grad()
    def scores(self, words: list[list[str]], labels: Sequence[str], device: torch.device) -> Scores:
        """The teacher's scores of ``words``, its labels in the student's vocabulary
        ``labels`` (by name: a teacher from another treebank gives no mass to labels it never saw)."""
        network = self.network.to(device).eval()
        scores = network(words)
        return Scores(scores.arcs, reindex_labels(scores.labels, network.label_vocab.itos, labels))

    @torch.no_grad()
    def follow(self, student: Network) -> None:
        """One step of the moving average toward ``student`` (nothing for a frozen teacher)."""
        if self.decay is not None:
            torch._foreach_lerp_(self.network.parts(), [p.detach() for p in student.parts()], 1 - self.decay)

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps: the moving average's weights (a frozen teacher is its file)."""
        return None if self.decay is None else self.network.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.network.load_state_dict(state)
