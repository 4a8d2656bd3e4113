"""A researcher's new objective is one class and a YAML terms list: defined here, in the test
file, it trains from the command line beside the likelihood, and no file of ``parser/`` names it."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch
from torch import Tensor

import train
from objectives import TreeCRF
from objectives.objective import Objective, ObjectiveContext, Scores, TreeBatch

REPO = Path(train.__file__).resolve().parent


class HeadEntropy(Objective):
    """Mean entropy (nats) of each word's head marginals: a local cousin of the tree entropy
    regulariser, pushing every word towards one head on unlabeled text."""

    def setup(self, context: ObjectiveContext) -> None:
        super().setup(context)
        self.stages = [*getattr(self, "stages", []), context.stage]

    def forward(self, scores: Scores, batch: TreeBatch, teacher: Scores | None = None, step: int = 0) -> Tensor:
        mu = TreeCRF(scores.arcs.double(), batch.lengths, self.multiroot).marginals  # (B, N+1, N+1), columns sum to 1
        entropy = -(mu * mu.clamp_min(1e-30).log()).sum(1)  # (B, N+1), 0 at the root and on padding
        return entropy.sum() / batch.lengths.sum()


def test_head_entropy_is_a_mean_of_per_word_entropies():
    arcs = torch.randn(1, 4, 4, dtype=torch.float64)
    objective = HeadEntropy()
    objective.setup(ObjectiveContext(stage="fit"))
    mu = TreeCRF(arcs, torch.tensor([3])).marginals[0]
    expected = sum(torch.distributions.Categorical(probs=mu[:, m]).entropy() for m in (1, 2, 3)) / 3
    torch.testing.assert_close(objective(Scores(arcs), _Lengths(torch.tensor([3]))), expected)


class _Lengths:
    def __init__(self, lengths: Tensor):
        self.lengths = lengths


def test_a_new_objective_trains_from_a_yaml_terms_list(tiny_bert_dir, ud_dir, tmp_path):
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:30]
    small = tmp_path / "small.conllu"
    small.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    config = tmp_path / "head_entropy.yaml"
    config.write_text(f"""
data:
  train: {small}
  dev: {small}
  treebank: null
  labeled_size: 10          # the other 20 sentences are the unlabeled text
  batch_tokens: 300
model:
  encoder: {tiny_bert_dir}
  heads: {{arc_size: 32, label_size: 16}}
  terms:
    - objective: objectives.Likelihood
    - objective: {__name__}.HeadEntropy
      data: unlabeled
      weight: {{value: 0.5, warmup: 2}}
trainer:
  max_steps: 3
  default_root_dir: {tmp_path / "runs"}
""", encoding="utf-8")
    cli = train.main(["fit", "--config", str(config)])
    new = next(term for term in cli.model.terms.terms if type(term.objective).__name__ == "HeadEntropy")
    assert new.data == "unlabeled" and new.objective.stages[0] == "fit" and cli.trainer.global_step == 3
    assert cli.datamodule.has_unlabeled
    rows = list(csv.DictReader((tmp_path / "runs" / "head_entropy" / "version_0" / "metrics.csv").open()))
    logged = [float(r["train/head_entropy"]) for r in rows if r.get("train/head_entropy")]
    weights = [float(r["train/weight/head_entropy"]) for r in rows if r.get("train/weight/head_entropy")]
    assert logged and all(math.isfinite(v) and v > 0 for v in logged)
    assert weights == [0.5]  # logged at the run's last step, 2: past the 2-step warm-up
    named = [p for p in (REPO / "parser").rglob("*.py") if "HeadEntropy" in p.read_text(encoding="utf-8")]
    assert not named
