"""benchmarks.peers: its data files, its reading of the peers' logs and its report (no peer runs)."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks import peers
from parser import pipeline, runs

CONLLU = """# newdoc id = d1
# newpar
# sent_id = a
# text = I don't know
1\tI\tI\tPRON\tPRP\tCase=Nom|Number=Sing|Person=1\t3\tnsubj\t3:nsubj\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No
2\tdo\tdo\tAUX\tVBP\tMood=Ind|Tense=Pres\t3\taux\t3:aux\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t4:advmod\t_
4\tknow\tknow\tVERB\tVB\tVerbForm=Inf\t0\troot\t0:root\tSpaceAfter=No

# sent_id = b
1\tGo\tgo\tVERB\t_\t_\t0\troot\t_\t_
1.1\tgo\tgo\tVERB\t_\t_\t_\t_\t0:root\t_
2\t!\t!\tPUNCT\t_\t_\t1\tpunct\t_\t_

# sent_id = c
1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_

"""


def test_the_first_sentences_go_to_a_file_as_given_and_words_count_syntactic_words(tmp_path):
    """Comments, multiword tokens, empty nodes and every column survive a write of the first N."""
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


def recorded(system: str, sentences: int) -> dict:
    """The row of ``docs/results/peers.jsonl`` of ``system`` on ``sentences`` at c3ed019, where
    this project's commands took their present options."""
    return next(row for row in peers.read_rows(peers.RESULTS) if row["system"] == system
                and row["sentences"] == sentences and row["commit"].startswith("c3ed019"))


def chosen(row: dict):
    """The system of this project as the row's ``benchmarks.peers`` command chose it."""
    words = shlex.split(row["command"])

    def value(flag: str, default: str) -> str:
        return words[words.index(flag) + 1] if flag in words else default

    options = peers.Options(systems=(row["system"],), treeexp_config=value("--treeexp-config", peers.TreeExp.config),
                            treeexp_args=tuple(shlex.split(value("--treeexp-args", ""))))
    return peers.chosen_systems(options)[row["system"]]


def options(command: list[str]) -> list[tuple[str, str]]:
    """A ``train.py fit`` command's arguments as (option, value) pairs in order, ``--key=value`` as one."""
    pairs, rest = [], iter(command[command.index("fit") + 1:])
    for argument in rest:
        pairs.append(tuple(argument.split("=", 1)) if "=" in argument else (argument, next(rest)))
    return pairs


def setting_of(row: dict, command: list[str], source: Path) -> peers.Setting:
    given = dict(options(command))
    return peers.Setting(Path(given["--data.train"]), Path(given["--data.dev"]), row["sentences"], row["words"],
                         row["epochs"], row["batch_tokens"], row.get("seed", 1), source)


@pytest.mark.parametrize("system, sentences", [("treeexp", 2000), ("treeexp-bf16", 2000), ("treeexp", 100)])
def test_this_projects_runs_are_the_recorded_train_py_commands_through_parser_runs(system, sentences):
    row = recorded(system, sentences)
    old = shlex.split(row["train_command"])
    folder = Path(dict(options(old))["--trainer.default_root_dir"])
    new = chosen(row).train_command(setting_of(row, old, Path("unused")), folder)
    assert new[1] == str(runs.TRAIN) and old[1] == "train.py"  # the same file: the peers run in the repository
    assert new[2:] == [*old[2:-4], *old[-2:], *old[-4:-2]]  # the same, the progress bar's switch before the folder


def test_the_self_distilled_pipeline_runs_the_recorded_teacher_and_student(tmp_path):
    row = recorded("treeexp-self", 100)
    teacher, student = (shlex.split(part) for part in shlex.split(row["train_command"])[2].split(" && "))
    source = Path(dict(options(student))["--data.train"])
    command = chosen(row).train_command(setting_of(row, teacher, source), tmp_path)
    assert command[1:4] == ["-m", "parser.pipeline", str(tmp_path / "pipeline.yaml")]
    assert command[command.index("--treebank") + 1] == "UD_English-EWT" and command[-2:] == ["--output", str(tmp_path)]
    lines = []
    pipeline.run(pipeline.read_pipeline(command[3]), "UD_English-EWT", tmp_path, dry_run=True, say=lines.append)
    assert len(lines) == 2  # one seed, two stages

    def without_folders(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(key, str(runs.config_path(value)) if key == "--config" else value) for key, value in pairs
                if key not in ("--trainer.default_root_dir", "--model.teacher")]

    for old, new, stage in ((teacher, shlex.split(lines[0]), "teacher"), (student, shlex.split(lines[1]), "student")):
        new = options(new)
        assert new[-1] == ("--trainer.default_root_dir", str(tmp_path / stage / "seed1"))
        assert [value for key, value in new if key == "--data.seed"] == ["1", "0"]  # the pipeline's, then the recorded (default) one
        assert without_folders([pair for pair in new if pair[0] != "--data.seed"]) == without_folders(options(old))
    best = Path("likelihood_low_resource", "version_0", "checkpoints", "best.ckpt")
    assert dict(options(student))["--model.teacher"].endswith(str(Path("teacher") / best))
    assert dict(options(shlex.split(lines[1])))["--model.teacher"] == str(tmp_path / "teacher" / "seed1" / best)


def fake_run(directory: Path, steps: int, epochs: int) -> None:
    """A run's checkpoints as train.py leaves them: ``best.ckpt``, and ``last.ckpt`` with its progress."""
    import torch

    (directory / "checkpoints").mkdir(parents=True)
    (directory / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    torch.save({"global_step": steps, "loops": {"fit_loop": {"epoch_progress": {"total": {"started": epochs}}}}},
               directory / "checkpoints" / "last.ckpt")


def test_this_projects_parsers_steps_and_epochs_come_from_its_runs(tmp_path):
    plain, distilled = peers.SYSTEMS["treeexp"], peers.SYSTEMS["treeexp-self"]
    fake_run(tmp_path / "plain" / "likelihood" / "version_0", steps=16, epochs=1)
    assert plain.model(tmp_path / "plain") == tmp_path / "plain" / "likelihood" / "version_0" / "checkpoints" / "best.ckpt"
    assert plain.steps(None, tmp_path / "plain", "") == 16 and plain.epochs(None, tmp_path / "plain", "") == 1
    for stage, name, steps, epochs in (("teacher", "likelihood", 36, 80), ("student", "distill", 5, 1)):
        fake_run(tmp_path / "self" / stage / "seed2" / name / "version_0", steps, epochs)
        (tmp_path / "self" / stage / "seed2" / runs.FINISHED).write_text(f'{{"run": "{name}/version_0"}}')  # as parser.runs.fit
    assert distilled.model(tmp_path / "self") == tmp_path / "self" / "student" / "seed2" / "distill" / "version_0" / "checkpoints" / "best.ckpt"
    assert distilled.steps(None, tmp_path / "self", "") == 36 + 5  # both stages' steps
    assert distilled.epochs(None, tmp_path / "self", "") == 80  # the teacher's passes over the labeled sentences


def test_the_chosen_recipe_reaches_every_treeexp_system_and_no_peer():
    systems = peers.chosen_systems(peers.Options(systems=("treeexp", "treeexp-self", "supar"),
                                                 treeexp_args=("--model.lr", "1e-3"),
                                                 treeexp_config="configs/likelihood_low_resource.yaml"))
    assert list(systems) == ["treeexp", "treeexp-self", "supar"] and systems["supar"] is peers.SYSTEMS["supar"]
    for name in ("treeexp", "treeexp-self"):
        assert systems[name].config == "configs/likelihood_low_resource.yaml" and systems[name].extra == ("--model.lr", "1e-3")
    assert peers.SYSTEMS["treeexp"].config == "configs/likelihood.yaml"  # the defaults are left as they were


# ---- UDPipe 1 and spaCy, the small-treebank cells -----------------------------------------

def small_setting(tmp_path, seed: int = 2) -> peers.Setting:
    return peers.Setting(tmp_path / "train.conllu", tmp_path / "dev.conllu", 100, 1546, 1, 250, seed, tmp_path / "all.conllu")


def test_udpipe1_trains_and_parses_through_the_driver_in_its_own_environment(tmp_path):
    system = peers.SYSTEMS["udpipe1"]
    train = system.train_command(small_setting(tmp_path), tmp_path / "out")
    assert train[0] == str(peers.venv("udpipe1") / "bin" / "python") and train[1:4] == ["-m", "benchmarks.peer_drivers", "udpipe1-train"]
    assert train[4:] == [str(tmp_path / "train.conllu"), str(tmp_path / "dev.conllu"), str(tmp_path / "out" / "model.udpipe")]
    assert not system.seeded  # no seed: one run per cell
    parse = system.parse_command(system.model(tmp_path / "out"), tmp_path / "in.conllu", tmp_path / "out.conllu")
    assert parse[3:] == ["udpipe1-parse", str(tmp_path / "out" / "model.udpipe"), str(tmp_path / "in.conllu"), str(tmp_path / "out.conllu")]
    log = "Iteration 1: training logprob -1e3, heldout UAS 50%\nIteration 2: training logprob -9e2, heldout UAS 52%\n"
    assert system.epochs(small_setting(tmp_path), tmp_path, log) == 2 and system.steps(small_setting(tmp_path), tmp_path, log) is None


def test_spacy_converts_inits_its_default_cnn_config_and_trains_with_the_seed(tmp_path):
    system = peers.SYSTEMS["spacy"]
    command = system.train_command(small_setting(tmp_path, seed=3), tmp_path / "out")
    assert command[:2] == ["bash", "-c"]
    mkdir, train_convert, dev_convert, init, train = (shlex.split(step) for step in command[2].split(" && "))
    corpus = tmp_path / "out" / "corpus"
    assert mkdir == ["mkdir", "-p", str(corpus / "train"), str(corpus / "dev")]
    assert train_convert[1:] == ["-m", "spacy", "convert", str(tmp_path / "train.conllu"), str(corpus / "train"), "--converter", "conllu"]
    assert dev_convert[4:6] == [str(tmp_path / "dev.conllu"), str(corpus / "dev")]
    assert init[3:] == ["init", "config", str(tmp_path / "out" / "config.cfg"), "--lang", "xx", "--pipeline", "tagger,parser",
                        "--optimize", "efficiency", "--force"]
    assert train[3:5] == ["train", str(tmp_path / "out" / "config.cfg")] and train[train.index("--training.seed") + 1] == "3"
    assert train[train.index("--paths.train") + 1] == str(corpus / "train") and train[0] == str(peers.venv("spacy") / "bin" / "python")
    settings = dict(zip(train[5::2], train[6::2]))  # --option value pairs after the config path
    assert settings["--corpora.train.gold_preproc"] == settings["--corpora.dev.gold_preproc"] == "true"
    assert settings["--components.tagger.neg_prefix"] == '""'  # a tag "!" stays a tag
    assert system.model(tmp_path / "out") == tmp_path / "out" / "trained" / "model-best"
    assert system.parse_command(tmp_path / "m", tmp_path / "in", tmp_path / "o")[3:] == ["spacy-parse", str(tmp_path / "m"),
                                                                                       str(tmp_path / "in"), str(tmp_path / "o")]


def test_spacys_epochs_and_steps_come_from_the_last_row_of_its_training_table():
    log = ("E    #       LOSS TOK2VEC  LOSS TAGGER  LOSS PARSER  TAG_ACC  DEP_UAS  DEP_LAS  SCORE \n"
           "---  ------  ------------  -----------  -----------  -------  -------  -------  ------\n"
           "  0       0          0.00        76.24       183.64    38.81     9.52     2.80    0.22\n"
           " 45     200        465.65      1897.17      4060.14    72.63    46.06     9.91    0.50\n"
           "100     400        619.17        30.42       230.14    73.17    46.65    11.63    0.51\n")
    assert peers.spacy_progress(log) == (100, 400)
    system = peers.SYSTEMS["spacy"]
    assert system.epochs(None, Path("."), log) == 101 and system.steps(None, Path("."), log) == 400
    with pytest.raises(ValueError, match="no row"):
        peers.spacy_progress("Saved pipeline\n")


def test_a_childs_peak_memory_is_its_own_not_this_processs(tmp_path):
    import torch  # noqa: F401 - this process holds hundreds of MiB, as benchmarks.peers does

    small = peers.run_child(["python3", "-c", "pass"], {}, tmp_path / "small.log")
    large = peers.run_child(["python3", "-c", "x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096])"], {}, tmp_path / "large.log")
    assert small.status == 0 and small.peak_rss < 60 * 2**20 and large.peak_rss > 300 * 2**20
    assert large.cpu_seconds > 0 and large.seconds >= large.cpu_seconds * 0.5
    assert peers.run_child(["bash", "-c", "exit 3"], {}, tmp_path / "fail.log").status == 3


def cell_row(system: str, seed: int | None, las: float, **values) -> dict:
    row = {"run": "r", "system": system, "version": f"{system} v", "treebank": "UD_Wolof-WTB", "training": "100",
           "las": las, "uas": las + 10, "train_cpu_seconds": 60.0, "parse_sentences_per_cpu_s": 300.0,
           "train_peak_rss_mib": 40.0, "parse_peak_rss_mib": 30.0, "commit": "abcdef0123", "command": "c", **values}
    return row if seed is None else {**row, "seed": seed}


def test_the_cells_report_gives_seeds_mean_and_sd_the_winner_its_margin_and_the_cost_ratio():
    rows = [cell_row("udpipe1", None, 39.0), cell_row("udpipe1", None, 40.0),  # a rerun: the last counts
            cell_row("spacy", 1, 30.0, train_cpu_seconds=300.0), cell_row("spacy", 2, 32.0, train_cpu_seconds=420.0),
            cell_row("spacy", 3, 34.0, train_cpu_seconds=360.0, train_peak_rss_mib=500.0),
            {"run": "old", "system": "supar", "las": 70.0, "treebank": "UD_English-EWT"}]  # not a cell
    low = [{"treebank": "UD_Wolof-WTB", "labeled": 100, "extra_labeled": 0, "objective": "supervised", "seed": seed,
            "variant": peers.SUPERVISED_100, "las": 41.0 + seed, "uas": 50.0, "train_seconds": 600, "commit": "c1",
            "command": "t"} for seed in (1, 2, 3)]
    for round_, extra in ((1, 300), (2, 600)):
        low += [{**row, "objective": "self_distill", "variant": f"round {round_} teachers of seeds 1 2 3 {peers.SUPERVISED_100} "
                 "'--model.terms=[...]' --model.encoder_options.word_dropout 0.15", "las": 45.0 + round_ + row["seed"],
                 "train_seconds": extra} for row in low[:3]]
    small = [{"treebank": "UD_Wolof-WTB", "recipe": "configs/small_treebank.yaml", "encoder": "multilingual-e5-small",
              "decoder": decoder, "dev_las": dev, "test_las": test, "test_uas": 80.0, "cpu_minutes": 50.0,
              "peak_rss_gb": 2.0, "commit": "c2", "command": "s"}
             for decoder, dev, test in (("mst", 70.0, 72.0), ("mst", 71.0, 73.0), ("eisner", 75.0, 99.0))]
    entries = peers.peer_entries(rows) + peers.recorded_entries(low, small)
    by = {(e["system"], e["training"]): e for e in entries}
    assert by["udpipe1", "100"]["las"] == [40.0] and by["spacy", "100"]["las"] == [30.0, 32.0, 34.0]
    assert by["spacy", "100"]["minutes"] == 6.0 and by["spacy", "100"]["rss"] == 500.0
    assert by["treeexp", "100"]["las"] == [42.0, 43.0, 44.0] and by["treeexp", "100"]["minutes"] == 10.0
    assert by["treeexp-self", "100"]["las"] == [48.0, 49.0, 50.0] and by["treeexp-self", "100"]["minutes"] == 45.0  # 3 teachers + 2 rounds
    assert by["treeexp", "all"]["las"] == [73.0] and by["treeexp", "all"]["rss"] == 2048.0  # MST, the best on dev
    text = peers.cells_report(entries)
    assert "| treeexp-self v" not in text and "| treeexp self-distilled, 2 rounds (recorded) | 3 | 49.00 ± 1.00 |" in text
    assert "| spacy v | 3 | 32.00 ± 2.00 | 42.00 ± 2.00 | 6.0 | 300.0 | 500 | abcdef0 |" in text
    assert "Winner: treeexp self-distilled, 2 rounds (recorded), 9.00 LAS ahead of udpipe1 v." in text
    assert "treeexp supervised (recorded) against the best peer: +3.00 LAS." in text
    assert ("treeexp self-distilled, 2 rounds (recorded): 45x the training minutes of the cheapest peer, udpipe1 v (1.0), "
            "+0.20 LAS per extra minute." in text)  # (49 - 40) / (45 - 1)
    assert "treeexp supervised (recorded): 10x the training minutes of the cheapest peer, udpipe1 v (1.0)." in text
    assert "**UD_Wolof-WTB, the whole training file**" in text and "No comparison yet: no peer row." in text


def test_the_one_command_recipes_count_every_stage_a_seed_needs_and_only_complete_seeds():
    def stage(name, seed, las, minutes, rss=1000, treebank="UD_Wolof-WTB"):
        return {"treebank": treebank, "stage": name, "seed": seed, "test_las": las, "test_uas": las + 10,
                "cpu_minutes": minutes, "peak_rss_mib": rss, "commit": f"c{seed}", "command": f"t{seed}"}

    transfer = [{"treebank": "UD_Wolof-WTB", "stage": "zero-shot", "seed": None, "test_las": 20.0, "test_uas": 30.0},
                stage("student", 2, 54.0, 24.0), stage("finetuned", 2, 49.0, 10.0), stage("target_only", 2, 41.0, 11.0),
                stage("student", 1, 53.0, 25.0, rss=6000), stage("finetuned", 1, 49.0, 9.0),
                stage("target_only", 1, 42.0, 10.0),
                stage("student", 3, 60.0, 20.0), stage("finetuned", 3, 49.0, 9.0),  # no target_only: left out
                stage("student", 1, 70.0, 20.0, treebank="UD_Turkish-IMST")]  # not a cell
    new_language = [stage("teachers", seed, 43.0, 8.0 + seed) for seed in (1, 2, 3)]
    new_language += [stage("round1", 1, 48.0, 20.0), stage("round2", 1, 50.0, 19.0),
                     stage("round2", 2, 51.0, 19.0)]  # seed 2 has no round 1
    transfer.append(stage("full", 1, 75.0, 18.0, rss=4000))
    parsed = [{"treebank": "UD_Wolof-WTB", "training": "100", "parse_sentences_per_cpu_s": 9.0, "parse_peak_rss_mib": 7000},
              {"treebank": "UD_Wolof-WTB", "training": "100", "parse_sentences_per_cpu_s": 30.0, "parse_peak_rss_mib": 2000},
              {"treebank": "UD_Wolof-WTB", "training": "all", "error": "parsing exited with 1"}]  # the last that parsed counts
    entries = peers.pipeline_entries(transfer, new_language, parsed)
    full = entries.pop(1)
    assert (full["training"], full["las"], full["minutes"], full["rss"], full["parse"]) == ("all", [75.0], 18.0, 4000, None)
    by = {e["system"]: e for e in entries}
    assert sorted(by) == ["treeexp-bf16", "treeexp-transfer"] and all(e["training"] == "100" for e in entries)
    assert by["treeexp-transfer"]["parse"] == 30.0 and by["treeexp-bf16"]["parse"] is None  # the parser measured
    assert by["treeexp-transfer"]["las"] == [53.0, 54.0] and by["treeexp-transfer"]["uas"] == [63.0, 64.0]
    assert by["treeexp-transfer"]["minutes"] == 44.5 and by["treeexp-transfer"]["rss"] == 6000  # (44 + 45) / 2
    assert by["treeexp-transfer"]["commit"] == "c2" and by["treeexp-transfer"]["recorded"]
    assert by["treeexp-bf16"]["las"] == [50.0] and by["treeexp-bf16"]["minutes"] == 9 + 10 + 11 + 20 + 19
    assert peers.pipeline_entries(transfer, new_language[:2] + new_language[3:], parsed) == [entries[0], full]  # 2 teachers


def test_parse_only_parses_the_test_file_with_the_given_parser_and_records_its_cell(tmp_path, monkeypatch, capsys,
                                                                                    ud_dir):
    monkeypatch.setenv("UD_DIR", str(ud_dir))
    calls = []

    def parse_and_score(system, model, test, out, repeats):
        calls.append((system.name, model, test.name, repeats))
        return {"las": 50.0, "uas": 60.0, "parse_sentences_per_cpu_s": 20.0, "parse_peak_rss_mib": 900.0}

    monkeypatch.setattr(peers, "parse_and_score", parse_and_score)
    monkeypatch.setattr(peers, "setup", lambda names: pytest.fail("parsing only builds no environment"))
    monkeypatch.setattr(peers, "RUNS", peers.RUNS)  # main sets it from --runs: restored after the test
    results = tmp_path / "rows.jsonl"
    peers.main(["--parse", "runs/x/parser", "--treebank", "UD_Wolof-WTB", "--sentences", "100", "--results", str(results),
                "--runs", str(tmp_path)])
    (row,) = peers.read_rows(results)
    assert calls == [("treeexp", Path("runs/x/parser"), "wo_wtb-ud-test.conllu", 1)]
    assert (row["system"], row["treebank"], row["training"], row["las"]) == (peers.PARSE_ONLY, "UD_Wolof-WTB", "100", 50.0)
    assert "LAS 50.0, 20.0 sentences per CPU second" in capsys.readouterr().out
    assert peers.peer_entries([row]) == []  # not a peer


def test_two_runs_started_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch):
    class Frozen:
        @staticmethod
        def now(zone):
            return datetime(2026, 11, 28, 2, 54, 48, tzinfo=zone)

    monkeypatch.setattr(peers, "datetime", Frozen)
    names = [peers.new_run_folder(tmp_path / "out") for _ in range(3)]
    assert names == ["20261128T025448", "20261128T025448-2", "20261128T025448-3"]
    assert all((tmp_path / "out" / name).is_dir() for name in names)


def test_a_row_names_no_machines_own_path(tmp_path, monkeypatch):
    """The interpreter, the peers' folder, the repository and $UD_DIR become names a reader's
    machine has; the rest of the row is as it was."""
    data = tmp_path / "ud"
    monkeypatch.setenv("UD_DIR", str(data))
    monkeypatch.setattr(peers, "RUNS", tmp_path / "peers")
    row = {"parse_command": f"{sys.executable} -m parser.predict {tmp_path}/peers/out/1/parser {data}/UD_X/x-test.conllu",
           "train_command": f"{peers.ROOT}/train.py fit --seed 1", "steps": 3, "sizes": [f"{data}/a", 1]}
    results = tmp_path / "rows.jsonl"
    peers.record_row(row, results)
    (written,) = peers.read_rows(results)
    assert written == {"parse_command": "python -m parser.predict runs/peers/out/1/parser $UD_DIR/UD_X/x-test.conllu",
                       "train_command": "train.py fit --seed 1", "steps": 3, "sizes": ["$UD_DIR/a", 1]}


def test_the_figure_is_a_small_png(tmp_path):
    pytest.importorskip("matplotlib")
    entries = peers.peer_entries([cell_row("udpipe1", None, 40.0), cell_row("spacy", 1, 30.0, training="all")])
    peers.plot_cells(entries, tmp_path / "cells.png")
    assert (tmp_path / "cells.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "cells.png").stat().st_size < 100_000


def built(name: str) -> None:
    if not (peers.venv(name) / ".installed").exists():
        pytest.skip(f"{peers.venv(name)} not built (python -m benchmarks.peers --setup --systems {name}; PEERS_RUNS names its folder)")


def first_wolof(tmp_path, count: int, start: int = 0) -> Path:
    from parser.data.datamodule import DependencyDataModule
    from parser.data.sentences import write_conllu

    source = DependencyDataModule(treebank="UD_Wolof-WTB").path("train")
    target = tmp_path / f"wo-{start}-{count}.conllu"
    write_conllu(peers.sentences_of(source)[start:start + count], target)
    return target


def test_udpipe1_really_trains_on_30_sentences_and_parses_the_gold_words(tmp_path):
    built("udpipe1")
    train, dev = first_wolof(tmp_path, 30), first_wolof(tmp_path, 15, start=30)
    system = peers.SYSTEMS["udpipe1"]
    trained = peers.run_child(system.train_command(peers.Setting(train, dev, 30, 0, 1, 250, 1, train),
                                                   tmp_path), {}, tmp_path / "train.log")
    assert trained.status == 0, (tmp_path / "train.log").read_text()
    parsed = peers.run_child(system.parse_command(system.model(tmp_path), dev, tmp_path / "pred.conllu"), {}, tmp_path / "parse.log")
    assert parsed.status == 0, (tmp_path / "parse.log").read_text()
    from parser.evaluate import evaluate

    gold, predicted = peers.sentences_of(dev), peers.sentences_of(tmp_path / "pred.conllu")
    assert [s.words for s in predicted] == [s.words for s in gold]
    assert 20 < evaluate(dev, tmp_path / "pred.conllu")["las"] < 100


def test_spacy_parses_given_words_into_one_tree_a_sentence_written_back_as_conllu(tmp_path):
    built("spacy")
    import subprocess

    source = tmp_path / "in.conllu"
    source.write_text(CONLLU, encoding="utf-8")
    # an initialised, untrained tagger+parser: its trees are random, their shape is the test
    init = ("import spacy, sys\nfrom spacy.tokens import Doc\nfrom spacy.training import Example\n"
            "nlp = spacy.blank('xx'); nlp.add_pipe('tagger'); nlp.add_pipe('parser')\n"
            "doc = Doc(nlp.vocab, words=['a', 'b', 'c'], heads=[1, 1, 1], deps=['nsubj', 'ROOT', 'obj'], tags=['X', 'V', 'X'])\n"
            "nlp.initialize(lambda: [Example(nlp.make_doc('a b c'), doc)]); nlp.to_disk(sys.argv[1])\n")
    python = str(peers.venv("spacy") / "bin" / "python")
    subprocess.run([python, "-c", init, str(tmp_path / "model")], check=True, cwd=peers.ROOT)
    subprocess.run(peers.SYSTEMS["spacy"].parse_command(tmp_path / "model", source, tmp_path / "out.conllu"), check=True,
                   cwd=peers.ROOT)
    from parser.data.sentences import read_conllu

    parsed = read_conllu(tmp_path / "out.conllu")  # every sentence a tree: one root, no cycle
    assert [s.words for s in parsed] == [s.words for s in peers.sentences_of(source)]
    assert all(s.heads.count(0) == 1 for s in parsed) and all("ROOT" not in s.deprels for s in parsed)
    assert "2-3\tdon't" in (tmp_path / "out.conllu").read_text(encoding="utf-8")  # the multiword token kept


def test_a_parse_of_several_trees_becomes_one_under_its_first_root():
    from benchmarks.peer_drivers import one_tree

    assert one_tree([2, 0, 2, 0, 4], ["nsubj", "root", "obj", "root", "punct"]) == (
        [2, 0, 2, 2, 4], ["nsubj", "root", "obj", "dep", "punct"])
    assert one_tree([0, 1], ["root", "obj"]) == ([0, 1], ["root", "obj"])
