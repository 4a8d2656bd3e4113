"""Supervised UPOS tagging: the cross-entropy of a tagging head's logits against the gold tags."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .conventions import IGNORE_INDEX, UPOS_TAGS
from .objective import Objective, ObjectiveContext, Scores, TreeBatch


class TagLikelihood(Objective):
    """Mean negative log-likelihood of the gold UPOS tag of each tagged word.

    Reads ``scores.tags`` ``(B, N+1, T)`` (a model trained with this term has a tagging
    head) and ``batch.upos`` ``(B, N+1)`` ids into the vocabulary of
    :attr:`ObjectiveContext.tags`; ids that are not one of the 17 UD tags (padding, ``_``)
    are ignored. 0, not NaN, for a batch without a tagged word.
    """

    needs_gold = True
    needs_tag_scores = True

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("is_tag", torch.zeros(0, dtype=torch.bool), persistent=False)

    def setup(self, context: ObjectiveContext) -> None:
        super().setup(context)
        self.is_tag = torch.tensor([tag in UPOS_TAGS for tag in context.tags], device=self.is_tag.device)

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        if scores.tags is None:
            raise ValueError("TagLikelihood needs tag scores: a model with a tagging head")
        if len(self.is_tag) == 0:
            raise RuntimeError("TagLikelihood has no tag vocabulary: call setup() with the model's context")
        targets = batch.upos.masked_fill(~self.is_tag.to(batch.upos.device)[batch.upos], IGNORE_INDEX).flatten()
        total = F.cross_entropy(scores.tags.flatten(0, 1), targets, ignore_index=IGNORE_INDEX, reduction="sum")
        return total / (targets != IGNORE_INDEX).sum().clamp_min(1)
