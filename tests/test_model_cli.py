"""`labutils model ...` through labutils.command.cli.main, and once through the installed command."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labutils.command.cli import main

REPO = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = main(["model", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_zero_table(capsys):
    code, out, _ = run(capsys, "zero", "--params", "7.5e9", "--world-size", "64")
    assert code == 0
    for total in ("120.00", "31.41", "16.64", "1.88"):
        assert total in out
    assert "0 (DDP)" in out and "3 Psi" in out and "GB = 1e9 bytes" in out


def test_bubble_states_both_conventions(capsys):
    code, out, _ = run(capsys, "bubble", "--schedule", "1f1b", "--stages", "4", "--microbatches", "16")
    assert code == 0
    assert "share of the whole step" in out and "(p-1)/(m+p-1)" in out and "3/19 = 15.79%" in out
    assert "relative to the ideal" in out and "3/16 = 18.75%" in out
    assert "bubble 15.79% of the step" in out and "4 3 2 1" in out


def test_bubble_interleaved(capsys):
    code, out, _ = run(capsys, "bubble", "--schedule", "interleaved_1f1b", "--stages", "4",
                       "--microbatches", "16", "--chunks", "2")
    assert code == 0 and "3/32" in out and "3/35" in out and "bubble 8.57% of the step" in out


def test_comm_lists_volume_calls_and_assumptions(capsys):
    code, out, _ = run(capsys, "comm", "--strategy", "tp", "--layers", "96", "--hidden", "12288",
                       "--seq-len", "2048", "--micro-batch-size", "32", "--tp-size", "8", "--bandwidth-GBps", "450")
    assert code == 0
    assert "1082.33 GB sent per device" in out and "384 all_reduce" in out and "assumptions:" in out
    code, out, _ = run(capsys, "comm", "--strategy", "pp", "--hidden", "12288", "--seq-len", "2048",
                       "--micro-batch-size", "1", "--microbatches", "32", "--pp-size", "8")
    assert code == 0 and "448" in out and "3.22 GB" in out


def test_comm_without_a_strategy_tables_every_strategy_the_arguments_allow(capsys):
    code, out, _ = run(capsys, "comm", "--params", "175e9", "--layers", "96", "--hidden", "12288",
                       "--seq-len", "2048", "--micro-batch-size", "1", "--microbatches", "32",
                       "--tp-size", "8", "--pp-size", "8", "--dp-size", "16", "--bandwidth-GBps", "450")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in ("dp", "fsdp", "tp", "pp")}
    assert list(rows) == ["dp", "fsdp", "tp", "pp"]
    assert rows["tp"][1:5] == ["all_reduce", "135.29", "GB", "1536"]  # 4 x 12 layers x 32 microbatches
    assert rows["pp"][1:6] == ["send", "3.22", "GB", "64", "448"]  # 2m per stage, 2m(p-1) in the pipeline
    assert rows["dp"][2] == "10.25" and "s at 450 GB/s" in out
    code, out, _ = run(capsys, "comm", "--params", "175e9", "--dp-size", "1024")
    assert code == 0 and "699.32 GB" in out
    assert "not computed: fsdp (needs --layers); tp (needs --hidden, --seq-len, --micro-batch-size)" in out


def test_roofline_gemm(capsys):
    code, out, _ = run(capsys, "roofline", "--gpu", "h100", "--gemm", "8192", "8192", "8192", "--dtype", "bf16")
    assert code == 0
    assert "989 TFLOP/s" in out and "ridge point 295" in out and "2731" in out and "compute-bound" in out


@pytest.mark.parametrize("argv, intensity, bound", [
    (["--elementwise", "1000000"], "0.1667", "memory"),         # 1 FLOP per 6 bytes in bf16
    (["--softmax", "8192", "8192"], "1.25", "memory"),          # 5 FLOP per 4 bytes
    (["--layernorm", "8192", "8192"], "2", "memory"),            # 8 FLOP per 4 bytes (weights negligible)
    (["--attention", "8", "32", "4096", "128"], "2048", "compute"),  # fused: s/2 in bf16
])
def test_roofline_every_op(capsys, argv, intensity, bound):
    code, out, _ = run(capsys, "roofline", "--gpu", "h100", *argv)
    assert code == 0 and f"intensity {intensity} FLOP/B -> {bound}-bound" in out


@pytest.mark.parametrize("argv, message", [
    (["roofline", "--gpu", "mi300", "--gemm", "8", "8", "8"], "unknown GPU 'mi300'"),
    (["roofline", "--gpu", "v100", "--gemm", "8", "8", "8", "--dtype", "bf16"], "no bf16"),
    (["roofline", "--gpu", "h100"], "exactly one op"),
    (["bubble", "--schedule", "zb", "--stages", "4", "--microbatches", "8"], "unknown schedule"),
    (["bubble", "--schedule", "gpipe", "--stages", "0", "--microbatches", "8"], "num_stages"),
    (["comm", "--strategy", "tp"], "needs hidden, seq_len, micro_batch_size"),
    (["comm"], "give the sizes of at least one strategy"),
    (["comm", "--strategy", "all", "--params", "1e9", "--layers", "5", "--pp-size", "2"], "multiple of pp_size"),
    (["zero", "--params", "-1", "--world-size", "8"], "num_params"),
    ([], "say which question"),
])
def test_bad_arguments_give_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["bubble", "--schedule", "1f1b", "--stages", "four", "--microbatches", "8"], "invalid int value: 'four'"),
    (["zero", "--params", "7.5e9"], "required: --world-size"),
    (["roofline", "--gpu", "h100", "--gemm", "8", "8"], "expected 3 arguments"),
])
def test_argparse_errors_are_one_line_too(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(["model", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "usage:" not in err and "--help" in err


def test_interleaved_constraint_is_checked_before_anything_is_printed(capsys):
    code, out, err = run(capsys, "bubble", "--schedule", "interleaved_1f1b", "--stages", "4",
                         "--microbatches", "6", "--chunks", "2")
    assert code == 2 and out == "" and "multiple of num_stages" in err


def test_console_script():
    script = shutil.which("labutils", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "labutils"]  # same entry point: labutils.command.cli:main
    done = subprocess.run(command + ["model", "zero", "--params", "7.5e9", "--world-size", "64"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and "31.41" in done.stdout
    bad = subprocess.run(command + ["model", "roofline", "--gpu", "x", "--elementwise", "8"],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "labutils model: error: unknown GPU 'x'; choose one of: v100, a100, h100, h200, b200")
