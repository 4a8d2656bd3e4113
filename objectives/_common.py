"""Small tensor helpers shared by the training objectives."""

from __future__ import annotations

import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)


def full_precision(scores: Tensor) -> Tensor:
    """``scores`` in float32 if it is half precision (autocast output), else unchanged.

    Sums of many bf16 scores (a tree's score, a log-partition) are too coarse to train on.
    """
    return scores.float() if scores.dtype in _HALF else scores


def gold_label_logits(labels: Tensor, heads: Tensor) -> Tensor:
    """The label logits of each word's gold arc: ``(B, N+1, N+1, L)``, ``(B, N+1)`` -> ``(B, N+1, L)``.

    Row ``m`` holds ``labels[heads[m], m, :]``; position 0 and padding read the (ignored)
    arc 0 -> m.
    """
    index = heads[:, None, :, None].expand(-1, 1, -1, labels.shape[-1])
    return labels.gather(1, index).squeeze(1)
