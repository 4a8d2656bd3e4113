"""Knowledge distillation over trees: KL divergence between teacher and student tree distributions."""

from __future__ import annotations

from torch import Tensor

from ._common import full_precision
from .conventions import ConfigurationError
from .expectations import kl_divergence
from .objective import Objective, Scores, TreeBatch


class Distillation(Objective):
    """Exact KL between the teacher's and the student's tree distributions, per word.

    ``loss = sum_b KL(teacher_b || student_b) / lengths.sum()`` (``reverse=True``:
    ``KL(student || teacher)``, mode-seeking). The teacher's scores are detached. It is 0
    when teacher and student scores are equal.

    ``labeled=True`` compares distributions over labeled trees when both carry label
    scores over the same number of labels: the labeled arc log-weight is
    ``arcs[h, m] + log_softmax(labels[h, m])[l]``, i.e. the tree distribution of the arcs
    times a label softmax per arc (the parser's decoding model), so the KL is the tree KL
    plus the expected per-arc label KLs. Otherwise (either side without labels, or label
    sets of different sizes) only the arc scores are compared.

    ``temperature`` ``T`` tempers the teacher's distribution before the comparison:
    ``p_T(d) ~ p(d)^(1/T)`` (its arc, or labeled arc, log-weights divided by ``T``), so
    ``T > 1`` softens an over-confident teacher and ``T < 1`` sharpens it; the student
    stays at temperature 1 (``benchmarks.calibration`` measures the ``T`` at which a
    parser's distribution best fits gold trees).

    Args:
        reverse: ``KL(student || teacher)`` instead of ``KL(teacher || student)``.
        labeled: include the label distributions when possible (see above).
        temperature: the teacher's temperature, > 0.
    """

    needs_teacher = True

    def __init__(self, reverse: bool = False, labeled: bool = False, temperature: float = 1.0) -> None:
        super().__init__()
        if not temperature > 0:
            raise ConfigurationError(f"Distillation: temperature must be > 0, got {temperature}")
        self.reverse = reverse
        self.labeled = labeled
        self.temperature = temperature

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        """Scalar loss; ``scores`` and ``teacher`` hold arcs ``(B, N+1, N+1)`` (labels ``(B, N+1, N+1, L)``)."""
        if teacher is None:
            raise ValueError("Distillation needs the teacher's scores")
        labeled = (
            self.labeled
            and scores.labels is not None
            and teacher.labels is not None
            and scores.labels.shape[-1] == teacher.labels.shape[-1]
        )
        student = _tree_scores(scores, labeled)
        target = _tree_scores(teacher, labeled).detach() / self.temperature
        p, q = (student, target) if self.reverse else (target, student)
        return kl_divergence(p, q, batch.lengths, self.multiroot, validate=False).sum() / batch.lengths.sum()


def _tree_scores(scores: Scores, labeled: bool) -> Tensor:
    """Arc log-weights ``(B, N+1, N+1)``, or labeled ones ``(B, N+1, N+1, L)`` with label log-softmax."""
    arcs = full_precision(scores.arcs)
    if not labeled:
        return arcs
    return arcs[..., None] + full_precision(scores.labels).log_softmax(-1)
