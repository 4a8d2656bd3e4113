"""``precision auto``: bf16 autocast only where the processor does bf16 arithmetic."""

import logging

import pytest

import train
from parser.training import precision
from parser.training.precision import bf16_pays, cpu_flags, processor, resolve_precision


def test_cpu_flags_decide(tmp_path):
    with_bf16, without = tmp_path / "a", tmp_path / "b"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert cpu_flags(with_bf16) >= {"avx512_bf16"} and cpu_flags(tmp_path / "none") == set()
    assert bf16_pays("cpu", with_bf16) == (True, "this CPU does bf16 arithmetic (avx512_bf16)")
    assert bf16_pays("cpu", without)[0] is False and "slower" in bf16_pays("cpu", without)[1]
    assert resolve_precision("16-mixed", "cpu") == ("16-mixed", None)  # a choice given stands


def test_the_processor_line_names_the_model_and_its_bf16_arithmetic(tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu amx_bf16 avx512_bf16\n")
    assert processor(info) == "AMD EPYC, 2 cores, amx_bf16 avx512_bf16"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t\t: fpu avx2\n")
    assert processor(info) == "Intel(R) Xeon(R) CPU @ 2.20GHz, 2 cores, no bf16 arithmetic"


@pytest.mark.parametrize("flags, chosen", [({"avx512_bf16"}, "bf16-mixed"), ({"avx2"}, "32-true")])
def test_a_run_with_precision_auto_says_what_it_chose(tiny_bert_dir, monkeypatch, caplog, flags, chosen):
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="": flags)
    with caplog.at_level(logging.INFO):
        cli = train.main(["--model.encoder", str(tiny_bert_dir), "--precision_auto", "true",
                          "--trainer.accelerator", "cpu", "--trainer.logger", "false"], run=False)
    assert cli.trainer.precision == chosen
    assert f"precision auto: {chosen}" in caplog.text
