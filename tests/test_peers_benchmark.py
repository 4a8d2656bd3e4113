"""benchmarks.peers: its data files, its reading of the peers' logs and its report (no peer runs)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from benchmarks import peers

CONLLU = """# sent_id = a
# text = I don't know
1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tknow\tknow\tVERB\t_\t_\t0\troot\t_\t_

# sent_id = b
1\tGo\tgo\tVERB\t_\t_\t0\troot\t_\t_
1.1\tgo\tgo\tVERB\t_\t_\t_\t_\t0:root\t_
2\t!\t!\tPUNCT\t_\t_\t1\tpunct\t_\t_

# sent_id = c
1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_

"""


def test_the_first_sentences_go_to_a_file_with_their_comments_and_words_count_syntactic_words(tmp_path):
    source = tmp_path / "in.conllu"
    source.write_text(CONLLU, encoding="utf-8")
    sentences = peers.write_first(source, 2, tmp_path / "sub" / "out.conllu")
    assert [peers.word_count([sentence]) for sentence in sentences] == [4, 2]  # no 2-3 range, no 1.1 empty node
    written = (tmp_path / "sub" / "out.conllu").read_text(encoding="utf-8")
    assert written == CONLLU[:CONLLU.index("# sent_id = c")]  # as read, byte for byte
    assert [s.words for s in peers.sentences_of(tmp_path / "sub" / "out.conllu")] == [s.words for s in sentences]
    everything = peers.write_first(source, None, tmp_path / "all.conllu")  # --sentences all
    assert len(everything) == 3 and (tmp_path / "all.conllu").read_text(encoding="utf-8") == CONLLU
    assert peers.size_arg("all") is None and peers.size_arg("100") == 100 and peers.size_name(None) == "all"


def test_steps_come_from_supars_log_and_hopsparsers_batches():
    log = ("INFO train: Dataset(n_sentences=3000, n_batches=211, n_buckets=32)\n"
           "INFO Epoch 1 / 2:\n...\nINFO Epoch 2 / 2:\n")
    assert peers.supar_steps(log) == 422
    with pytest.raises(ValueError, match="no training batches"):
        peers.supar_steps("INFO Epoch 1 / 1:\n")
    setting = peers.Setting(Path("t"), Path("d"), sentences=100, words=2311, epochs=3, batch_tokens=500, seed=1,
                            source=Path("all"))
    hops = peers.HopsParser()
    assert hops.batch_sentences(setting) == 22  # 500 words at 23.11 words a sentence
    assert hops.steps(setting, Path("."), "") == 3 * 5  # ceil(100 / 22) a pass


def test_a_failed_childs_reason_is_its_last_error_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File x\nFileNotFoundError: no vectors\nwarning: after\n")
    assert peers.last_error(log) == "FileNotFoundError: no vectors"
    log.write_text("killed\n")
    assert peers.last_error(log) == "killed"


def row(system: str, **values) -> dict:
    return {"run": "r1", "system": system, "version": f"{system} 1.0", "sentences": 3000, "words": 51037, "epochs": 1,
            "batch_tokens": 250, "threads": 1, "machine": "cpu", "date": "2026-11-25", "commit": "abcdef0123", **values}


def test_the_report_tables_every_system_and_compares_this_project_with_the_best_peers():
    measured = {"steps": 200, "train_peak_rss_mib": 1000.0, "parse_peak_rss_mib": 700.0, "saved_mib": 91.0}
    rows = [row("treeexp", uas=80.0, las=75.5, train_sentences_per_s=12.0, parse_sentences_per_s=60.0, **measured),
            row("supar", uas=79.0, las=74.0, train_sentences_per_s=8.0, parse_sentences_per_s=40.0, **measured),
            row("hopsparser", uas=81.0, las=76.0, train_sentences_per_s=2.0, parse_sentences_per_s=10.0, **measured),
            row("stanza", error="training exited with 1: FileNotFoundError: no vectors"),
            row("treeexp-bf16", uas=80.0, las=74.0, train_sentences_per_s=24.0, parse_sentences_per_s=80.0, **measured)]
    text = peers.report(rows)
    assert "**3000 training sentences (51037 words) x 1 epoch(s)" in text and "commit abcdef0" in text
    assert "| treeexp 1.0 | 200 | 80.00 | 75.50 | 12.0 | 60.0 | 1000 / 700 | 91 |" in text
    assert "| stanza 1.0 | did not run: `training exited with 1: FileNotFoundError: no vectors` |" in text
    # LAS against the most accurate peer (hopsparser), speeds against the fastest (supar)
    assert "treeexp 1.0 against the best peer: LAS -0.50 points (hopsparser); training 1.50x, parsing 1.50x" in text
    # every row of this project is compared, none counts as a peer
    assert "treeexp-bf16 1.0 against the best peer: LAS -2.00 points (hopsparser); training 3.00x, parsing 2.00x" in text


def test_the_bf16_system_trains_and_parses_under_bf16_and_takes_the_chosen_recipe(tmp_path):
    setting = peers.Setting(tmp_path / "train.conllu", tmp_path / "dev.conllu", 100, 2311, 80, 500, 1, tmp_path / "all.conllu")
    system = peers.replace(peers.SYSTEMS["treeexp-bf16"], config="configs/likelihood_low_resource.yaml",
                           extra=("--model.lr", "1e-3"))
    train = system.train_command(setting, tmp_path)
    assert train[train.index("--config") + 1] == "configs/likelihood_low_resource.yaml"
    assert train[train.index("--trainer.precision") + 1] == "bf16-mixed" and train[-6:-4] == ["--model.lr", "1e-3"]
    parse = system.parse_command(tmp_path / "best.ckpt", tmp_path / "in.conllu", tmp_path / "out.conllu")
    assert parse[-2:] == ["--precision", "bf16-mixed"]
    assert peers.SYSTEMS["treeexp"].train_command(setting, tmp_path)[-5] == "32-true"


def test_no_comparison_without_a_scored_peer():
    assert peers.comparison([row("treeexp", las=70.0, train_sentences_per_s=1.0, parse_sentences_per_s=1.0)]) == ""


def test_the_self_distilled_system_trains_a_teacher_then_a_student_on_the_rest_of_the_file(tmp_path):
    setting = peers.Setting(tmp_path / "train.conllu", tmp_path / "dev.conllu", 100, 2311, 80, 500, 1, tmp_path / "all.conllu")
    system = peers.replace(peers.SYSTEMS["treeexp-self"], config="configs/likelihood_low_resource.yaml")
    command = system.train_command(setting, tmp_path)
    assert command[:2] == ["bash", "-c"]
    teacher, student = (shlex.split(part) for part in command[2].split(" && "))
    plain = peers.replace(peers.SYSTEMS["treeexp"], config="configs/likelihood_low_resource.yaml")
    assert teacher == plain.train_command(setting, tmp_path / "teacher")  # the plain system's run is the teacher
    assert student[student.index("--data.train") + 1] == str(tmp_path / "all.conllu")
    assert student[student.index("--data.labeled_size") + 1] == "100"
    assert student[student.index("--model.teacher") + 1] == str(system.teacher(tmp_path))
    assert student[student.index("--trainer.max_steps") + 1] == str(80 * 5)  # as many steps as the teacher's epochs take
    assert "configs/distill.yaml" in student and system.teacher(tmp_path).is_relative_to(tmp_path / "teacher")


def test_the_chosen_recipe_reaches_every_treeexp_system_and_no_peer():
    args = peers.argparse.Namespace(systems=["treeexp", "treeexp-self", "supar"], treeexp_args="--model.lr 1e-3",
                                    treeexp_config="configs/likelihood_low_resource.yaml")
    systems = peers.chosen_systems(args)
    assert list(systems) == ["treeexp", "treeexp-self", "supar"] and systems["supar"] is peers.SYSTEMS["supar"]
    for name in ("treeexp", "treeexp-self"):
        assert systems[name].config == "configs/likelihood_low_resource.yaml" and systems[name].extra == ("--model.lr", "1e-3")
    assert peers.SYSTEMS["treeexp"].config == "configs/likelihood.yaml"  # the defaults are left as they were
