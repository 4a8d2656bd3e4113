"""Encoder adaptation (parser.adapt): MLM training lowers the MLM loss, masks whole words,
resumes exactly, and writes a directory the parser's encoder loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from parser.adapt import MaskedLanguageModel, TextDataModule, main
from parser.training.callbacks import ResumeRandomState
from parser.network.encoder import WordEncoder

STEPS, SAVED_AT = 6, 3


@pytest.fixture()
def treebank(ud_dir: Path, tmp_path: Path) -> Path:
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:40]
    path = tmp_path / "small.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def _fit(encoder, treebank: Path, root: Path, steps: int, lr: float = 1e-3, ckpt_path: Path | None = None,
         labeled_size: int | None = None) -> MaskedLanguageModel:
    seed_everything(0)
    data = TextDataModule(treebank=None, train=str(treebank), dev=str(treebank), batch_tokens=150, seed=3,
                          labeled_size=labeled_size)
    model = MaskedLanguageModel(str(encoder), lr=lr, head_lr=lr, warmup_steps=1, mask_seed=5)
    every = ModelCheckpoint(dirpath=root, filename="{step}", every_n_train_steps=SAVED_AT, save_top_k=-1)
    trainer = Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0, num_sanity_val_steps=0, callbacks=[every, ResumeRandomState()])
    trainer.fit(model, data, ckpt_path=ckpt_path)
    assert trainer.global_step == steps
    return model


def _dev_loss(model: MaskedLanguageModel, data: TextDataModule) -> float:
    model.eval()
    with torch.no_grad():
        losses = [model.loss(batch, model._generator(1, i)).item() for i, batch in enumerate(data.val_dataloader())]
    return sum(losses) / len(losses)


def test_a_few_mlm_steps_lower_the_mlm_loss(tiny_bert_dir, treebank, tmp_path):
    data = TextDataModule(treebank=None, train=str(treebank), dev=str(treebank), batch_tokens=150)
    data.setup("fit")
    seed_everything(0)
    before = _dev_loss(MaskedLanguageModel(str(tiny_bert_dir), mask_seed=5), data)
    after = _dev_loss(_fit(tiny_bert_dir, treebank, tmp_path, steps=30, lr=1e-2), data)
    assert after < before - 1.0, (before, after)


def test_masks_cover_whole_words_and_never_special_tokens(tiny_bert_dir):
    model = MaskedLanguageModel(str(tiny_bert_dir), mask_probability=0.5)
    words = [["unbelievably", "long", "antidisestablishmentarianism"], ["a", "b"], ["tokenization"]]
    sub = model.subwords(words)
    for seed in range(20):
        ids, target = model.mask(sub, torch.Generator().manual_seed(seed))
        assert target.any()
        assert not target[sub.column_word < 0].any(), "special tokens and padding are never predicted"
        for word in sub.column_word.unique().tolist():
            if word >= 0:
                chosen = target[sub.column_word == word]
                assert chosen.all() or not chosen.any(), "a word is masked whole or not at all"
        assert torch.equal(ids[~target], sub.input_ids[~target])
        assert (ids[target] == model.tokenizer.mask_token_id).any() or target.sum() < 5


def test_the_text_is_the_whole_training_file_plus_the_unlabeled_files(tiny_bert_dir, treebank, tmp_path):
    extra = tmp_path / "raw.txt"
    extra.write_text("one more sentence\n", encoding="utf-8")
    data = TextDataModule(treebank=None, train=str(treebank), dev=str(treebank), labeled_size=10, unlabeled=str(extra))
    data.setup("fit")
    assert [(s.path, s.first_line) for s in data.unlabeled_sources] == [(str(treebank), 1), (str(extra), 1)]


def test_resume_from_a_mid_run_checkpoint_is_exact(tiny_bert_dir, treebank, tmp_path):
    straight = _fit(tiny_bert_dir, treebank, tmp_path / "straight", STEPS, lr=1e-4)
    checkpoint = tmp_path / "straight" / f"step={SAVED_AT}.ckpt"
    assert torch.load(checkpoint, weights_only=False)["global_step"] == SAVED_AT
    resumed = _fit(tiny_bert_dir, treebank, tmp_path / "resumed", STEPS, lr=1e-4, ckpt_path=checkpoint)
    start = MaskedLanguageModel(str(tiny_bert_dir))
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming"
    assert not torch.equal(straight.model.get_input_embeddings().weight, start.model.get_input_embeddings().weight), \
        "the subword embeddings are trained"


def test_the_command_writes_an_encoder_the_parser_loads(tiny_bert_dir, treebank, tmp_path):
    output = tmp_path / "adapted"
    main(["--model.encoder", str(tiny_bert_dir), "--data.train", str(treebank), "--data.dev", str(treebank),
          "--data.batch_tokens", "150", "--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path / "runs"),
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--output", str(output)])
    assert (tmp_path / "runs" / "adapt" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    adapted = MaskedLanguageModel(str(output))  # its head is the trained one, not a fresh one
    encoder = WordEncoder(str(output))
    for name, weight in encoder.model.state_dict().items():
        assert torch.equal(weight, adapted.model.base_model.state_dict()[name]), name
    original = WordEncoder(str(tiny_bert_dir))
    assert not torch.equal(encoder.model.embeddings.word_embeddings.weight, original.model.embeddings.word_embeddings.weight)


def test_adaptation_without_max_steps_is_one_error_line(tiny_bert_dir, treebank, tmp_path, capsys):
    from parser.cli import run_reporting_errors

    with pytest.raises(SystemExit) as exit_info:
        run_reporting_errors(lambda: main([
            "--model.encoder", str(tiny_bert_dir), "--data.train", str(treebank), "--data.dev", str(treebank),
            "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
            "--output", str(tmp_path / "out")]))
    assert exit_info.value.code == 2
    assert "error: adaptation needs --trainer.max_steps" in capsys.readouterr().err
