"""The training loss as a declarative list of terms: objective, data, weight."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn

from objectives.conventions import ConfigurationError
from objectives.objective import Objective, ObjectiveContext, Scores
from objectives.schedule import Schedule

from parser.data.batch import Batch


@dataclass
class Term:
    """One term of the training loss: ``weight(step) * objective(scores, batch, teacher, step)``.

    Attributes:
        objective: any :class:`~objectives.objective.Objective`.
        data: the batches it reads: ``labeled`` (gold trees and tags) or ``unlabeled`` (the
            unlabeled stream; the labeled batch's words when a run has none).
        weight: a number or a :class:`~objectives.schedule.Schedule` of the step.
        name: logged as ``train/<name>`` (default: the objective's class in snake case).
    """

    objective: Objective
    data: Literal["labeled", "unlabeled"] = "labeled"
    weight: float | Schedule = 1.0
    name: str | None = None


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class TermSet(nn.Module):
    """The terms of a run, evaluated on one training step's batches (each batch scored once)."""

    def __init__(self, terms: Sequence[Term]):
        super().__init__()
        self.terms = list(terms)
        for term in self.terms:
            if term.data not in ("labeled", "unlabeled"):
                raise ConfigurationError(f"a term's data is 'labeled' or 'unlabeled', not {term.data!r}")
        self.objectives = nn.ModuleList(term.objective for term in self.terms)  # moved with the model
        self.weights = [Schedule.of(term.weight) for term in self.terms]
        self.total_steps: int | None = None  # the run's length, for weights decaying to its end
        self.names: list[str] = []
        for term in self.terms:
            name = term.name or _snake_case(type(term.objective).__name__)
            self.names.append(name if name not in self.names else f"{name}_{self.names.count(name) + 1}")

    def needs(self, what: str) -> bool:
        """Whether some term's objective has ``needs_<what>`` (``teacher``, ``tag_scores``, ...)."""
        return any(getattr(term.objective, f"needs_{what}") for term in self.terms)

    def check(self, labeled: bool, unlabeled: bool, unlabeled_tagged: bool, tagger: bool, teacher: bool) -> None:
        """A run's terms against its data (labeled trees, unlabeled text and whether it is
        tagged) and model (a tagger, a teacher): one :class:`ConfigurationError` naming the term."""
        if not self.terms:
            raise ConfigurationError("nothing to train: give the parser a list of terms (--model.terms, e.g. "
                                     "configs/likelihood.yaml)")
        for name, term in zip(self.names, self.terms):
            objective, on_unlabeled = term.objective, term.data == "unlabeled" and unlabeled
            if not labeled and not on_unlabeled:
                raise ConfigurationError(f"term {name}: {type(objective).__name__} reads the labeled trees, but the run "
                                         "has none (--data.labeled_size 0): give it data: unlabeled, or give trees")
            if objective.needs_gold and term.data == "unlabeled":
                raise ConfigurationError(f"term {name}: {type(objective).__name__} needs gold trees, which unlabeled "
                                         "sentences do not have: give it data: labeled")
            if objective.needs_upos and on_unlabeled and not (tagger or unlabeled_tagged):
                raise ConfigurationError(
                    f"term {name}: {type(objective).__name__} needs UPOS tags on the unlabeled sentences, but they have "
                    "none (plain text?): give tagged CoNLL-U via --data.unlabeled, or add a tagging term "
                    "(objectives.TagLikelihood) to tag them")
            if objective.needs_teacher and not teacher:
                raise ConfigurationError(f"term {name}: {type(objective).__name__} needs a teacher: pass "
                                         "--model.teacher PATH.ckpt or --model.teacher.ema 0.999")

    def setup(self, context: ObjectiveContext) -> None:
        self.total_steps = context.total_steps
        for term in self.terms:
            term.objective.setup(context)

    def forward(self, labeled: Batch | None, unlabeled: Batch | None, step: int,
                score: Callable[[Batch], Scores], tagged: Callable[[Batch, Scores], Batch],
                teacher: Callable[[Batch], Scores]) -> tuple[Tensor, dict[str, Tensor], dict[str, float]]:
        """The loss of one step, each term's value (detached) and the weights that change with the step.
        ``labeled`` is None in a run without labeled trees (every term then reads ``unlabeled``).

        ``score(batch)`` runs the network (labeled batch first, then the unlabeled one, each
        once), ``tagged(batch, scores)`` gives untagged words predicted tags, ``teacher(batch)``
        the teacher's scores (once per batch)."""
        reads = {"unlabeled" if unlabeled is not None and term.data == "unlabeled" else "labeled" for term in self.terms}
        batches = {"labeled": labeled, "unlabeled": unlabeled}
        scores = {data: score(batches[data]) for data in ("labeled", "unlabeled") if data in reads}
        loss, values, weights, teachers = None, {}, {}, {}
        for name, term, schedule in zip(self.names, self.terms, self.weights):
            data = term.data if term.data in scores else "labeled"
            weight = schedule(step, self.total_steps)
            if schedule.warmup or schedule.decay != "constant":
                weights[name] = weight
            if weight == 0:
                continue  # warming up from 0, or decayed to 0: nothing to compute
            batch = tagged(batches[data], scores[data]) if term.objective.needs_upos else batches[data]
            if term.objective.needs_teacher and data not in teachers:
                teachers[data] = teacher(batch)
            value = term.objective(scores[data], batch, teachers.get(data), step)
            values[name] = value.detach()
            loss = weight * value if loss is None else loss + weight * value
        if loss is None:  # every weight 0 this step: a zero that still backpropagates
            loss = 0.0 * next(iter(scores.values())).arcs.sum()
        return loss, values, weights


def trains_tagger(model_config: dict) -> bool:
    """Whether a run's ``model`` config (its ``config.yaml``'s) trains a UPOS head: some term's
    objective needs tag scores (``needs_tag_scores``), or, in configs before the terms list, a
    positive ``tagger_weight``."""
    for term in model_config.get("terms") or []:
        objective = term["objective"]
        module, _, name = (objective if isinstance(objective, str) else objective.get("class_path", "")).rpartition(".")
        if getattr(getattr(importlib.import_module(module or "objectives"), name, None), "needs_tag_scores", False):
            return True
    return (model_config.get("tagger_weight") or 0) > 0
