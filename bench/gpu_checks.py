"""`make gpu-check`: on a GPU node, run the GPU tests and benchmarks and append a dated entry to
docs/gpu-results.md.

    python bench/gpu_checks.py                       # what `make gpu-check` runs
    python bench/gpu_checks.py --results /tmp/x.md --skip-tests

It runs, in order: the GPU-marked tests (``pytest -m "gpu or multigpu"``); device memcpy
bandwidth against the datasheet's HBM peak; bf16/fp16/fp32 matmul against the datasheet's
dense tensor peak (labutils.roofline.DEVICES: NVIDIA's H100/H200/A100/... datasheets);
``labutils bench all_reduce`` with one rank per visible GPU (NCCL). Each GPU's clocks, power
and throttle reasons are read before and after. The entry names the date, device, driver,
CUDA and torch versions, the commands and the figures (GB = 1e9 B, GB/s = 1e9 B/s,
TFLOP/s = 1e12 FLOP/s).

Without a usable CUDA GPU it prints one line saying so and exits 0 without writing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "gpu-results.md"
#: the line docs/gpu-results.md holds until the first entry is appended
NOTHING_YET = "Nothing has been measured on a GPU yet: run `make gpu-check` on a GPU node."
ALL_REDUCE_MAX = "1G"


def gpu_absent_reason() -> str | None:
    """Why nothing can be measured here (no visible GPU, CUDA not usable); ``None`` on a GPU node."""
    from labutils.backend import visible_gpu_count
    from labutils.cuda_probe import cuda_health

    if visible_gpu_count() == 0:
        return "no CUDA GPU visible"
    health = cuda_health()
    return None if health.usable else health.reason


def datasheet_device(name: str):
    """The ``labutils.roofline.DEVICES`` entry whose key appears in the GPU's name ("NVIDIA H100 ..." -> h100)."""
    from labutils import roofline

    return next((device for key, device in roofline.DEVICES.items() if key in name.lower()), None)


def environment() -> dict:
    """Device name, driver, CUDA and torch versions, and each visible GPU's clocks and power now."""
    import torch

    from labutils import hardware
    from labutils.gpu_state import gpu_state

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


def run_gpu_tests() -> dict:
    """``pytest -m "gpu or multigpu"``: its command, exit status and summary line."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu or multigpu"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    return {"command": 'pytest -q -m "gpu or multigpu"', "returncode": done.returncode,
            "summary": lines[-1] if lines else "no output"}


def measure_single_gpu(device_name: str) -> dict:
    """memcpy (1 GiB) and matmul (8192^3) on cuda:0, each beside the datasheet's peak."""
    from labutils import bench

    sheet = datasheet_device(device_name)
    copy = bench.memcpy_bandwidth(nbytes=2**30, device="cuda:0")
    memcpy = {"nbytes": copy.nbytes, "read_write_gb_per_s": copy.read_write_gb_per_s,
              "peak_gb_per_s": sheet.mem_bandwidth / 1e9 if sheet else None}
    matmuls = []
    for result in bench.matmul_throughput(sizes=[8192], dtypes=["bfloat16", "float16", "float32"], device="cuda:0"):
        peak = sheet.peak_flops.get({"bfloat16": "bf16", "float16": "fp16"}.get(result.dtype, ""), None) if sheet else None
        matmuls.append({"dtype": result.dtype, "shape": f"{result.m}x{result.n}x{result.k}",
                        "tflop_per_s": result.tflop_per_s, "peak_tflop_per_s": peak / 1e12 if peak else None,
                        "skipped": result.skipped})
    return {"memcpy": memcpy, "matmul": matmuls, "datasheet": sheet.name if sheet else None}


def measure_all_reduce(world_size: int) -> dict:
    """``labutils bench all_reduce`` on every visible GPU: the command, its table and the largest size's busbw."""
    from labutils.collectives_bench import format_nccl_tests

    command = [sys.executable, "-m", "labutils", "bench", "all_reduce", "--world-size", str(world_size),
               "-b", "8", "-e", ALL_REDUCE_MAX, "-f", "2", "--backend", "nccl", "--json"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    try:
        records = json.loads(done.stdout)
    except json.JSONDecodeError:
        records = []
    last = records[-1] if records else {}
    return {"command": " ".join(["labutils"] + command[3:-1]), "returncode": done.returncode,
            "table": format_nccl_tests(records) if records else done.stderr.strip(),
            "largest_size": last.get("size"), "largest_busbw": last.get("ip_busbw")}


def _fraction(value, peak) -> str:
    return f" ({value / peak:.0%} of the datasheet's {peak:,.0f})" if value and peak else ""


def format_entry(figures: dict, today: datetime.date) -> str:
    """The Markdown entry for docs/gpu-results.md from :func:`measure`'s figures."""
    env, single, reduce = figures["environment"], figures["single_gpu"], figures["all_reduce"]
    copy = single["memcpy"]
    lines = [f"## {today.isoformat()}: {env['gpus']} x {env['device']}", "",
             f"Driver {env['driver']} (supports CUDA {env['cuda_driver']}), torch {env['torch']} "
             f"(CUDA {env['torch_cuda']}). Command: `make gpu-check`.", ""]
    if figures.get("tests"):
        lines.append(f"- `{figures['tests']['command']}`: {figures['tests']['summary']}")
    lines.append(f"- memcpy {copy['nbytes'] / 1e9:.2f} GB on cuda:0: {copy['read_write_gb_per_s']:,.0f} GB/s "
                 f"read+write{_fraction(copy['read_write_gb_per_s'], copy['peak_gb_per_s'])}")
    for mm in single["matmul"]:
        text = (f"{mm['tflop_per_s']:,.1f} TFLOP/s{_fraction(mm['tflop_per_s'], mm['peak_tflop_per_s'])}"
                if mm["tflop_per_s"] is not None else f"skipped ({mm['skipped']})")
        lines.append(f"- matmul {mm['shape']} {mm['dtype']}: {text}")
    if reduce.get("largest_busbw") is not None:
        lines.append(f"- all_reduce on {env['gpus']} GPUs, {reduce['largest_size']:,} B: busbw "
                     f"{reduce['largest_busbw']:.1f} GB/s (`{reduce['command']}`)")
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
    """Everything the entry reports, on this GPU node."""
    from labutils.gpu_state import gpu_state, state_text

    env = environment()
    figures = {"environment": env, "tests": run_gpu_tests() if run_tests else None}
    figures["single_gpu"] = measure_single_gpu(env["device"])
    figures["all_reduce"] = measure_all_reduce(max(1, env["gpus"]))
    figures["state_lines"] = {"before": [state_text(s) for s in env["state"]],
                              "after": [state_text(s) for s in gpu_state()]}
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file to append to")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the GPU-marked tests")
    args = parser.parse_args(argv)
    reason = gpu_absent_reason()
    if reason is not None:
        print(f"gpu-check: nothing to measure here ({reason}); {args.results.name} left unchanged")
        return 0
    figures = measure(run_tests=not args.skip_tests)
    append_entry(args.results, format_entry(figures, datetime.date.today()))
    print(f"gpu-check: entry appended to {args.results}")
    return 1 if figures["tests"] and figures["tests"]["returncode"] not in (0, 5) else 0


if __name__ == "__main__":
    raise SystemExit(main())
