"""The GE losses: :class:`GeneralizedExpectation` (each constraint's rate against its target)
and :class:`RuleCoverage` (the share of words some rule covers against a threshold), each
a :class:`~objectives.ge.penalties.Penalty` of batch statistics; GE's targets come from a
:class:`~objectives.ge.targets.TargetSource`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor

from .._common import full_precision
from ..conventions import UPOS_TAGS, ConfigurationError
from ..distribution import TreeCRF
from ..mtt import no_autocast
from ..objective import Objective, ObjectiveContext, Scores, TreeBatch
from .compiled import TENSOR_FIELDS, CompiledConstraints, compile_constraints
from .counts import MIN_COUNT, arc_weights, denominators, gold_counts, label_groups, rates, statistics, tag_distributions
from .families import resolve_constraints
from .penalties import Penalty, as_penalty
from .rules import Constraint, overlap
from .targets import NoTargets, TargetSource, as_target_source

__all__ = ["GeneralizedExpectation", "RuleCoverage"]

NO_UPOS = (
    "GeneralizedExpectation needs UPOS tags, but the batch has none (all padding or unknown): "
    "train it on tagged unlabeled text (CoNLL-U with a UPOS column)"
)


class GeneralizedExpectation(Objective):
    """GE penalty pulling the model's attachment rates ``p_k`` towards the constraints' targets.

    The model's rate of a constraint is the expected number of arcs firing it in the batch
    over the number of its ``child`` words in it, ``p_k = E[sum_e f_k(e)] / #child_k``, an
    estimate of ``p(parent | child)`` (or over its parent's words, or over the expected arcs of
    its parent, child and label: :class:`~objectives.ge.rules.Constraint`'s ``per``; the
    rates are batch-level expectations, as Effland & Collins 2023 found best); constraints on a label weight each arc by the label's
    probability under the label scorer, ``p(l | h -> m)``, so GE trains the labels too. Tags
    may be soft: ``batch.upos`` holds tag ids or tag probabilities (a tagger's output), and the
    counts are then expected counts, under the tags and the trees as independent (the parser's
    tagger and arc scorer are two factors); with ``train_tags`` the penalty's gradient reaches
    those probabilities too, so GE trains the tagger as well, as the joint tag and tree
    statistics of Effland & Collins do (else the tags are observations). The loss is ``sum_k w_k penalty(p_k, t_k)``, or with
    ``reduction="mean"`` that sum over the number of constraints kept in the batch (a weight
    then means the same for ten statistics as for a thousand).

    ``penalty``: ``"squared"`` (:class:`~objectives.ge.penalties.Squared`), ``"kl"``
    (:class:`~objectives.ge.penalties.BernoulliKL`), ``"one_sided"``
    (:class:`~objectives.ge.penalties.OneSided`), or a Penalty object. Constraints whose child
    tag does not occur in the batch, or that have no target, are masked out (no host sync). With
    ``weighting="count"`` each term is multiplied by ``n_k / mean(n)``, the batch count of its
    child tag over the mean count of the constraints kept: a rate measured on few words of a
    small batch has variance O(1/n_k), so weighting by n_k is inverse-variance weighting, and
    the mean keeps the penalty's scale that of ``"uniform"``.

    Gradient routes (equal up to rounding): ``"reverse"`` differentiates through the T1
    expectation (autograd, O(N^3)). ``"t2"`` computes the rates without a graph and gives
    the arc scores the gradient ``Cov(r, 1_e)`` with ``r = sum_k dPenalty/dp_k f_k / #child_k``
    (R = 1, the covariance view of Druck & Smith 2009: one closed-form marginal VJP in the
    direction ``r``), from the same factorisation. Both compute in the scores' dtype (float32
    or float64) around the engine's float64 factorisation.

    :meth:`setup` gives the tree set, the UPOS vocabulary of ``batch.upos`` (constraint tags
    are checked against it) and the labeled sample (``targets_from="labeled"``).
    Distributed training: the batch counts (expected arcs per constraint,
    child words per tag) are summed over the processes of :attr:`process_group` (``None``:
    the default group when ``torch.distributed`` runs with more than one process) before
    the penalty, so every process gets the penalty of the whole global batch. The all-reduce
    is differentiable; its backward sums the (equal) gradients of all processes, so each
    process's score gradient is ``world_size`` times the single-process gradient of the
    global-batch penalty w.r.t. its own scores, and DDP's averaging over processes gives
    parameter gradients equal to those of one process on the global batch.

    Args:
        constraints: :class:`~objectives.ge.rules.Constraint` objects (or their fields as
            dicts), the path of a YAML rules file, ``"tag_pairs"``, ``"distances"``, ``"labels"``
            (:mod:`objectives.ge.families`), or a list mixing them.
        penalty: ``"squared"``, ``"l1"``, ``"kl"``, ``"one_sided"`` or a Penalty.
        gradient: ``"reverse"`` or ``"t2"``.
        targets_from: ``"rules"`` (the constraints' own targets), ``"labeled"``: estimated
            by :meth:`fit_targets` from the gold trees of the labeled training sentences
            (in :meth:`setup`, when training starts), ``"teacher"``: the teacher's expected
            rates on each batch (the term then needs a teacher; rule targets are then
            ignored), or a TargetSource (:mod:`objectives.ge.targets`).
        min_count: :meth:`fit_targets` leaves out a constraint whose child tag has fewer words
            than this in the labeled sample (default :data:`~objectives.ge.counts.MIN_COUNT`).
        weighting: ``"uniform"`` (every constraint alike) or ``"count"`` (by child tag count).
        tolerance: the half-width of the penalty-free band around each target, in standard
            errors of the batch rate (0: none); with ``"squared"``, ``"l1"`` or ``"one_sided"``.
            A constraint's own ``tolerance`` (an absolute margin) widens its band to at least that.
        min_arcs: a rate per arc counts in a batch that expects at least this many arcs of its
            kind (fewer: a rate of noise with steep gradients).
        reduction: ``"sum"`` over the constraints kept in the batch, or their ``"mean"``.
        train_tags: soft tags (probabilities) get the penalty's gradient (both routes: autograd
            through the statistics, which are linear in each word's tag distribution).

    ``penalty`` and ``targets_from`` keep what was configured; the objects they name are
    :attr:`penalize` and :attr:`source`.
    """

    needs_upos = True

    def __init__(
        self,
        constraints: Sequence[Constraint | dict | str] | str | Path,
        penalty: Literal["squared", "l1", "kl", "one_sided"] | Penalty = "squared",
        gradient: Literal["reverse", "t2"] = "reverse",
        targets_from: Literal["rules", "labeled", "teacher"] | TargetSource = "rules",
        min_count: int = MIN_COUNT,
        weighting: Literal["uniform", "count"] = "uniform",
        tolerance: float = 0.0,
        min_arcs: float = 1.0,
        reduction: Literal["sum", "mean"] = "sum",
        train_tags: bool = False,
    ) -> None:
        super().__init__()
        self.constraints = resolve_constraints(constraints)
        if not self.constraints:
            raise ConfigurationError("GeneralizedExpectation needs at least one constraint")
        self.source = as_target_source(targets_from)
        self.penalize = as_penalty(penalty, tolerance)
        if gradient not in ("reverse", "t2"):
            raise ConfigurationError(f"gradient must be 'reverse' or 't2', got {gradient!r}")
        if weighting not in ("uniform", "count"):
            raise ConfigurationError(f"weighting must be 'uniform' or 'count', got {weighting!r}")
        if reduction not in ("sum", "mean"):
            raise ConfigurationError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
        self.penalty = penalty
        self.reduction = reduction
        self.train_tags = train_tags
        self.weighting = weighting
        self.gradient = gradient
        self.targets_from = targets_from
        self.needs_teacher = self.source.needs_teacher
        self.min_count = min_count
        self.min_arcs = min_arcs
        self.num_tags = 0
        self.process_group = None
        # NaN: no target yet (estimated by fit_targets) or too few words to estimate one
        self.register_buffer("targets", torch.tensor(self.source.initial(self.constraints)), persistent=False)
        margins = [c.tolerance or 0.0 for c in self.constraints]
        self.register_buffer("margins", torch.tensor(margins, dtype=self.targets.dtype), persistent=False)
        for name in (*(f"ids_{field}" for field in TENSOR_FIELDS), "tagged_ids"):
            self.register_buffer(name, None, persistent=False)
        self._class_layout: tuple = ()  # CompiledConstraints's host fields
        self._upos_checked = False

    def setup(self, context: ObjectiveContext) -> None:
        """Take the tree set and the UPOS vocabulary (index -> tag) of ``batch.upos``; then the
        target source's setup (``"labeled"``: the targets of the labeled sample's gold trees)."""
        super().setup(context)
        device = self.targets.device
        ids = compile_constraints(self.constraints, context.tags, device, context.labels)
        for field in TENSOR_FIELDS:
            setattr(self, f"ids_{field}", getattr(ids, field))
        self._class_layout = ids[len(TENSOR_FIELDS):]
        tagged = [i for i, tag in enumerate(context.tags) if tag in UPOS_TAGS]
        self.tagged_ids = torch.tensor(tagged, dtype=torch.long, device=device)
        self.num_tags = len(context.tags)
        self.source.setup(self.fit_targets, context)

    def _ids(self) -> CompiledConstraints:
        if self.ids_parent is None:
            raise RuntimeError("GeneralizedExpectation has no UPOS vocabulary: call setup() with the model's context")
        return CompiledConstraints(*(getattr(self, f"ids_{field}") for field in TENSOR_FIELDS), *self._class_layout)

    def fit_targets(self, batches: Iterable[TreeBatch]) -> Tensor:
        """Set the targets to the constraints' rates in the gold trees of ``batches`` (a
        labeled sample, in batches to bound memory); returns them, ``(K,)`` float64, NaN for
        the constraints left out (see ``min_count``)."""
        ids = self._ids()
        fires = counts = 0
        for batch in batches:
            ids = ids.to(batch.heads.device)  # the sample may be on another device
            batch_fires, batch_counts = gold_counts(ids, batch.heads, batch.upos, batch.lengths, self.num_tags,
                                                    getattr(batch, "labels", None))
            fires, counts = fires + batch_fires, counts + batch_counts
        targets = rates(torch.as_tensor(fires), torch.as_tensor(counts), self.min_count)[: len(self.constraints)]
        if targets.isnan().all():
            raise ConfigurationError(f"no constraint is counted over {self.min_count} or more words (or arcs) in the "
                                     "labeled sample")
        self.targets = targets.to(self.targets)
        return targets

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar penalty for ``scores.arcs`` ``(B, N+1, N+1)`` (and ``scores.labels``
        ``(B, N+1, N+1, L)`` for constraints on labels) and ``batch.upos`` (``(B, N+1)`` ids or
        ``(B, N+1, T)`` probabilities)."""
        ids = self._ids()
        if batch.upos is None:
            raise ConfigurationError(NO_UPOS)
        arcs = full_precision(scores.arcs)
        crf = TreeCRF(arcs, batch.lengths, self.multiroot, validate_args=False)
        with no_autocast(arcs.device):
            tags = tag_distributions(batch.upos, batch.lengths, self.num_tags, arcs.dtype, self.train_tags)
            labels = self._label_groups(ids, scores, arcs.dtype)
            self._check_tags(tags)
            group = self._group()
            targets = self.source(self.targets, teacher, lambda other: self._rates_of(ids, other, batch, tags, group))
            if self.gradient == "reverse":
                return self._loss(self._sum(group, statistics(ids, crf.marginals, tags, labels)), targets)
            local = statistics(ids, crf.marginals.detach(), tags, None if labels is None else labels.detach())
            stats = local.detach()  # local keeps a graph through trained tags only
            if group is not None:
                dist.all_reduce(stats, group=group)
            with torch.enable_grad():  # the slope dPenalty/dstats: autograd over 2K + 1 numbers
                stats.requires_grad_()
                value = self._loss(stats, targets)
                (slopes,) = torch.autograd.grad(value, stats)
            slope = slopes[: len(ids.child)]
            r = arc_weights(ids, slope, tags, labels)  # (B, N+1, N+1): sum_k dPenalty/dE_k f_k
            scale = 1 if group is None else dist.get_world_size(group)  # as the reverse route (see above)
            # the penalty's value, with the gradient of scale * E[r]: scale * Cov(r, 1_e) for the
            # arcs, and scale * mu * dr/dlabels for the label scores (r is linear in them)
            surrogate = scale * crf.expectation(r.detach().unsqueeze(-1)).sum()
            if labels is not None:
                surrogate = surrogate + scale * (crf.marginals.detach() * r).sum()
            if local.requires_grad:  # trained tags: the statistics are linear in them, their slopes known
                surrogate = surrogate + scale * (slopes * local).sum()
            return value.detach() + (surrogate - surrogate.detach())

    def _label_groups(self, ids: CompiledConstraints, scores: Scores, dtype: torch.dtype) -> Tensor | None:
        """The probability that each arc has a label of each constraint label ``(B, N+1, N+1, G)``,
        from ``scores.labels``; None when no constraint has a label."""
        if not len(ids.groups):
            return None
        if scores.labels is None:
            raise ConfigurationError("constraints on labels need the parser's label scores: the scores have none")
        return label_groups(ids, full_precision(scores.labels).to(dtype).softmax(-1))

    def _rates_of(self, ids: CompiledConstraints, other: Scores, batch: TreeBatch, tags: Tensor, group) -> Tensor:
        """The expected rate of each constraint under ``other`` scores (a teacher's) on this
        batch ``(K,)`` (NaN where the child tag does not occur), summed over ``group`` like the
        student's; no graph."""
        with torch.no_grad():
            mu = TreeCRF(full_precision(other.arcs).to(tags.dtype), batch.lengths, self.multiroot,
                         validate_args=False).marginals
            stats = statistics(ids, mu, tags, self._label_groups(ids, other, tags.dtype))
            if group is not None:
                dist.all_reduce(stats, group=group)
        k = len(ids.child)
        return rates(stats[:k], denominators(ids, stats[:k], stats[k : 2 * k]), 1)[: len(self.constraints)]

    def _group(self):
        """The process group to sum batch counts over, or None for one process."""
        if self.process_group is not None:
            return self.process_group
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist.group.WORLD
        return None

    @staticmethod
    def _sum(group, stats: Tensor) -> Tensor:
        """``stats`` summed over the processes of ``group`` (differentiably), or as given."""
        if group is None:
            return stats
        from torch.distributed.nn.functional import all_reduce

        return all_reduce(stats, group=group)

    def _loss(self, stats: Tensor, targets: Tensor) -> Tensor:
        """The penalty from the batch statistics of :func:`~objectives.ge.counts.statistics`
        ``(2K + 1,)`` (K: the compiled constraints, denominators included) and the targets of
        the given constraints ``(K',)``."""
        ids, k, given = self._ids(), len(self.ids_child), len(self.constraints)
        expected = stats[:k]
        counts = denominators(ids, expected, stats[k : 2 * k])[:given]  # per arc: differentiable
        least = torch.where(ids.given[:given] >= 0, self.min_arcs, 0.0)  # a rate per arc: enough expected arcs
        valid = (counts > 0) & (counts >= least) & targets.isfinite()
        counts_kept = torch.where(valid, counts, 1.0)
        return self._penalty(expected[:given] / counts_kept, self._weights(counts, valid), targets, counts_kept)

    def _weights(self, counts: Tensor, valid: Tensor) -> Tensor:
        """Each constraint's weight ``(K,)`` from its child tag's batch count ``(K,)``; 0 where not ``valid``."""
        if self.weighting == "uniform":
            return valid.to(counts.dtype)
        kept = torch.where(valid, counts, 0.0)
        return kept / (kept.sum() / valid.sum().clamp_min(1)).clamp_min(1)

    def _penalty(self, rates: Tensor, weights: Tensor, targets: Tensor, counts: Tensor,
                 margins: Tensor | None = None) -> Tensor:
        """``sum_k weights_k penalty(rates_k, targets_k)`` (over the kept constraints' number for
        ``reduction="mean"``): all ``(K,)``, ``weights`` 0 where masked out; ``counts``: the words
        (or arcs) each rate was measured on (> 0); ``margins``: each constraint's own tolerance
        (default: the constraints')."""
        targets = targets.to(rates.dtype).nan_to_num(0.5)  # masked out below; no NaN gradient
        margins = (self.margins if margins is None else margins).to(rates.dtype)
        total = torch.where(weights > 0, weights * self.penalize(rates, targets, counts, margins), 0.0).sum()
        return total / (weights > 0).sum().clamp_min(1) if self.reduction == "mean" else total

    def _check_tags(self, tags: Tensor) -> None:
        """Raise when the batch is untagged or there are no targets (checked on the first
        batch only: a host sync)."""
        if not self._upos_checked:
            if not bool(tags[..., self.tagged_ids].sum() > 0):
                raise ConfigurationError(NO_UPOS)
            if not self.source.ready(self.targets):
                raise RuntimeError("GeneralizedExpectation has no targets: call fit_targets() on a labeled sample")
            self._upos_checked = True


class RuleCoverage(GeneralizedExpectation):
    """The constraints as one rule set (Naseem et al. 2010): the expected share of the
    batch's words whose arc fires some rule, ``E[sum_k sum_e f_k(e)] / #words``, is pulled
    to ``coverage`` (``one_sided``: up to it, only while below). The rules' own targets are
    not used; the rules must not overlap (each covered arc counts once). Statistics,
    gradient routes and distributed sums are :class:`GeneralizedExpectation`'s.

    Args:
        constraints: as for :class:`GeneralizedExpectation` (targets not needed).
        coverage: the share in (0, 1] (0.61 for the shipped rules: the mean of their gold
            coverage on five UD dev sets, ``treeexp statistics rules``).
        penalty, gradient: as for :class:`GeneralizedExpectation`.
    """

    def __init__(self, constraints: Sequence[Constraint | dict | str] | str | Path, coverage: float,
                 penalty: Literal["squared", "l1", "kl", "one_sided"] | Penalty = "one_sided",
                 gradient: Literal["reverse", "t2"] = "reverse") -> None:
        if not 0 < coverage <= 1:
            raise ConfigurationError(f"coverage must lie in (0, 1], got {coverage}")
        self.coverage = coverage
        super().__init__(constraints, penalty, gradient, targets_from=NoTargets())
        if any(c.per != "child" for c in self.constraints):
            raise ConfigurationError("coverage counts covered words: every rule's rate must be per child")
        if any(overlap(a, b) for i, a in enumerate(self.constraints) for b in self.constraints[i + 1 :]):
            raise ConfigurationError("coverage counts each covered arc once: the constraints must not overlap")

    def _loss(self, stats: Tensor, targets: Tensor) -> Tensor:
        """The penalty of the share of the batch's words whose arc some rule covers."""
        k = len(self.constraints)
        words = stats[2 * k].clamp_min(1).reshape(1)
        share = stats[:k].sum() / words
        return self._penalty(share, share.new_ones(1), share.new_full((1,), self.coverage), words, share.new_zeros(1))
