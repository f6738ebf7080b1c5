"""`labutils bench`: argument errors, the table, --json, and running under torchrun."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labutils.command import cli

REPO = Path(__file__).resolve().parents[1]


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_unknown_op_lists_the_ops(capsys):
    assert cli.main(["bench", "allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labutils bench: error: unknown collective 'allreduce'")
    assert "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, sendrecv" in err


@pytest.mark.parametrize("argv, message", [
    (["-b", "1Q"], "bad size '1Q'"),
    (["-b", "1M", "-e", "8"], "larger than max"),
    (["-f", "1"], "factor must be"),
    (["--world-size", "0"], "--world-size must be at least 1"),
    (["-d", "fp12"], "unknown dtype"),
])
def test_bad_arguments_are_one_line_errors(capsys, argv, message):
    assert cli.main(["bench", "all_reduce", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without GPUs")
def test_nccl_without_gpus_is_a_usage_error(capsys):
    assert cli.main(["bench", "all_reduce", "--backend", "nccl"]) == 2
    assert "nccl" in capsys.readouterr().err


def test_prints_the_nccl_tests_table(capsys):
    code = cli.main(["bench", "all_gather", "--world-size", "2", "--backend", "gloo",
                     "-b", "64", "-e", "256", "-f", "2", "-n", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert [row.split()[0] for row in _rows(out)] == ["64", "128", "256"]
    assert "# Out of bounds values : 0 OK" in out and "# Avg bus bandwidth" in out


def test_json_output_is_only_json(capsys):
    code = cli.main(["bench", "sendrecv", "--world-size", "2", "-b", "32", "-e", "32", "-n", "1", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    (record,) = json.loads(captured.out)
    assert (record["op"], record["size"], record["world_size"], record["oop_wrong"]) == ("sendrecv", 32, 2, 0)


def test_world_size_must_agree_with_torchrun(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cli.main(["bench", "all_reduce", "--world-size", "3"]) == 2
    assert "WORLD_SIZE=2" in capsys.readouterr().err


def test_runs_under_torchrun_and_rank_0_prints(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "--log-dir", str(tmp_path / "torchrun-logs"),  # else torchrun makes /tmp/torchelastic_* and leaves it
         "-m", "labutils", "bench", "all_reduce", "--backend", "gloo", "-b", "8", "-e", "64", "-f", "8", "-n", "2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("# Avg bus bandwidth") == 1
    assert [row.split()[0] for row in _rows(result.stdout)] == ["8", "64"]
    assert "all_reduce on 2 ranks" in result.stdout


def test_wrong_elements_give_exit_status_1(monkeypatch, capsys):
    from labutils.measure import collectives_bench as cb

    real_bench = cb.collective_bench

    def bench_with_a_wrong_element(op, world_size, *sizes, **options):
        (record,) = real_bench(op, world_size, 64, 64, backend="gloo", iters=1)
        return [{**record, "ip_wrong": 1}]

    monkeypatch.setattr(cb, "collective_bench", bench_with_a_wrong_element)
    assert cli.main(["bench", "all_reduce", "-b", "64", "-e", "64"]) == 1
    assert "# Out of bounds values : 1 FAILED" in capsys.readouterr().out
