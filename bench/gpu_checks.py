"""`make gpu-check`: on a GPU node, run the GPU tests and benchmarks and append a dated entry to
docs/gpu-results.md.

    python bench/gpu_checks.py                       # what `make gpu-check` runs
    python bench/gpu_checks.py --results /tmp/x.md --skip-tests

It runs, in order, each step with a share of an 8-minute budget: the GPU-marked tests
(``pytest -m "gpu or multigpu"``); in a process of their own (so this one holds no GPU
memory during the NCCL steps), device memcpy bandwidth against the datasheet's HBM peak
(1 GiB, and a cold 16 MiB copy: L2 flushed before every call) and bf16/fp16/fp32 matmul
against the datasheet's dense tensor peak (labutils.costmodel.roofline.DEVICES: NVIDIA's
H100/H200/A100/... datasheets); the timed chapters (1, 8, 10: DDP step, tensor-parallel
MLP, DDP step + all-reduce) QUICK on NCCL with 1 rank and, with 2+ GPUs, one rank per GPU;
``labutils bench all_reduce`` with one rank per visible GPU (NCCL; with one rank the bus
bandwidth is 0 by definition, so the algorithm bandwidth is reported); lab 2's judge on NCCL
(``course grade ... --backend nccl``, which needs 4 GPUs). Each GPU's clocks, power and
throttle reasons are read before and after. The entry names the date, device, driver, CUDA
and torch versions, the commands, the figures (GB = 1e9 B, GB/s = 1e9 B/s, TFLOP/s = 1e12
FLOP/s) and every step it could not run, with why.

Without a usable CUDA GPU it prints one line saying so and exits 0 without writing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "gpu-results.md"
#: the line docs/gpu-results.md holds until the first entry is appended
NOTHING_YET = "Nothing has been measured on a GPU yet: run `make gpu-check` on a GPU node."
ALL_REDUCE_MAX = "1G"
#: the whole check's budget on one H100/H200, seconds
BUDGET_S = 8 * 60
#: the chapters whose timed cells hold collectives
TIMED_CHAPTERS = ("01_clusters_and_metrics", "08_tensor_parallelism", "10_expert_3d_and_strategy")
#: lab 2's judge runs hidden tests on groups of up to this many ranks
JUDGE_RANKS = 4


class Budget:
    """Seconds left of :data:`BUDGET_S`; each step gets its share, and the steps that do not fit say so."""

    def __init__(self, total_s: float = BUDGET_S):
        self.end = time.monotonic() + total_s

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


def run_step(command: list[str], timeout_s: float, env: dict | None = None) -> dict:
    """Run ``command`` from the course root for at most ``timeout_s``: its exit status (None when
    stopped at the limit), stdout and the last line of its output."""
    if timeout_s < 10:
        return {"returncode": None, "stdout": "", "last_line": "not run: the 8-minute budget was spent"}
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "stdout": "", "last_line": f"stopped after {timeout_s:.0f} s (budget)"}
    lines = [line for line in (done.stdout + done.stderr).strip().splitlines() if line.strip()]
    return {"returncode": done.returncode, "stdout": done.stdout, "last_line": lines[-1] if lines else "no output"}


def gpu_absent_reason() -> str | None:
    """Why nothing can be measured here (no visible GPU, CUDA not usable); ``None`` on a GPU node."""
    from labutils.devices.backend import visible_gpu_count
    from labutils.devices.cuda_probe import cuda_health

    if visible_gpu_count() == 0:
        return "no CUDA GPU visible"
    health = cuda_health()
    return None if health.usable else health.reason


def datasheet_device(name: str):
    """The ``labutils.costmodel.roofline.DEVICES`` entry whose key appears in the GPU's name ("NVIDIA H100 ..." -> h100)."""
    from labutils.costmodel import roofline

    return next((device for key, device in roofline.DEVICES.items() if key in name.lower()), None)


def environment() -> dict:
    """Device name, driver, CUDA and torch versions, and each visible GPU's clocks and power now."""
    import torch

    from labutils.machine import hardware
    from labutils.machine.gpu_state import gpu_state

    report = hardware.gpu_report()
    visible = [gpu for gpu in report.gpus if gpu.cuda_ordinal is not None]
    return {
        "device": visible[0].name if visible else "unknown GPU",
        "gpus": len(visible),
        "driver": report.driver_version,
        "cuda_driver": report.cuda_driver_version,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "state": gpu_state(),
    }


def run_gpu_tests(timeout_s: float = 180.0) -> dict:
    """``pytest -m "gpu or multigpu"``: its command, exit status and summary line."""
    done = run_step([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu or multigpu"],
                    timeout_s)
    return {"command": 'pytest -q -m "gpu or multigpu"', "returncode": done["returncode"],
            "summary": done["last_line"]}


def measure_single_gpu(device_name: str) -> dict:
    """memcpy (1 GiB) and matmul (8192^3) on cuda:0, each beside the datasheet's peak."""
    from labutils.measure import bench

    sheet = datasheet_device(device_name)
    copy = bench.memcpy_bandwidth(nbytes=2**30, device="cuda:0")
    cold = bench.memcpy_bandwidth(nbytes=16 * 2**20, device="cuda:0")  # fits in L2: flushed before every call
    memcpy = {"nbytes": copy.nbytes, "read_write_gb_per_s": copy.read_write_gb_per_s,
              "peak_gb_per_s": sheet.mem_bandwidth / 1e9 if sheet else None,
              "cold_16mib_read_write_gb_per_s": cold.read_write_gb_per_s}
    matmuls = []
    for result in bench.matmul_throughput(sizes=[8192], dtypes=["bfloat16", "float16", "float32"], device="cuda:0"):
        peak = sheet.peak_flops.get({"bfloat16": "bf16", "float16": "fp16"}.get(result.dtype, ""), None) if sheet else None
        matmuls.append({"dtype": result.dtype, "shape": f"{result.m}x{result.n}x{result.k}",
                        "tflop_per_s": result.tflop_per_s, "peak_tflop_per_s": peak / 1e12 if peak else None,
                        "skipped": result.skipped})
    return {"memcpy": memcpy, "matmul": matmuls, "datasheet": sheet.name if sheet else None}


def single_gpu_in_subprocess(device_name: str, timeout_s: float) -> dict:
    """:func:`measure_single_gpu` in a process of its own: its CUDA context and cached memory end
    with it, before the NCCL steps use cuda:0. ``{"error": ...}`` when it failed."""
    done = run_step([sys.executable, str(Path(__file__).resolve()), "--single-gpu-json", device_name], timeout_s)
    try:
        return json.loads(done["stdout"].strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": done["last_line"]}


def measure_all_reduce(world_size: int, timeout_s: float = 120.0) -> dict:
    """``labutils bench all_reduce`` on every visible GPU: the command, its table and the largest
    size's bandwidth (busbw; algbw with one rank, where busbw = algbw x 2(n-1)/n is 0)."""
    from labutils.measure.collectives_bench import format_nccl_tests

    command = [sys.executable, "-m", "labutils", "bench", "all_reduce", "--world-size", str(world_size),
               "-b", "8", "-e", ALL_REDUCE_MAX, "-f", "2", "--backend", "nccl", "--json"]
    done = run_step(command, timeout_s)
    try:
        records = json.loads(done["stdout"])
    except json.JSONDecodeError:
        records = []
    last = records[-1] if records else {}
    kind = "busbw" if world_size > 1 else "algbw"
    return {"command": " ".join(["labutils"] + command[3:-1]), "returncode": done["returncode"],
            "table": format_nccl_tests(records) if records else done["last_line"],
            "largest_size": last.get("size"), "largest_bw": last.get(f"ip_{kind}"), "bw_kind": kind}


def run_timed_chapters(world_size: int, timeout_s: float) -> dict:
    """The timed chapters, QUICK, on NCCL with ``world_size`` ranks (``course nightly``): command and outcome."""
    out = Path(tempfile.mkdtemp(prefix="gpu-check-chapters-"))
    command = [sys.executable, "-m", "grading", "nightly", *TIMED_CHAPTERS, "--quick", "--world-size",
               str(world_size), "--backend", "nccl", "--no-grading", "-j", "1", "--out", str(out)]
    done = run_step(command, timeout_s)
    return {"command": f"course nightly {' '.join(TIMED_CHAPTERS)} --quick --world-size {world_size} --backend nccl",
            "returncode": done["returncode"], "summary": done["last_line"] + _removed_unless_failed(out, done)}


def run_lab2_judge(gpus: int, timeout_s: float) -> dict:
    """Lab 2's solution graded by the judge on NCCL; ``{"skipped": why}`` when it cannot run here."""
    helped = run_step([sys.executable, "-m", "grading", "grade", "--help"], 60)
    if "--backend" not in helped["stdout"]:
        return {"skipped": "`course grade` has no --backend option here"}
    if gpus < JUDGE_RANKS:
        return {"skipped": f"lab 2's judge on NCCL needs {JUDGE_RANKS} GPUs ({gpus} visible)"}
    submissions = Path(tempfile.mkdtemp(prefix="gpu-check-lab02-"))
    (submissions / "reference").mkdir()
    shutil.copy(REPO / "solutions" / "lab02_collectives" / "lab02_collectives.ipynb", submissions / "reference")
    done = run_step([sys.executable, "-m", "grading", "grade", "lab02_collectives", str(submissions),
                     "--backend", "nccl", "--course-dir", str(submissions / "course")], timeout_s)
    return {"command": "course grade lab02_collectives <the solution> --backend nccl",
            "returncode": done["returncode"], "summary": done["last_line"] + _removed_unless_failed(submissions, done)}


def _removed_unless_failed(folder: Path, done: dict) -> str:
    """Remove a step's working ``folder`` when the step passed (``run_step``'s ``done``); otherwise
    keep it, to read what failed, and return the words that say where it is ("" when removed)."""
    if done["returncode"] == 0:
        shutil.rmtree(folder, ignore_errors=True)
        return ""
    return f" (its files are kept in {folder})"


def _fraction(value, peak) -> str:
    return f" ({value / peak:.0%} of the datasheet's {peak:,.0f})" if value and peak else ""


def _step_line(name: str, step: dict | None) -> str:
    """"- name (`command`): summary" or "- name: not run (why)"."""
    if not step or "skipped" in step:
        return f"- {name}: NOT RUN ({step['skipped'] if step else 'not asked'})"
    verdict = "passed" if step["returncode"] == 0 else "FAILED" if step["returncode"] is not None else "NOT FINISHED"
    return f"- {name} (`{step['command']}`): {verdict}: {step['summary']}"


def _single_gpu_lines(single: dict) -> list[str]:
    if "error" in single:
        return [f"- single-GPU benchmarks: NOT RUN ({single['error']})"]
    copy = single["memcpy"]
    lines = [f"- memcpy {copy['nbytes'] / 1e9:.2f} GB on cuda:0: {copy['read_write_gb_per_s']:,.0f} GB/s "
             f"read+write{_fraction(copy['read_write_gb_per_s'], copy['peak_gb_per_s'])}"]
    if copy.get("cold_16mib_read_write_gb_per_s"):
        lines.append(f"- memcpy 16 MiB on cuda:0, L2 flushed before every call: "
                     f"{copy['cold_16mib_read_write_gb_per_s']:,.0f} GB/s read+write")
    for mm in single["matmul"]:
        text = (f"{mm['tflop_per_s']:,.1f} TFLOP/s{_fraction(mm['tflop_per_s'], mm['peak_tflop_per_s'])}"
                if mm["tflop_per_s"] is not None else f"skipped ({mm['skipped']})")
        lines.append(f"- matmul {mm['shape']} {mm['dtype']}: {text}")
    return lines


def _all_reduce_line(env: dict, reduce: dict) -> str:
    if reduce.get("largest_bw") is None:
        return f"- all_reduce on {env['gpus']} GPU(s): NOT MEASURED ({reduce.get('table', '')[:200]})"
    if reduce.get("bw_kind") == "algbw":
        return (f"- all_reduce on 1 GPU, {reduce['largest_size']:,} B: algbw {reduce['largest_bw']:.1f} GB/s "
                f"(busbw is 0 with one rank: nothing crosses a link) (`{reduce['command']}`)")
    return (f"- all_reduce on {env['gpus']} GPUs, {reduce['largest_size']:,} B: busbw "
            f"{reduce['largest_bw']:.1f} GB/s (`{reduce['command']}`)")


def format_entry(figures: dict, today: datetime.date) -> str:
    """The Markdown entry for docs/gpu-results.md from :func:`measure`'s figures."""
    env, reduce = figures["environment"], figures["all_reduce"]
    lines = [f"## {today.isoformat()}: {env['gpus']} x {env['device']}", "",
             f"Driver {env['driver']} (supports CUDA {env['cuda_driver']}), torch {env['torch']} "
             f"(CUDA {env['torch_cuda']}). Command: `make gpu-check`.", ""]
    if figures.get("tests"):
        lines.append(f"- `{figures['tests']['command']}`: {figures['tests']['summary']}")
    lines += _single_gpu_lines(figures["single_gpu"])
    lines.append(_all_reduce_line(env, reduce))
    for world_size, step in sorted((figures.get("chapters") or {}).items()):
        lines.append(_step_line(f"timed chapters on NCCL, {world_size} rank(s)", step))
    if "lab2_judge" in figures:
        lines.append(_step_line("lab 2's judge on NCCL", figures["lab2_judge"]))
    lines += [f"- NOT RUN: {what}" for what in figures.get("not_run", [])]
    lines += ["", "GPU state before and after (clocks MHz, power W, throttle reasons):", "", "```"]
    lines += [f"before: {line}" for line in figures["state_lines"]["before"]]
    lines += [f"after:  {line}" for line in figures["state_lines"]["after"]]
    lines += ["```", "", "```", reduce.get("table", "").rstrip(), "```", ""]
    return "\n".join(lines)


def append_entry(path: Path, entry: str) -> None:
    """Append ``entry`` to the results file, dropping the "nothing measured yet" line."""
    text = path.read_text() if path.exists() else "# GPU results\n"
    text = text.replace(NOTHING_YET + "\n", "").rstrip("\n") + "\n\n" + entry.rstrip("\n") + "\n"
    path.write_text(text)


def measure(run_tests: bool = True) -> dict:
    """Everything the entry reports, on this GPU node, within :data:`BUDGET_S`."""
    from labutils.machine.gpu_state import gpu_state, state_text

    budget, env = Budget(), environment()
    gpus = max(1, env["gpus"])
    figures = {"environment": env, "tests": run_gpu_tests(min(180.0, budget.left())) if run_tests else None}
    figures["single_gpu"] = single_gpu_in_subprocess(env["device"], min(90.0, budget.left()))
    figures["all_reduce"] = measure_all_reduce(gpus, min(90.0, budget.left()))
    figures["chapters"] = {1: run_timed_chapters(1, budget.left() / (2 if gpus > 1 else 1))}
    if gpus > 1:
        figures["chapters"][gpus] = run_timed_chapters(gpus, budget.left())
    figures["not_run"] = [] if gpus > 1 else ["an N-rank NCCL launch of the timed chapters (one GPU here)"]
    figures["lab2_judge"] = run_lab2_judge(env["gpus"], budget.left())
    figures["state_lines"] = {"before": [state_text(s) for s in env["state"]],
                              "after": [state_text(s) for s in gpu_state()]}
    return figures


def not_run_lines(figures: dict) -> list[str]:
    """What the check could not run, one line each, for the terminal."""
    lines = list(figures.get("not_run", []))
    judge = figures.get("lab2_judge") or {}
    if "skipped" in judge:
        lines.append(f"lab 2's judge on NCCL: {judge['skipped']}")
    for world_size, step in (figures.get("chapters") or {}).items():
        if step["returncode"] is None:
            lines.append(f"timed chapters on {world_size} rank(s): {step['summary']}")
    if "error" in figures["single_gpu"]:
        lines.append(f"single-GPU benchmarks: {figures['single_gpu']['error']}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file to append to")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the GPU-marked tests")
    parser.add_argument("--single-gpu-json", metavar="DEVICE_NAME", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.single_gpu_json:
        print(json.dumps(measure_single_gpu(args.single_gpu_json)))
        return 0
    reason = gpu_absent_reason()
    if reason is not None:
        print(f"gpu-check: nothing to measure here ({reason}); {args.results.name} left unchanged")
        return 0
    figures = measure(run_tests=not args.skip_tests)
    append_entry(args.results, format_entry(figures, datetime.date.today()))
    print(f"gpu-check: entry appended to {args.results}")
    for line in not_run_lines(figures):
        print(f"gpu-check: could not run: {line}")
    failed = [step for step in [figures["tests"], *figures["chapters"].values(), figures["lab2_judge"]]
              if step and step.get("returncode") not in (0, 5, None) and "skipped" not in step]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
