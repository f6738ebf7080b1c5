"""How the inventory, the topology and `labutils doctor` map GPUs to ranks on faked GPU nodes."""
from __future__ import annotations

import json

import pytest
from fakegpu import FABRIC_MANAGER_DOWN, FakeGpuNode, h100, h100s, mig_1g

from labutils.command import cli, doctor
from labutils.machine import hardware, topology
from labutils.measure import collectives_bench
from labutils.machine.gpu_state import gpu_state, state_text, throttle_reasons

pytestmark = pytest.mark.fakegpu

HGX_H100 = topology.example("02").text  # a real 8 x H100 `nvidia-smi topo -m`


def test_masked_gpus_are_tagged_with_their_cuda_ordinal(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8), topo=HGX_H100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    report = hardware.gpu_report()
    assert report.visible_gpus == 4
    assert [gpu.cuda_ordinal for gpu in report.gpus] == [None] * 4 + [0, 1, 2, 3]
    text = report.summary()
    assert "GPU0 [not visible] NVIDIA H100 80GB HBM3, 85.9 GB (80.0 GiB)" in text
    assert "GPU4 [cuda:0] NVIDIA H100 80GB HBM3" in text and "18 NVLinks up" in text
    assert "8 GPUs (driver 570.124.06, supports CUDA 12.8, 4 visible to CUDA here)" in text


def test_topology_summary_marks_the_rows_ranks_use(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8), topo=HGX_H100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,4")
    text = str(hardware.inventory())
    assert "ranks use GPU6 (cuda:0), GPU4 (cuda:1); not visible here: GPU0, GPU1, GPU2, GPU3, GPU5, GPU7" in text
    assert "all 8 GPUs on NVSwitch: NV18 everywhere" in text
    assert "every pair of the 8 GPUs has peer-to-peer access" in text  # torch.cuda's answer, faked


def test_mig_slices_are_listed_with_their_own_memory(monkeypatch):
    slices = [mig_1g(0, 0), mig_1g(0, 1, memory=None)]
    FakeGpuNode(monkeypatch, [h100(0, mig=slices), h100(1)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", slices[1].uuid)
    mig_gpu, whole = hardware.gpu_report().gpus
    assert mig_gpu.mig_enabled and [m.memory_total_bytes for m in mig_gpu.mig_devices] == [10 * 2**30, None]
    assert mig_gpu.nvlinks_up is None  # no NVLink on a GPU in MIG mode
    assert (mig_gpu.cuda_ordinal, mig_gpu.visible_mig_uuid) == (0, slices[1].uuid)
    assert whole.cuda_ordinal is None and whole.mig_enabled is False
    text = mig_gpu.summary()
    assert f"GPU0 [cuda:0 = {slices[1].uuid}]" in text and "MIG mode on, 2 MIG devices" in text
    assert f"{slices[0].uuid} NVIDIA H100 80GB HBM3 MIG 1g.10gb, 10.7 GB (10.0 GiB)" in text
    assert f"{slices[1].uuid} [cuda:0] NVIDIA H100 80GB HBM3 MIG 1g.10gb, memory unknown" in text


def test_memory_unknown_never_crashes(monkeypatch):
    FakeGpuNode(monkeypatch, [h100(0, memory=None)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "GPU0 [cuda:0] NVIDIA H100 80GB HBM3, memory unknown" in hardware.gpu_report().summary()
    assert "memory unknown" in doctor.environment_text()


def test_doctor_prints_ordinals_probe_and_choices(monkeypatch, capsys):
    FakeGpuNode(monkeypatch, h100s(4), topo=topology.example("04").text)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "GPUs        4 (driver 570.124.06, supports CUDA 12.8; 2 visible to CUDA)" in out
    assert "  GPU0 [not visible] NVIDIA H100 80GB HBM3" in out and "  GPU2 [cuda:0] NVIDIA H100 80GB HBM3" in out
    assert "CUDA probe  works: CUDA works (4 devices)" in out
    assert "ranks use GPU2 (cuda:0), GPU3 (cuda:1); not visible here: GPU0, GPU1" in out
    assert "auto with 2 ranks -> nccl (NCCL, one GPU per rank (2 visible))" in out
    assert "auto with 4 ranks -> gloo (gloo on CPU: 4 ranks asked but only 2 GPU(s) visible)" in out


def test_doctor_json_on_a_node_whose_cuda_cannot_start(monkeypatch, capsys):
    FakeGpuNode(monkeypatch, [h100(0, mig=[mig_1g(0, 0)]), h100(1)], cuda_init_error=FABRIC_MANAGER_DOWN)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cli.main(["doctor", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    first, second = env["gpus"]["devices"]
    assert first["cuda"].startswith("cuda:0 = MIG-") and first["mig_enabled"] is True
    assert first["mig_devices"][0]["memory_total_bytes"] == 10 * 2**30 and second["cuda"] == "cuda:1"
    assert env["cuda_probe"]["usable"] is False and "Error 802" in env["cuda_probe"]["reason"]
    assert env["backend"]["2"]["backend"] == "gloo" and "Error 802" in env["backend"]["2"]["reason"]


def test_gpu_state_reads_clocks_power_and_throttle_reasons(monkeypatch):
    gpus = h100s(2)
    gpus[1].clocks.update(sm=1410, throttle=0x4 | 0x20)
    FakeGpuNode(monkeypatch, gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (state,) = gpu_state()
    assert state["gpu"] == 1 and state["cuda_ordinal"] == 0 and state["power_w"] == 312.0
    assert state["throttle_reasons"] == ["software power cap", "software thermal slowdown"]
    assert state_text(state) == ("GPU1 (cuda:0) NVIDIA H100 80GB HBM3: SM 1410/1980 MHz, memory 2619 MHz, "
                                 "312/700 W, 41 C, throttle: software power cap, software thermal slowdown")
    assert throttle_reasons(0) == ["none"] and throttle_reasons(None) is None


def test_benchmark_table_shows_gpu_state_and_memory(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(2))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    record = {"op": "all_reduce", "world_size": 2, "backend": "nccl", "device": "cuda", "size": 2**20,
              "count": 2**18, "type": "float", "redop": "sum", "root": -1, "iters": 20, "warmup": 1,
              "time_across_ranks": "avg", "stat": "mean", "oop_time_us": None, "oop_algbw": None,
              "oop_busbw": None, "oop_wrong": None, "ip_time_us": 20.0, "ip_algbw": 52.4, "ip_busbw": 52.4,
              "ip_wrong": 0, "peak_rss_bytes": [3_000_000, 2_000_000], "peak_cuda_bytes": [2**20, 2**20],
              "gpu_state": gpu_state()}
    text = collectives_bench.format_nccl_tests([record])
    assert "# GPU0 (cuda:0) NVIDIA H100 80GB HBM3: SM 1980/1980 MHz" in text and "# GPU1 (cuda:1)" in text
    assert "warmup iters: 1 at every size (as nccl-tests >= 2.18)" in text
    assert "rank 0 3 MB (2.86x), rank 1 2 MB (1.91x)" in text
    assert "# Peak GPU memory per rank (torch.cuda.max_memory_allocated): rank 0 1 MB, rank 1 1 MB" in text
