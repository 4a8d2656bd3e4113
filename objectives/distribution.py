"""``TreeCRF``: the edge-factored distribution over spanning trees as a torch distribution."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints, register_kl
from torch.distributions.utils import lazy_property

from . import expectations
from .arborescence import best_labels, kbest_arborescences, maximum_arborescence
from .conventions import IGNORE_INDEX, word_mask
from .mtt import (
    Prepared,
    check_arguments,
    log_partition_and_marginals_from,
    no_autocast,
    prepare,
    sum_labels,
)
from .sampling import sample_trees


class TreeCRF(Distribution):
    """Distribution over the (single- or multi-root) spanning trees of each sentence.

    Args:
        scores: ``(B, N+1, N+1)`` arc log-weights ``scores[b, h, m]`` for h -> m, or
            ``(B, N+1, N+1, L)`` for labeled arcs.
        lengths: ``(B,)`` words per sentence; the rest is padding.
        multiroot: ``False`` (default) for single-root trees, ``True`` for multi-root.
        validate_args: check shapes, lengths and scores (NaN/+inf on arcs) on construction
            (host syncs); ``None`` follows ``torch.distributions.Distribution``'s default.

    The Laplacian is factorised once, on first use, and every quantity (``log_partition``,
    ``marginals``, ``log_prob``, ``entropy``, ``expectation``, ``cross_entropy``,
    ``kl_divergence``, T2) reads that factorisation. A value is a head vector ``(B, N+1)``
    (``heads[b, m]`` is the head of word m; 0 at position 0 and on padding); with labeled
    scores, trees come as ``(heads, labels)`` (labels ``-100`` at position 0 and on
    padding). ``argmax``, ``mbr``, ``sample`` and ``kbest`` run batched on the scores'
    device. Example::

        >>> crf = TreeCRF(torch.randn(2, 4, 4), torch.tensor([3, 2]))
        >>> crf.marginals.shape, crf.entropy().shape
        (torch.Size([2, 4, 4]), torch.Size([2]))
        >>> crf.argmax().shape, crf.sample(5).shape, crf.kbest(3)[0].shape
        (torch.Size([2, 4]), torch.Size([5, 2, 4]), torch.Size([3, 2, 4]))
    """

    arg_constraints = {}
    has_rsample = False
    support = constraints.independent(constraints.nonnegative_integer, 1)

    def __init__(self, scores: Tensor, lengths: Tensor, multiroot: bool = False, validate_args: bool | None = None):
        self.scores = scores
        self.lengths = torch.as_tensor(lengths, device=scores.device)
        self.multiroot = multiroot
        if Distribution._validate_args if validate_args is None else validate_args:
            check_arguments(scores, self.lengths)
        super().__init__(batch_shape=scores.shape[:1], event_shape=scores.shape[1:2], validate_args=False)

    @property
    def labeled(self) -> bool:
        return self.scores.dim() == 4

    @lazy_property
    def prepared(self) -> Prepared:
        """The masked scores and their one :class:`~objectives.mtt.Factorisation`."""
        with no_autocast(self.scores.device):
            return prepare(self.scores, self.lengths, self.multiroot, validate=False)

    @lazy_property
    def _inference(self) -> tuple[Tensor, Tensor]:
        with no_autocast(self.scores.device):
            return log_partition_and_marginals_from(self.prepared)

    @property
    def log_partition(self) -> Tensor:
        """``log Z``: ``(B,)``."""
        return self._inference[0]

    @property
    def marginals(self) -> Tensor:
        """Arc (or arc-label) marginals, the shape of ``scores``."""
        return self._inference[1]

    def log_prob(self, heads: Tensor, labels: Tensor | None = None) -> Tensor:
        """``log p(tree)``: ``(*S, B)`` for heads ``(*S, B, N+1)`` (e.g. from :meth:`sample` or
        :meth:`kbest`). ``labels`` (the shape of ``heads``) is required for labeled scores."""
        if self.labeled != (labels is not None):
            raise ValueError("labels must be given exactly when the scores are labeled")
        if heads.dim() > 2:
            trees = heads.flatten(0, -3)
            tree_labels = labels.flatten(0, -3) if self.labeled else [None] * len(trees)
            return torch.stack([self.log_prob(h, l) for h, l in zip(trees, tree_labels)]).view(heads.shape[:-1])
        words = word_mask(self.lengths, self.scores.shape[1] - 1)  # (B, N+1)
        heads = heads.masked_fill(~words, 0)
        index = heads[:, None, :, None].expand(-1, 1, -1, self.scores.shape[-1]) if self.labeled else heads[:, None, :]
        chosen = self.scores.gather(1, index).squeeze(1)  # (B, N+1[, L]): scores of the chosen arcs
        if self.labeled:
            chosen = chosen.gather(-1, labels.masked_fill(~words, 0)[:, :, None]).squeeze(-1)
        total = chosen.masked_fill(~words, 0).sum(-1)
        return total.to(self.log_partition.dtype) - self.log_partition

    def argmax(self) -> Tensor | tuple[Tensor, Tensor]:
        """The most probable tree of each sentence: heads ``(B, N+1)`` (labeled: and each
        arc's best label), exact (:func:`~objectives.arborescence.maximum_arborescence`).
        Where every tree scores ``-inf``, a tree with as few ``-inf`` arcs as possible."""
        return _best_tree(self.scores.detach(), self.lengths, self.multiroot)

    def mbr(self) -> Tensor | tuple[Tensor, Tensor]:
        """The tree of highest expected arc (labeled: arc-label) accuracy under this
        distribution, the maximum spanning tree of the tree set over the marginals:
        heads ``(B, N+1)`` (labeled: with labels ``(B, N+1)``)."""
        return _best_tree(self.marginals.detach(), self.lengths, self.multiroot)

    def sample(self, sample_shape: torch.Size | tuple[int, ...] = torch.Size(),
               generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """Exact independent samples: heads ``(*sample_shape, B, N+1)`` (labeled: with labels
        drawn from each chosen arc's label softmax), from ``generator`` or the global RNG
        (:func:`~objectives.sampling.sample_trees`). Every sentence needs a tree of finite
        score."""
        shape = torch.Size(sample_shape if isinstance(sample_shape, (tuple, list)) else (sample_shape,))
        count = shape.numel()
        empty = (self.log_partition == float("-inf")).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"sample: sentences {empty} of the batch have no tree of finite score")
        with torch.no_grad():
            filled, arcs = self._arc_scores()
            heads = sample_trees(arcs, self.lengths, count, self.multiroot, generator)  # (count, B, N+1)
            heads = heads.view(*shape, *heads.shape[1:])
            if not self.labeled:
                return heads
            flat = heads.reshape(-1, *heads.shape[-2:])
            labels = torch.stack([_sampled_labels(filled, h, self.lengths, generator) for h in flat])
            return heads, labels.view(heads.shape)

    def kbest(self, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` most probable trees of each sentence, best first: heads ``(k, B, N+1)``
        and their log-probabilities ``(k, B)``, exact
        (:func:`~objectives.arborescence.kbest_arborescences`). A sentence with fewer
        than ``k`` trees of finite score has heads 0 and ``-inf`` in the remaining rows.
        Unlabeled scores only."""
        if self.labeled:
            raise ValueError("kbest needs unlabeled arc scores (B, N+1, N+1)")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        heads, values = kbest_arborescences(self.scores, self.lengths, k, self.multiroot)
        log_probs = values.to(self.log_partition.dtype) - self.log_partition
        return heads, log_probs.masked_fill(values == float("-inf"), float("-inf"))

    def entropy(self) -> Tensor:
        """Shannon entropy in nats: ``(B,)``."""
        return expectations.entropy_from(self.prepared)

    def expectation(self, r: Tensor) -> Tensor:
        """T1 ``E[r(d)]``: ``(B, R)`` for ``r`` of shape ``scores.shape + (R,)``."""
        return expectations.expectation_from(self.prepared, r)

    def second_order(self, r: Tensor, s: Tensor) -> Tensor:
        """T2 ``E[r(d) s(d)^T]``: ``(B, R, S)``."""
        return expectations.second_order_from(self.prepared, r, s)

    def covariance(self, r: Tensor, s: Tensor) -> Tensor:
        """T2 ``Cov(r(d), s(d))``: ``(B, R, S)``."""
        return expectations.covariance_from(self.prepared, r, s)

    def cross_entropy(self, other: "TreeCRF") -> Tensor:
        """``-E_self[log other(d)]``: ``(B,)``."""
        return expectations.cross_entropy_terms(self.prepared, other.scores, other.log_partition)[0]

    def kl_divergence(self, other: "TreeCRF") -> Tensor:
        """``KL(self || other)``: ``(B,)``."""
        return expectations.kl_from(self.prepared, other.scores, other.log_partition)

    def renyi_entropy(self, alpha: float) -> Tensor:
        """Renyi entropy of order ``alpha`` in nats: ``(B,)``."""
        if alpha == 1:
            return self.entropy()
        return expectations.renyi_from(self.prepared, self.scores, self.lengths, alpha, self.multiroot)


    def _arc_scores(self) -> tuple[Tensor, Tensor]:
        """(labeled scores with arcs of no label at 0, or None; arc scores ``(B, N+1, N+1)``:
        logsumexp over the labels)."""
        scores = self.scores.detach()
        return sum_labels(scores) if self.labeled else (None, scores)


@register_kl(TreeCRF, TreeCRF)
def _kl_tree_crf(p: TreeCRF, q: TreeCRF) -> Tensor:
    if p.multiroot != q.multiroot or not torch.equal(p.lengths, q.lengths):
        raise ValueError("KL needs two TreeCRFs over the same tree set (lengths and multiroot)")
    return p.kl_divergence(q)


def _sampled_labels(label_scores: Tensor, heads: Tensor, lengths: Tensor, generator: torch.Generator | None) -> Tensor:
    """Labels ``(B, N+1)`` of the arcs ``heads`` ``(B, N+1)``, each drawn from its arc's label
    softmax (``label_scores`` ``(B, N+1, N+1, L)``); ``-100`` at position 0 and on padding."""
    batch, size, _, num_labels = label_scores.shape
    index = heads[:, None, :, None].expand(batch, 1, size, num_labels)
    probabilities = label_scores.gather(1, index).squeeze(1).softmax(-1).nan_to_num(1.0 / num_labels)
    labels = torch.multinomial(probabilities.reshape(-1, num_labels), 1, generator=generator).view(batch, size)
    return labels.masked_fill(~word_mask(lengths, size - 1), IGNORE_INDEX)


def _best_tree(scores: Tensor, lengths: Tensor, multiroot: bool) -> Tensor | tuple[Tensor, Tensor]:
    """Heads of the best tree over ``scores`` ``(B, N+1, N+1)``; for labeled scores
    ``(B, N+1, N+1, L)`` over each arc's best label, with those labels."""
    if scores.dim() == 3:
        return maximum_arborescence(scores, lengths, multiroot)
    heads = maximum_arborescence(scores.amax(-1), lengths, multiroot)
    return heads, best_labels(scores, heads, lengths)
