"""Bad input ends every command with one ``error:`` line naming the file (and line), exit
status 2 and no traceback; ``--debug`` shows the traceback."""

from __future__ import annotations

import gzip
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch import Callback

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("TREEEXP_DEBUG", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    good = tmp_path / "good.conllu"
    good.write_text(SENTENCE, encoding="utf-8")
    latin1 = tmp_path / "latin1.conllu"
    latin1.write_bytes(SENTENCE.replace("Hi", "Caf\u00e9").encode("latin-1"))
    gz = tmp_path / "packed.conllu"
    gz.write_bytes(gzip.compress(SENTENCE.encode()))
    other = tmp_path / "other.conllu"
    other.write_text(SENTENCE.replace("Hi", "Ho"), encoding="utf-8")
    not_ckpt = tmp_path / "notes.ckpt"
    not_ckpt.write_text("no model here\n")
    return {"good": good, "latin1": latin1, "gz": gz, "other": other, "not_ckpt": not_ckpt}


def _in_process(main, argv: list[str], capsys) -> str:
    """``main(argv)`` as its command runs it: the one ``error:`` line it ends with (exit status 2)."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert stopped.value.code == 2 and len(lines) == 1, err
    return lines[0]


def test_evaluate_reports_bad_files_in_one_line(files, tmp_path, capsys, monkeypatch):
    """``python -m parser.evaluate`` itself once (exit status 2, one line, no traceback); the
    other bad files through its ``main``, as the command runs it; ``--debug`` re-raises."""
    from parser import evaluate

    _one_error_line(_run("-m", "parser.evaluate", str(files["good"]), str(files["latin1"]), cwd=tmp_path),
                    "latin1.conllu:1", "not UTF-8")
    for bad, fragments in (("gz", ["packed.conllu:1", "gzip"]), ("other", ["other.conllu:1: the text reads 'Ho", "good.conllu:1 reads 'Hi"])):
        line = _in_process(evaluate.main, [str(files["good"]), str(files[bad])], capsys)
        assert all(fragment in line for fragment in fragments), line
    assert "missing.conllu" in _in_process(evaluate.main, [str(files["good"]), str(tmp_path / "missing.conllu")], capsys)
    argv = [str(files["good"]), str(files["latin1"]), "--debug"]
    monkeypatch.setattr(sys, "argv", ["evaluate.py", *argv])  # parser.cli reads --debug from the command line
    with pytest.raises(Exception, match="not UTF-8") as raised:
        evaluate.main(argv)
    assert not isinstance(raised.value, SystemExit)


def test_predict_checks_inputs_before_loading_a_model(files, tmp_path, capsys):
    from parser import predict

    _one_error_line(_run("-m", "parser.predict", str(files["not_ckpt"]), str(files["good"]), "out.conllu", cwd=tmp_path),
                    "notes.ckpt: not a checkpoint")
    assert "missing.ckpt" in _in_process(predict.main, [str(tmp_path / "missing.ckpt"), str(files["good"]),
                                                        str(tmp_path / "out.conllu")], capsys)


def _train(argv: list[str]) -> None:
    """``train.main(argv)`` as ``python train.py`` runs it (parser.cli's error handling)."""
    import train
    from parser.cli import run_reporting_errors

    run_reporting_errors(lambda: train.main(argv))


def test_train_reports_a_missing_file_in_one_line(tmp_path, capsys):
    """In this process, as the command runs it (the command line itself: the test with --debug below)."""
    line = _in_process(_train, ["fit", "--config", str(REPO / "configs/likelihood.yaml"), "--data.treebank", "null",
                                "--data.train", str(tmp_path / "nope.conllu"),
                                "--trainer.default_root_dir", str(tmp_path / "runs")], capsys)
    assert "nope.conllu" in line, line


def test_train_reports_a_setting_lightning_rejects_in_one_line(tmp_path, capsys):
    line = _in_process(_train, ["fit", "--config", str(REPO / "configs/likelihood.yaml"), "--trainer.fast_dev_run", "-1",
                                "--trainer.default_root_dir", str(tmp_path / "runs")], capsys)
    assert "fast_dev_run=-1" in line, line


@pytest.fixture()
def small(ud_dir: Path, tmp_path: Path) -> dict[str, Path]:
    """20 EWT sentences (train and dev) and the same as plain text."""
    blocks = (ud_dir / "UD_English-EWT/en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:20]
    conllu = tmp_path / "small.conllu"
    conllu.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    words = [[line.split("\t")[1] for line in block.splitlines() if line and line.split("\t")[0].isdigit()]
             for block in blocks]
    text = tmp_path / "text.txt"
    text.write_text("".join(" ".join(w) + "\n" for w in words), encoding="utf-8")
    return {"conllu": conllu, "text": text}


def _fit_args(tiny_bert_dir: Path, small: dict[str, Path], config: str) -> list[str]:
    """A shipped config on the tiny encoder and 20 sentences, for one step."""
    return ["--config", str(REPO / "configs" / config), "--model.encoder", str(tiny_bert_dir), "--data.treebank", "null",
            "--data.train", str(small["conllu"]), "--data.dev", str(small["conllu"]), "--trainer.max_steps", "1",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _fit(tiny_bert_dir: Path, small: dict[str, Path], config: str, *args: str) -> subprocess.CompletedProcess:
    """``python train.py fit`` with ``_fit_args`` and ``args``."""
    return _run(str(REPO / "train.py"), "fit", *_fit_args(tiny_bert_dir, small, config), *args, cwd=small["conllu"].parent)


# configs/ge.yaml's terms without its tagging term
GE_WITHOUT_TAGGER = ('--model.terms=[{"objective": "objectives.Likelihood"}, {"objective": {"class_path": '
                     '"objectives.GeneralizedExpectation", "init_args": {"constraints": "tag_pairs", "targets_from": '
                     '"labeled"}}, "data": "unlabeled"}]')
CONFIGURATIONS_THAT_CANNOT_WORK = {  # case: (config, overrides, what the error line says)
    "ge_on_text_without_tagger": ("ge.yaml", [GE_WITHOUT_TAGGER, "--data.unlabeled", "TEXT"],
                                  ["GeneralizedExpectation needs UPOS tags", "objectives.TagLikelihood"]),
    "kl_without_teacher": ("distill.yaml", [], ["Distillation needs a teacher"]),
    "teacher_of_other_trees": ("distill.yaml", ["--model.teacher", "TEACHER"], ["multi-root trees", "--model.decoding.multiroot"]),
    "bad_schedule": ("entropy.yaml", ['--model.terms+={"objective": "objectives.EntropyRegularizer", "data": "unlabeled", '
                                      '"weight": {"value": 0.1, "decay": "sometimes"}}'], ["sometimes"]),
    "term_on_other_data": ("likelihood.yaml", ['--model.terms+={"objective": "objectives.EntropyRegularizer", "data": "gold"}'],
                           ["model.terms", "'labeled', 'unlabeled'", "Got value: gold"]),
    "bad_last_checkpoint_minutes": ("likelihood.yaml", ["--last_checkpoint_minutes", "-1"],
                                    ["last_checkpoint_minutes must be"]),
    "gold_objective_on_unlabeled": ("likelihood.yaml", ['--model.terms+={"objective": "objectives.Risk", "data": "unlabeled"}',
                                                        "--data.unlabeled", "TEXT"], ["Risk needs gold trees", "data: labeled"]),
    "no_ge_target": ("ge.yaml", ['--model.terms=[{"objective": {"class_path": "objectives.GeneralizedExpectation", "init_args": '
                                 '{"constraints": "tag_pairs", "targets_from": "labeled", "min_count": 100000}}}]'],
                     ["no constraint is counted over 100000 or more"]),
    "unknown_objective": ("likelihood.yaml", ["--objective", "gee"], ["--objective must be one of", "not 'gee'"]),
    "no_encoder_directory": ("likelihood.yaml", ["--model.encoder", "NOWHERE"], ["nowhere: no such encoder directory"]),
}


@pytest.mark.parametrize("case", sorted(CONFIGURATIONS_THAT_CANNOT_WORK))
def test_train_reports_a_configuration_that_cannot_work_in_one_line(case, tiny_bert_dir, small, tmp_path, capsys):
    """Settings that cannot work, found while the run is built or set up: one ``error:``
    line and exit status 2, as ``python train.py`` reports them (run in this process)."""
    import train
    from parser.cli import run_reporting_errors

    config, overrides, fragments = CONFIGURATIONS_THAT_CANNOT_WORK[case]
    if case == "teacher_of_other_trees":  # a parser of multi-root trees teaching a single-root one
        train.main(["fit", *_fit_args(tiny_bert_dir, small, "likelihood.yaml"), "--model.decoding.multiroot", "true",
                    "--trainer.default_root_dir", str(tmp_path / "teacher")])
    replace = {"TEXT": str(small["text"]), "TEACHER": str(next((tmp_path / "teacher").rglob("last.ckpt"), "")),
               "NOWHERE": str(tmp_path / "nowhere")}
    args = ["fit", *_fit_args(tiny_bert_dir, small, config), "--trainer.default_root_dir", str(tmp_path / "runs"),
            *(replace.get(arg, arg) for arg in overrides)]
    with pytest.raises(SystemExit) as stopped:
        run_reporting_errors(lambda: train.main(args))
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and all(fragment in lines[0] for fragment in fragments), lines


def test_train_shows_the_traceback_of_a_setup_error_with_debug(tiny_bert_dir, small, tmp_path, monkeypatch):
    """The command line itself (a process): GE on plain text without a tagger is one line; with
    --debug the error itself (train.command_line on the same command line in this process)."""
    import train
    from objectives.conventions import ConfigurationError

    args = [GE_WITHOUT_TAGGER, "--data.unlabeled", str(small["text"])]
    _one_error_line(_fit(tiny_bert_dir, small, "ge.yaml", *args), "needs UPOS tags")
    monkeypatch.setenv("TREEEXP_DEBUG", "0")  # command_line sets it for --debug; put back after the test
    monkeypatch.setattr(sys, "argv", ["train.py", "fit", *_fit_args(tiny_bert_dir, small, "ge.yaml"), *args, "--debug",
                                      "--trainer.default_root_dir", str(tmp_path / "runs")])
    with pytest.raises(ConfigurationError, match="needs UPOS tags"):
        train.command_line()


@pytest.fixture()
def damaged_checkpoints(tmp_path: Path) -> dict[str, Path]:
    """A checkpoint cut short (as by a kill during a save) and one whose archive reads but
    whose pickled data is garbage."""
    import torch

    whole = tmp_path / "whole.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "hyper_parameters": {"labels": ["root"]}}, whole)
    content = whole.read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(content[: len(content) // 2])
    pickle_start = content.index(b"\x80\x02")  # the protocol 2 pickle that holds the dictionary
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(content[:pickle_start] + b"X" * 20 + content[pickle_start + 20 :])
    return {"truncated": truncated, "garbage": garbage}


COMMANDS_GIVEN_A_CHECKPOINT = {  # command: its arguments, CKPT where the checkpoint goes
    "fit --ckpt_path": ["train", "fit", "likelihood.yaml", "--ckpt_path", "CKPT"],
    "test --ckpt_path": ["train", "test", "likelihood.yaml", "--ckpt_path", "CKPT"],
    "fit --model.teacher": ["train", "fit", "distill.yaml", "--model.teacher", "CKPT"],
    "fit --model.init": ["train", "fit", "likelihood.yaml", "--model.init", "CKPT"],
    "parser.predict": ["parser.predict", "CKPT", "CONLLU", "OUT"],
    "parser.evaluate": ["parser.evaluate", "CONLLU", "CKPT"],
}


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("command", sorted(COMMANDS_GIVEN_A_CHECKPOINT))
def test_a_damaged_checkpoint_is_one_line_wherever_it_is_given(command, damage, damaged_checkpoints, tiny_bert_dir,
                                                               small, tmp_path, capsys):
    """Run in this process, as the commands run."""
    import train
    from parser import evaluate, predict
    from parser.cli import run_reporting_errors

    program, *args = COMMANDS_GIVEN_A_CHECKPOINT[command]
    replace = {"CKPT": str(damaged_checkpoints[damage]), "CONLLU": str(small["conllu"]), "OUT": str(tmp_path / "out")}
    args = [replace.get(arg, arg) for arg in args]
    with pytest.raises(SystemExit) as stopped:
        if program == "train":
            subcommand, config, *rest = args
            run_reporting_errors(lambda: train.main([subcommand, *_fit_args(tiny_bert_dir, small, config), *rest,
                                                     "--trainer.default_root_dir", str(tmp_path / "runs")]))
        else:
            {"parser.predict": predict, "parser.evaluate": evaluate}[program].main(args)
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and f"{damage}.ckpt" in lines[0], lines


class RemoveAfter(Callback):
    """After training step ``step``, delete the file ``path`` (an unlabeled corpus, say)."""

    def __init__(self, step: int, path: str):
        self.step, self.path = step, Path(path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self.path.unlink()


def _fit_losing_an_unlabeled_file(tiny_bert_dir, small, tmp_path, on_bad: str, workers: int = 0):
    """An entropy run on two 2-sentence text files (a pass: about a step), one deleted
    after step 2, for 6 steps: ``train.main`` as ``python train.py`` runs it."""
    import train
    from parser.cli import run_reporting_errors

    lines = small["text"].read_text(encoding="utf-8").splitlines()
    kept, lost = tmp_path / "kept.txt", tmp_path / "lost.txt"
    kept.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    lost.write_text("\n".join(lines[2:4]) + "\n", encoding="utf-8")
    args = ["fit", *_fit_args(tiny_bert_dir, small, "entropy.yaml"), "--trainer.max_steps", "6",
            "--trainer.limit_val_batches", "1", "--data.unlabeled", f"[{kept}, {lost}]", "--data.shuffle_buffer", "4",
            "--data.on_bad_unlabeled", on_bad, "--data.num_workers", str(workers), "--trainer.default_root_dir", str(tmp_path / "runs"),
            "--trainer.callbacks+=tests.test_cli_errors.RemoveAfter", "--trainer.callbacks.step=2",
            f"--trainer.callbacks.path={lost}"]
    return run_reporting_errors(lambda: train.main(args)), lost


@pytest.mark.parametrize("workers", [0, 1])
def test_an_unlabeled_file_lost_during_a_run_is_one_line(workers, tiny_bert_dir, small, tmp_path, capsys):
    """Also when a DataLoader worker reads it (its error comes back with the worker's traceback in its message)."""
    with pytest.raises(SystemExit) as stopped:
        _fit_losing_an_unlabeled_file(tiny_bert_dir, small, tmp_path, "error", workers)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert stopped.value.code == 2 and len(lines) == 1 and "lost.txt" in lines[0] and len(lines[0]) < 200, lines
    assert not multiprocessing.active_children(), "the run's DataLoader workers stop with its error"


def test_an_unlabeled_file_lost_during_a_run_is_skipped_with_on_bad_unlabeled_skip(tiny_bert_dir, small, tmp_path,
                                                                                  caplog):
    cli, lost = _fit_losing_an_unlabeled_file(tiny_bert_dir, small, tmp_path, "skip")
    assert cli.trainer.global_step == 6
    assert any(str(lost) in record.getMessage() for record in caplog.records if record.levelname == "WARNING")
