"""Every GPU path of labutils in one run, printed as a Markdown section for docs/gpu-results.md.

    python bench/gpu_checks.py > /tmp/section.md       # on a GPU node (or the lent device)

Runs: `labutils doctor`'s environment, the NVML inventory and `nvidia-smi topo -m`, device
memcpy bandwidth, host-device bandwidth pinned vs pageable, matmul throughput per dtype,
elementwise/softmax/layernorm throughput, and an NCCL all-reduce and all-gather benchmark
with one rank per visible GPU. On a CPU-only machine it runs the CPU paths and says so.
"""
from __future__ import annotations

import datetime
import sys

import torch

import labutils
from labutils import bench, collectives_bench, doctor, hardware


def section(title: str, body: str) -> None:
    print(f"\n### {title}\n\n```\n{body.rstrip()}\n```")


def main() -> int:
    gpus = labutils.backend.visible_gpu_count()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU only"
    print(f"## {datetime.date.today().isoformat()}: {name} ({gpus} GPU(s) visible)")
    print(f"\nCommand: `{' '.join([sys.executable.rsplit('/', 1)[-1]] + sys.argv)}`")
    section("Environment (labutils doctor)", doctor.environment_text())
    section("Inventory (NVML, /sys)", str(hardware.inventory()))
    topo = hardware.live_topology()
    section("nvidia-smi topo -m (parsed summary)", topo.summary() if topo is not None else "no nvidia-smi")
    big = device == "cuda"
    section("Device memcpy bandwidth", str(bench.memcpy_bandwidth(nbytes=(2 << 30) if big else None)))
    for pinned in (True, False):
        for direction in ("h2d", "d2h"):
            section(f"Host-device copy, {'pinned' if pinned else 'pageable'} {direction}",
                    str(bench.host_device_bandwidth(pinned=pinned, direction=direction)))
    sizes = [1024, 4096, 8192] if big else None
    dtypes = ["float32", "bfloat16", "float16"] if big else None
    section("Matmul throughput", "\n".join(str(r) for r in bench.matmul_throughput(sizes=sizes, dtypes=dtypes)))
    section("Memory-bound ops", "\n".join(str(r) for r in bench.op_throughput()))
    world = max(1, gpus)
    for op in ("all_reduce", "all_gather"):
        records = collectives_bench.collective_bench(op, world, 8, "256M" if big else "1M", 2)
        section(f"{op} on {world} rank(s), backend auto", collectives_bench.format_nccl_tests(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
