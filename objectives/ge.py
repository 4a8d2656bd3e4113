"""Generalized expectation (GE) criteria on dependency arcs (Druck et al. 2009; Naseem et al. 2010).

A :class:`Constraint` says how often a word of tag ``child`` should attach to a word of tag
``parent`` (or to the root). Its feature fires on an arc h -> m when
``upos[h] == parent`` (``h == 0`` for ``"root"``), ``upos[m] == child`` and, if a direction
is given, the child is on that side of its head. The model's rate is the expected number
of such arcs in the batch over the number of ``child`` words in it,
``p_k = E[sum_e f_k(e)] / #child_k``, an estimate of ``p(parent | child)``; the loss
penalises its distance to the target. Rules files are YAML (see
``configs/rules/naseem_ud.yaml`` for the format). Targets come from the rules file or are
estimated from gold trees (a small labeled sample) with :meth:`GeneralizedExpectation.fit_targets`;
``"tag_pairs"`` names the constraint set of every (parent, child, direction) tag triple, whose
targets, estimated from a sample, give the whole head-tag distribution of each child tag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import yaml
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._common import full_precision
from .expectations import covariance_with_arcs, expectation
from .mtt import arc_mask
from .objective import Objective, ObjectiveContext, Scores, TreeBatch

__all__ = [
    "UPOS_TAGS", "ROOT", "TAG_PAIRS", "Constraint", "load_constraints", "tag_pair_constraints", "estimate_targets",
    "GeneralizedExpectation",
]  # fmt: skip

UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)  # fmt: skip
ROOT = "root"
TAG_PAIRS = "tag_pairs"  # the name of the constraint set built by tag_pair_constraints()
_ROOT_ID = -1  # parent id of a root constraint: never a vocabulary index
_DIRECTIONS = {None: 0, "left": -1, "right": 1}  # the sign of (child - head) a constraint asks for
_EPS = 1e-6  # rates and targets are clamped to [eps, 1 - eps] inside the Bernoulli KL
log = logging.getLogger(__name__)
NO_UPOS = (
    "GeneralizedExpectation needs UPOS tags, but the batch has none (all padding or unknown): "
    "train it on tagged unlabeled text (CoNLL-U with a UPOS column)"
)


@dataclass(frozen=True)
class Constraint:
    """A target for ``p(parent | child)``: the share of ``child`` words headed by ``parent``.

    Attributes:
        parent: a UD UPOS tag, or ``"root"`` for the artificial root.
        child: a UD UPOS tag.
        target: the target rate in [0, 1], or ``None`` when it is to be estimated from a
            labeled sample.
        direction: ``"left"`` (the child precedes its head), ``"right"`` (it follows its
            head) or ``None`` (either side).
    """

    parent: str
    child: str
    target: float | None = None
    direction: str | None = None

    def __post_init__(self) -> None:
        if self.parent != ROOT and self.parent not in UPOS_TAGS:
            raise ValueError(f"parent must be a UPOS tag or {ROOT!r}, got {self.parent!r}")
        if self.child not in UPOS_TAGS:
            raise ValueError(f"child must be a UPOS tag, got {self.child!r}")
        if self.direction not in _DIRECTIONS:
            raise ValueError(f"direction must be 'left', 'right' or None, got {self.direction!r}")
        if self.target is not None and not 0 <= self.target <= 1:
            raise ValueError(f"target must lie in [0, 1], got {self.target}")


def load_constraints(path: str | Path) -> list[Constraint]:
    """Read a YAML rules file: a mapping with a ``constraints`` list of Constraint fields."""
    rules = yaml.safe_load(Path(path).read_text())
    if not isinstance(rules, dict) or not isinstance(rules.get("constraints"), list):
        raise ValueError(f"{path}: expected a mapping with a 'constraints' list")
    return [Constraint(**rule) for rule in rules["constraints"]]


def tag_pair_constraints() -> list[Constraint]:
    """Every (parent, child, direction) triple of UD tags, root included, without targets.

    With targets estimated from gold trees they state, for each child tag, the whole
    distribution of its head's tag and side (root heads are always on the left).
    """
    constraints = [Constraint(ROOT, child) for child in UPOS_TAGS]
    for child in UPOS_TAGS:
        for parent in UPOS_TAGS:
            constraints += [Constraint(parent, child, direction=side) for side in ("left", "right")]
    return constraints


class _Ids(NamedTuple):
    """Constraints as ``(K,)`` long tensors: parent tag ids (``_ROOT_ID`` for root), child tag
    ids, and the sign of (child - head) they ask for (0: either)."""

    parent: Tensor
    child: Tensor
    direction: Tensor


def _compile(constraints: Sequence[Constraint], upos_vocab: Sequence[str], device: torch.device | None) -> _Ids:
    index = {tag: i for i, tag in enumerate(upos_vocab)}
    missing = {c.child for c in constraints} | {c.parent for c in constraints if c.parent != ROOT}
    missing -= index.keys()
    if missing:
        raise ValueError(f"UPOS tags {sorted(missing)} of the constraints are not in the UPOS vocabulary {upos_vocab}")
    parent = [_ROOT_ID if c.parent == ROOT else index[c.parent] for c in constraints]
    child = [index[c.child] for c in constraints]
    direction = [_DIRECTIONS[c.direction] for c in constraints]
    return _Ids(*(torch.tensor(ids, dtype=torch.long, device=device) for ids in (parent, child, direction)))


def _child_match(ids: _Ids, upos: Tensor, lengths: Tensor) -> Tensor:
    """``[word m has tag child_k]``: ``(B, N+1)`` tags -> ``(B, N+1, K)`` bool (False off words)."""
    words = arc_mask(lengths, upos.shape[1] - 1).any(1)
    return (upos[..., None] == ids.child) & words[..., None]


def _fires(ids: _Ids, parent_tags: Tensor, child: Tensor, head: Tensor, position: Tensor) -> Tensor:
    """``f_k`` on arcs head -> position: broadcastable ``(...)`` head tags and positions,
    ``child`` ``(..., K)`` from :func:`_child_match` -> ``(..., K)`` bool."""
    parent = torch.where(ids.parent == _ROOT_ID, (head == 0)[..., None], parent_tags[..., None] == ids.parent)
    side = (ids.direction == 0) | (ids.direction == (position - head).sign()[..., None])
    return parent & child & side


def _gold_counts(ids: _Ids, heads: Tensor, upos: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Per constraint, the number of gold arcs firing it and of child words: two ``(K,)`` float64."""
    child = _child_match(ids, upos, lengths)
    position = torch.arange(upos.shape[1], device=upos.device)
    fires = _fires(ids, upos.gather(1, heads), child, heads, position)
    return fires.sum((0, 1)).double(), child.sum((0, 1)).double()


def _rates(fires: Tensor, counts: Tensor, min_count: int) -> Tensor:
    return torch.where(counts >= max(min_count, 1), fires / counts.clamp_min(1), torch.nan)


def estimate_targets(
    constraints: Sequence[Constraint],
    heads: Tensor,
    upos: Tensor,
    lengths: Tensor,
    upos_vocab: Sequence[str],
    min_count: int = 1,
) -> Tensor:
    """Each constraint's rate in gold trees: ``(K,)`` float64, NaN where the child tag has
    fewer than ``min_count`` words (too few to estimate a rate).

    Args: ``heads``, ``upos`` ``(B, N+1)`` long (``upos`` indexes ``upos_vocab``), ``lengths`` ``(B,)``.
    """
    ids = _compile(constraints, upos_vocab, upos.device)
    return _rates(*_gold_counts(ids, heads, upos, lengths), min_count)


class _CovarianceGradient(torch.autograd.Function):
    """Returns a precomputed penalty; its gradient w.r.t. the arc scores is ``Cov(r, 1_e)`` (T2, R = 1)."""

    @staticmethod
    def forward(ctx, arcs: Tensor, value: Tensor, r: Tensor, lengths: Tensor, multiroot: bool) -> Tensor:
        ctx.save_for_backward(arcs, r, lengths)
        ctx.multiroot = multiroot
        return value.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        arcs, r, lengths = ctx.saved_tensors
        per_arc = covariance_with_arcs(arcs, lengths, r, ctx.multiroot, validate=False)[:, 0]
        return grad * per_arc, None, None, None, None


class GeneralizedExpectation(Objective):
    """GE penalty pulling the model's attachment rates ``p_k`` towards the constraints' targets.

    ``squared``: ``sum_k (p_k - t_k)^2``; ``kl``: ``sum_k KL(Bernoulli(t_k) || Bernoulli(p_k))``
    with ``p_k`` and ``t_k`` clamped to ``[1e-6, 1 - 1e-6]``. Constraints whose child tag does not
    occur in the batch, or that have no target, are masked out (no host sync). With
    ``weighting="count"`` each term is multiplied by ``n_k / mean(n)``, the batch count of its
    child tag over the mean count of the constraints kept: a rate measured on few words of a
    small batch has variance O(1/n_k), so weighting by n_k is inverse-variance weighting, and
    the mean keeps the penalty's scale that of ``"uniform"``.

    Gradient routes (equal up to rounding): ``"reverse"`` differentiates through the T1
    expectation (autograd, O(N^3)). ``"t2"`` computes the rates without a graph and gives
    the arc scores the gradient ``Cov(r, 1_e)`` with ``r = sum_k dPenalty/dp_k f_k / #child_k``
    (:func:`~objectives.expectations.covariance_with_arcs`, R = 1), the covariance view of
    Druck & Smith (2009).

    Args:
        constraints: :class:`Constraint` objects (or their fields as dicts), the path of
            a YAML rules file, or ``"tag_pairs"`` (:func:`tag_pair_constraints`).
        penalty: ``"squared"`` or ``"kl"``.
        gradient: ``"reverse"`` or ``"t2"``.
        upos_vocab: the UPOS vocabulary (index -> tag) of ``batch.upos``; else call
            :meth:`bind` before the first batch.
        multiroot: multi-root trees instead of single-root ones.
        targets_from: ``"rules"`` (the constraints' own targets) or ``"labeled"``: estimated
            by :meth:`fit_targets` from the gold trees of the labeled training sentences
            (the parser does it when training starts); rule targets are then ignored.
        min_count: with ``"labeled"``, a constraint whose child tag has fewer words than
            this in the labeled sample is left out (its rate would be noise).
        weighting: ``"uniform"`` (every constraint alike) or ``"count"`` (by child tag count).
    """

    needs_upos = True

    def __init__(
        self,
        constraints: str | Path | Sequence[Constraint | dict],
        penalty: Literal["squared", "kl"] = "squared",
        gradient: Literal["reverse", "t2"] = "reverse",
        upos_vocab: Sequence[str] | None = None,
        multiroot: bool = False,
        targets_from: Literal["rules", "labeled"] = "rules",
        min_count: int = 10,
        weighting: Literal["uniform", "count"] = "uniform",
    ) -> None:
        super().__init__()
        if constraints == TAG_PAIRS:
            constraints = tag_pair_constraints()
        elif isinstance(constraints, (str, Path)):
            constraints = load_constraints(constraints)
        self.constraints = [c if isinstance(c, Constraint) else Constraint(**c) for c in constraints]
        if not self.constraints:
            raise ValueError("GeneralizedExpectation needs at least one constraint")
        if targets_from not in ("rules", "labeled"):
            raise ValueError(f"targets_from must be 'rules' or 'labeled', got {targets_from!r}")
        if targets_from == "rules" and any(c.target is None for c in self.constraints):
            raise ValueError("constraints without a target need targets_from='labeled'")
        if penalty not in ("squared", "kl"):
            raise ValueError(f"penalty must be 'squared' or 'kl', got {penalty!r}")
        if gradient not in ("reverse", "t2"):
            raise ValueError(f"gradient must be 'reverse' or 't2', got {gradient!r}")
        if weighting not in ("uniform", "count"):
            raise ValueError(f"weighting must be 'uniform' or 'count', got {weighting!r}")
        self.penalty = penalty
        self.weighting = weighting
        self.gradient = gradient
        self.multiroot = multiroot
        self.targets_from = targets_from
        self.min_count = min_count
        # NaN: no target yet (estimated by fit_targets) or too few words to estimate one
        rule_targets = [c.target if targets_from == "rules" else torch.nan for c in self.constraints]
        self.register_buffer("targets", torch.tensor(rule_targets), persistent=False)
        for name in ("parent_ids", "child_ids", "directions", "tagged_ids"):
            self.register_buffer(name, None, persistent=False)
        self._upos_checked = False
        if upos_vocab is not None:
            self.bind(upos_vocab)

    def bind(self, upos_vocab: Sequence[str]) -> None:
        """Map the constraints' tags to the indices of ``upos_vocab`` (index -> tag)."""
        device = self.targets.device
        self.parent_ids, self.child_ids, self.directions = _compile(self.constraints, upos_vocab, device)
        tagged = [i for i, tag in enumerate(upos_vocab) if tag in UPOS_TAGS]
        self.tagged_ids = torch.tensor(tagged, dtype=torch.long, device=device)

    def setup(self, context: ObjectiveContext) -> None:
        """Bind the context's UPOS vocabulary; with ``targets_from="labeled"`` and a labeled
        sample (``fit``), estimate the targets from its gold trees."""
        super().setup(context)
        self.bind(context.tags)
        if self.targets_from == "labeled" and context.stage == "fit":
            if context.labeled_batches is None:
                raise RuntimeError("GE with targets_from='labeled' estimates its targets from labeled sentences, but none were given")
            targets = self.fit_targets(context.labeled_batches())
            log.info("GE targets from the labeled sample: %d of %d constraints kept", int(targets.isfinite().sum()), len(targets))

    def fit_targets(self, batches: Iterable[TreeBatch]) -> Tensor:
        """Set the targets to the constraints' rates in the gold trees of ``batches`` (a
        labeled sample, in batches to bound memory); returns them, ``(K,)`` float64, NaN for
        the constraints left out (see ``min_count``)."""
        if self.parent_ids is None:
            raise RuntimeError("GeneralizedExpectation has no UPOS vocabulary: give upos_vocab or call bind()")
        ids = _Ids(self.parent_ids, self.child_ids, self.directions)
        fires = counts = 0
        for batch in batches:
            batch_fires, batch_counts = _gold_counts(ids, batch.heads, batch.upos, batch.lengths)
            fires, counts = fires + batch_fires, counts + batch_counts
        targets = _rates(torch.as_tensor(fires), torch.as_tensor(counts), self.min_count)
        if targets.isnan().all():
            raise ValueError(f"no constraint's child tag has {self.min_count} or more words in the labeled sample")
        self.targets = targets.to(self.targets)
        return targets

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None) -> Tensor:
        """Scalar penalty for ``scores.arcs`` ``(B, N+1, N+1)`` and ``batch.upos`` ``(B, N+1)``."""
        self._check_upos(batch)
        ids = _Ids(self.parent_ids, self.child_ids, self.directions)
        arcs = full_precision(scores.arcs)
        child = _child_match(ids, batch.upos, batch.lengths)  # (B, N+1, K)
        position = torch.arange(arcs.shape[-1], device=arcs.device)
        upos = batch.upos[:, :, None]  # tag of the head h, broadcast over m
        features = _fires(ids, upos, child[:, None], position[:, None], position).to(arcs.dtype)  # (B, N+1, N+1, K)
        counts = child.sum((0, 1))
        valid, normaliser = (counts > 0) & self.targets.isfinite(), counts.clamp_min(1)
        weights = self._weights(counts.to(arcs.dtype), valid)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.gradient == "reverse"):
            rates = expectation(arcs, batch.lengths, features, self.multiroot).sum(0) / normaliser
        if self.gradient == "reverse":
            return self._penalty(rates, weights)
        slope, value = torch.func.grad_and_value(self._penalty)(rates, weights)
        r = (features * (slope / normaliser)).sum(-1, keepdim=True)  # (B, N+1, N+1, 1); no matmul: autocast
        return _CovarianceGradient.apply(arcs, value, r, batch.lengths, self.multiroot)

    def _weights(self, counts: Tensor, valid: Tensor) -> Tensor:
        """Each constraint's weight ``(K,)`` from its child tag's batch count ``(K,)``; 0 where not ``valid``."""
        if self.weighting == "uniform":
            return valid.to(counts.dtype)
        kept = torch.where(valid, counts, 0.0)
        return kept / (kept.sum() / valid.sum().clamp_min(1)).clamp_min(1)

    def _penalty(self, rates: Tensor, weights: Tensor) -> Tensor:
        """Distance of the rates ``(K,)`` to the targets, weighted by ``weights`` ``(K,)`` (0: masked out)."""
        targets = self.targets.to(rates.dtype).nan_to_num(0.5)  # masked out below; no NaN gradient
        if self.penalty == "squared":
            terms = (rates - targets) ** 2
        else:  # both clamped, so that a rate equal to a target of 0 or 1 costs exactly 0
            rates, targets = rates.clamp(_EPS, 1 - _EPS), targets.clamp(_EPS, 1 - _EPS)
            terms = targets * (targets / rates).log() + (1 - targets) * ((1 - targets) / (1 - rates)).log()
        return torch.where(weights > 0, weights * terms, 0.0).sum()

    def _check_upos(self, batch: TreeBatch) -> None:
        """Raise when unbound, without targets or the batch is untagged (checked on the first
        batch only: a host sync)."""
        if self.parent_ids is None:
            raise RuntimeError("GeneralizedExpectation has no UPOS vocabulary: give upos_vocab or call bind()")
        if batch.upos is None:
            raise ValueError(NO_UPOS)
        if not self._upos_checked:
            if not bool(torch.isin(batch.upos, self.tagged_ids).any()):
                raise ValueError(NO_UPOS)
            if bool(self.targets.isnan().all()):
                raise RuntimeError("GeneralizedExpectation has no targets: call fit_targets() on a labeled sample")
            self._upos_checked = True
