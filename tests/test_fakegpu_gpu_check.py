"""`make gpu-check` (bench/gpu_checks.py): the no-GPU path, and the entry it writes from faked figures."""
from __future__ import annotations

import datetime
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakegpu import FABRIC_MANAGER_DOWN, FakeGpuNode, h100s

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_checks.py"

pytestmark = pytest.mark.fakegpu


@pytest.fixture
def gpu_checks():
    spec = importlib.util.spec_from_file_location("gpu_checks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_one_line_exit_0_nothing_written(tmp_path):
    results = tmp_path / "gpu-results.md"
    results.write_text("# GPU results\n\nuntouched\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(SCRIPT), "--results", str(results)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: nothing to measure here (no CUDA GPU visible); gpu-results.md left unchanged"]
    assert results.read_text() == "# GPU results\n\nuntouched\n"


def test_a_node_whose_cuda_cannot_start_is_not_measured(monkeypatch, capsys, tmp_path, gpu_checks):
    FakeGpuNode(monkeypatch, h100s(8), cuda_init_error=FABRIC_MANAGER_DOWN)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    results = tmp_path / "gpu-results.md"
    assert gpu_checks.main(["--results", str(results)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert "Error 802" in line and not results.exists()


def _faked_figures(gpu_checks):
    """The environment read through the faked node, with measured figures made up for the test."""
    from labutils.machine.gpu_state import state_text

    env = gpu_checks.environment()
    sheet = gpu_checks.datasheet_device(env["device"])
    return {
        "environment": env,
        "tests": {"command": 'pytest -q -m "gpu or multigpu"', "returncode": 0, "summary": "12 passed in 40.0s"},
        "single_gpu": {
            "memcpy": {"nbytes": 2**30, "read_write_gb_per_s": 2680.0, "peak_gb_per_s": sheet.mem_bandwidth / 1e9},
            "matmul": [
                {"dtype": "bfloat16", "shape": "8192x8192x8192", "tflop_per_s": 742.0,
                 "peak_tflop_per_s": sheet.peak_flops["bf16"] / 1e12, "skipped": ""},
                {"dtype": "float32", "shape": "8192x8192x8192", "tflop_per_s": 51.0, "peak_tflop_per_s": None,
                 "skipped": ""},
            ],
            "datasheet": sheet.name,
        },
        "all_reduce": {"command": "labutils bench all_reduce --world-size 4 -b 8 -e 1G -f 2 --backend nccl",
                       "returncode": 0, "table": "# (the nccl-tests table)", "largest_size": 2**30,
                       "largest_bw": 361.5, "bw_kind": "busbw"},
        "state_lines": {"before": [state_text(s) for s in env["state"]], "after": [state_text(s) for s in env["state"]]},
    }


def test_entry_names_device_driver_cuda_and_figures(monkeypatch, tmp_path, gpu_checks):
    FakeGpuNode(monkeypatch, h100s(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    figures = _faked_figures(gpu_checks)
    assert figures["environment"]["gpus"] == 4 and figures["single_gpu"]["datasheet"] == "H100 SXM"
    entry = gpu_checks.format_entry(figures, datetime.date(2026, 11, 24))
    lines = entry.splitlines()
    assert lines[0] == "## 2026-11-24: 4 x NVIDIA H100 80GB HBM3"
    assert "Driver 570.124.06 (supports CUDA 12.8), torch" in entry and "(CUDA 12.8)" in entry
    assert '- `pytest -q -m "gpu or multigpu"`: 12 passed in 40.0s' in lines
    assert "- memcpy 1.07 GB on cuda:0: 2,680 GB/s read+write (80% of the datasheet's 3,350)" in lines
    assert "- matmul 8192x8192x8192 bfloat16: 742.0 TFLOP/s (75% of the datasheet's 989)" in lines
    assert "- matmul 8192x8192x8192 float32: 51.0 TFLOP/s" in lines
    assert any(line.startswith("- all_reduce on 4 GPUs, 1,073,741,824 B: busbw 361.5 GB/s") for line in lines)
    assert "before: GPU0 (cuda:0) NVIDIA H100 80GB HBM3: SM 1980/1980 MHz, memory 2619 MHz, 312/700 W" in entry


def test_appending_replaces_the_nothing_yet_line(monkeypatch, tmp_path, gpu_checks):
    results = tmp_path / "gpu-results.md"
    results.write_text((REPO / "docs" / "gpu-results.md").read_text())
    assert gpu_checks.NOTHING_YET in results.read_text()  # the shipped page has measured nothing
    gpu_checks.append_entry(results, "## 2026-11-24: 1 x GPU\n\n- figures\n")
    text = results.read_text()
    assert gpu_checks.NOTHING_YET not in text and text.startswith("# GPU results\n")
    assert text.endswith("\n\n## 2026-11-24: 1 x GPU\n\n- figures\n")
    gpu_checks.append_entry(results, "## 2026-11-25: 1 x GPU\n")
    assert results.read_text().index("2026-11-24") < results.read_text().index("2026-11-25")


def test_one_gpu_all_reduce_reports_algbw_not_a_busbw_of_zero(monkeypatch, gpu_checks):
    FakeGpuNode(monkeypatch, h100s(1))
    figures = _faked_figures(gpu_checks)
    figures["environment"]["gpus"] = 1
    figures["all_reduce"].update(largest_bw=640.0, bw_kind="algbw")
    entry = gpu_checks.format_entry(figures, datetime.date(2026, 11, 24))
    assert "- all_reduce on 1 GPU, 1,073,741,824 B: algbw 640.0 GB/s (busbw is 0 with one rank" in entry
    assert "busbw 0.0" not in entry


def test_single_gpu_benchmarks_run_in_their_own_process_so_nccl_finds_cuda0_empty(monkeypatch, gpu_checks):
    seen = []
    monkeypatch.setattr(gpu_checks, "run_step", lambda command, timeout_s, env=None: seen.append(command) or {
        "returncode": 0, "stdout": '{"memcpy": {}, "matmul": []}\n', "last_line": ""})
    assert gpu_checks.single_gpu_in_subprocess("NVIDIA H100 80GB HBM3", 60) == {"memcpy": {}, "matmul": []}
    assert seen[0][1].endswith("gpu_checks.py") and "--single-gpu-json" in seen[0]


def test_what_could_not_run_is_said_in_the_entry_and_on_the_terminal(monkeypatch, gpu_checks):
    FakeGpuNode(monkeypatch, h100s(1))
    figures = _faked_figures(gpu_checks)
    figures["chapters"] = {1: {"command": "course nightly ...", "returncode": None, "summary": "stopped after 200 s (budget)"}}
    figures["not_run"] = ["an N-rank NCCL launch of the timed chapters (one GPU here)"]
    figures["lab2_judge"] = {"skipped": "lab 2's judge on NCCL needs 4 GPUs (1 visible)"}
    entry = gpu_checks.format_entry(figures, datetime.date(2026, 11, 24))
    assert "- timed chapters on NCCL, 1 rank(s) (`course nightly ...`): NOT FINISHED: stopped after 200 s" in entry
    assert "- lab 2's judge on NCCL: NOT RUN (lab 2's judge on NCCL needs 4 GPUs (1 visible))" in entry
    assert "- NOT RUN: an N-rank NCCL launch of the timed chapters (one GPU here)" in entry
    lines = gpu_checks.not_run_lines(figures)
    assert len(lines) == 3 and any("budget" in line for line in lines)


def test_lab2_judge_step_says_so_when_course_grade_has_no_backend_option(monkeypatch, gpu_checks):
    monkeypatch.setattr(gpu_checks, "run_step", lambda command, timeout_s, env=None: {
        "returncode": 0, "stdout": "usage: course grade lab submissions [--workers N]", "last_line": ""})
    assert gpu_checks.run_lab2_judge(8, 100) == {"skipped": "`course grade` has no --backend option here"}


def test_lab2_judge_on_nccl_needs_four_gpus_and_says_so(monkeypatch, gpu_checks):
    monkeypatch.setattr(gpu_checks, "run_step", lambda command, timeout_s, env=None: {
        "returncode": 0, "stdout": "  --backend {auto,gloo,nccl}", "last_line": ""})
    assert "needs 4 GPUs (2 visible)" in gpu_checks.run_lab2_judge(2, 100)["skipped"]


def test_a_step_past_the_eight_minute_budget_is_not_started(gpu_checks):
    assert gpu_checks.run_step([sys.executable, "-c", "print(1)"], 3)["last_line"].startswith("not run")
    assert gpu_checks.run_step([sys.executable, "-c", "print(1)"], 30)["returncode"] == 0


def test_the_timed_chapters_run_on_nccl_with_the_ranks_asked(monkeypatch, gpu_checks):
    seen = []
    monkeypatch.setattr(gpu_checks, "run_step", lambda command, timeout_s, env=None: seen.append(command) or {
        "returncode": 0, "stdout": "", "last_line": "3 passed"})
    step = gpu_checks.run_timed_chapters(4, 200)
    assert step["returncode"] == 0 and "--world-size 4 --backend nccl" in step["command"]
    assert all(chapter in seen[0] for chapter in gpu_checks.TIMED_CHAPTERS)
    assert step["summary"] == "3 passed"
    assert not os.path.exists(seen[0][seen[0].index("--out") + 1])  # a run that passed leaves nothing behind


def test_a_failed_step_keeps_its_files_and_says_where(monkeypatch, gpu_checks):
    seen = []
    monkeypatch.setattr(gpu_checks, "run_step", lambda command, timeout_s, env=None: seen.append(command) or {
        "returncode": 1, "stdout": "", "last_line": "1 failed, 2 passed"})
    step = gpu_checks.run_timed_chapters(2, 200)
    out = seen[0][seen[0].index("--out") + 1]
    try:
        assert os.path.isdir(out) and step["summary"] == f"1 failed, 2 passed (its files are kept in {out})"
    finally:
        shutil.rmtree(out, ignore_errors=True)

