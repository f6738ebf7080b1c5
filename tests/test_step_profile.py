"""labutils.measure.step_profile: a profiled step taken apart into compute, communication, overlap.

Small hand-made Chrome traces (times in microseconds, as torch.profiler writes them) pin the
interval arithmetic: nested events counted once, communication hidden by compute or not, a
thread's time inside a collective call not counted as compute, a GPU trace whose NCCL kernels
run on their own stream, bad input refused. One real test profiles a DDP step on two gloo ranks.
"""
from __future__ import annotations

import json
import math

import pytest

from labutils.measure import step_profile as sp

MAIN, GLOO = 100, 101  # thread ids


def op(name, ts, dur, tid=MAIN, cat="cpu_op", **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def step(k, ts, dur):
    return op(f"ProfilerStep#{k}", ts, dur, cat="user_annotation")


def trace(*events):
    return {"traceEvents": list(events)}


# ----------------------------------------------------------------------------- intervals


def test_interval_unions():
    assert sp.merge([(5, 7), (0, 2), (1, 3), (7, 8), (4, 4)]) == [(0, 3), (5, 8)]
    assert sp.total([(0, 10), (2, 3), (9, 12)]) == 12
    assert sp.intersect([(0, 5), (8, 10)], [(3, 9)]) == [(3, 5), (8, 9)]
    assert sp.subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert sp.subtract([(0, 2)], [(0, 5)]) == []
    assert sp.clip([(-5, 3), (8, 20)], 0, 10) == [(0, 3), (8, 10)]


# ----------------------------------------------------------------------------- CPU traces (gloo)


def test_nested_compute_is_counted_once_and_hidden_communication_is_not_exposed():
    # step of 100 us; compute 0-60 (with nested ops); gloo's thread all-reduces 20-50, all hidden
    profiles = sp.step_profiles(trace(
        step(3, 0, 100),
        op("aten::linear", 0, 60), op("aten::addmm", 5, 30), op("aten::mm", 10, 10),
        op("gloo:all_reduce", 20, 30, tid=GLOO, cat="user_annotation")))
    (p,) = profiles
    assert p.step == 3 and p.device == "cpu"
    assert p.wall_s == pytest.approx(100e-6)
    assert p.compute_s == pytest.approx(60e-6)
    assert p.comm_s == pytest.approx(30e-6)
    assert p.overlapped_s == pytest.approx(30e-6) and p.exposed_s == 0
    assert p.exposed_fraction == 0 and p.overlapped_fraction_of_comm == 1
    assert p.compute == [(0, pytest.approx(60e-6))]
    assert p.collectives == {"all_reduce": 1} and p.calls == {"gloo:all_reduce": 1}


def test_communication_after_compute_is_exposed():
    (p,) = sp.step_profiles(trace(
        step(1, 1000, 100), op("aten::mm", 1000, 40),
        op("gloo:all_reduce", 1030, 50, tid=GLOO, cat="user_annotation"),     # 1030-1080: 10 us hidden
        op("gloo:all_reduce", 1085, 10, tid=GLOO, cat="user_annotation")))    # fully exposed
    assert p.comm_s == pytest.approx(60e-6)
    assert p.overlapped_s == pytest.approx(10e-6)
    assert p.exposed_s == pytest.approx(50e-6)
    assert p.exposed_fraction == pytest.approx(0.5)
    assert p.exposed == [(pytest.approx(40e-6), pytest.approx(80e-6)), (pytest.approx(85e-6), pytest.approx(95e-6))]
    assert p.collectives == {"all_reduce": 2}


def test_a_collective_call_inside_a_compute_op_is_communication_not_compute():
    # DDP calls c10d::allreduce_ from inside AccumulateGrad: those 20 us are not compute
    (p,) = sp.step_profiles(trace(
        step(2, 0, 100),
        op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 10, 50),
        op("c10d::allreduce_", 30, 20),
        op("gloo:all_reduce", 40, 40, tid=GLOO, cat="user_annotation")))
    assert p.compute_s == pytest.approx(30e-6)                 # 10-30 and 50-60
    assert p.comm_s == pytest.approx(50e-6)                    # 30-80
    assert p.overlapped_s == pytest.approx(10e-6)              # 50-60
    assert p.exposed_s == pytest.approx(40e-6)
    assert p.calls == {"c10d::allreduce_": 1, "gloo:all_reduce": 1}
    assert p.collectives == {"all_reduce": 1}


def test_steps_are_separated_and_events_clipped_to_their_step():
    profiles = sp.step_profiles(trace(
        step(5, 100, 100), step(4, 0, 100),
        op("aten::mm", 0, 150),                                # runs across the boundary
        op("gloo:all_reduce", 180, 40, tid=GLOO, cat="user_annotation"),
        op("ProfilerStep#4", 0, 100, cat="gpu_user_annotation")))  # a GPU copy of the step is not a step
    assert [p.step for p in profiles] == [4, 5]
    first, second = profiles
    assert first.compute_s == pytest.approx(100e-6) and first.comm_s == 0 and first.collectives == {}
    assert second.compute_s == pytest.approx(50e-6)
    assert second.comm_s == pytest.approx(20e-6)               # clipped at the step's end, 200 us
    assert second.collectives == {"all_reduce": 1}


# ----------------------------------------------------------------------------- a GPU trace (NCCL)


def test_gpu_trace_reads_kernels_and_assigns_them_to_the_launching_step():
    runtime = dict(cat="cuda_runtime")
    events = [
        step(7, 0, 100),
        op("cudaLaunchKernel", 10, 2, correlation=1, **runtime),
        op("cudaLaunchKernel", 20, 2, correlation=2, **runtime),
        op("cudaLaunchKernel", 30, 2, correlation=3, **runtime),
        op("c10d::allreduce_", 19, 5), op("record_param_comms", 19, 4),   # host side of the all-reduce
        op("aten::mm", 9, 5),                                             # host ops are not the GPU's compute
        # stream 7: compute 12-60 and 70-90; stream 20: NCCL 50-130, past the host's step end
        op("ampere_sgemm_128x64_nn", 12, 48, tid=7, cat="kernel", correlation=1),
        op("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 50, 80, tid=20,
           cat="kernel", correlation=2),
        op("elementwise_kernel", 70, 20, tid=7, cat="kernel", correlation=3),
        op("ProfilerStep#7", 11, 100, tid=7, cat="gpu_user_annotation"),
    ]
    (p,) = sp.step_profiles(trace(*events))
    assert p.device == "cuda"
    assert p.wall_s == pytest.approx(130e-6)                   # to the end of the step's last kernel
    assert p.compute_s == pytest.approx(68e-6)
    assert p.comm_s == pytest.approx(80e-6)
    assert p.overlapped_s == pytest.approx(30e-6)              # 50-60 and 70-90
    assert p.exposed_s == pytest.approx(50e-6)
    assert p.collectives == {"all_reduce": 1}
    assert p.calls["c10d::allreduce_"] == 1 and "record_param_comms" not in p.calls   # nested: counted once
    assert sum(1 for name in p.calls if name.startswith("ncclDevKernel_AllReduce")) == 1


def test_older_nccl_kernel_names_count_too():
    (p,) = sp.step_profiles(trace(step(1, 0, 50), op("ncclKernel_AllGather_RING_LL_Sum_float", 0, 10,
                                                      tid=9, cat="kernel")))
    assert p.collectives == {"all_gather": 1} and p.comm_s == pytest.approx(10e-6) and p.exposed_s > 0


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="export_chrome_trace"):
        sp.step_profiles(tmp_path / "missing.json")
    (tmp_path / "cut.json").write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match="not JSON"):
        sp.step_profiles(tmp_path / "cut.json")
    for bad in ([], {"events": []}, {"traceEvents": {}}):
        with pytest.raises(ValueError, match="traceEvents"):
            sp.step_profiles(bad)
    with pytest.raises(ValueError, match="ProfilerStep"):
        sp.step_profiles(trace(op("aten::mm", 0, 10)))
    with pytest.raises(ValueError, match="dur"):
        sp.step_profiles(trace(step(1, 0, 10), op("aten::mm", 0, -1)))
    with pytest.raises(ValueError, match="ts"):
        sp.step_profiles(trace(step(1, 0, 10), op("aten::mm", None, 1)))


def test_a_trace_file_is_read(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(trace(step(1, 0, 10), op("aten::mm", 0, 5))))
    (p,) = sp.step_profiles(path)
    assert p.compute_s == pytest.approx(5e-6) and p.comm_s == 0 and p.exposed_fraction == 0


# ----------------------------------------------------------------------------- a real profile


def _profiled_ddp(folder):
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    ddp = DDP(net, bucket_cap_mb=64 * 65 * 4 / 2**20)             # one bucket per layer
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(16, 64)
    path = os.path.join(folder, f"rank{dist.get_rank()}.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(path)) as prof:
        for _ in range(4):
            optimizer.zero_grad()
            ddp(x).square().mean().backward()
            optimizer.step()
            prof.step()
    return path, [p.numel() * p.element_size() for p in reversed(list(net.parameters()))]


@pytest.mark.slow
def test_a_real_ddp_step_on_two_gloo_ranks(tmp_path):
    import labutils
    from labutils import costmodel

    runs = labutils.launch(_profiled_ddp, 2, str(tmp_path), backend="gloo", timeout=120)
    buckets = costmodel.ddp_bucket_sizes(runs[0][1], bucket_cap_mb=64 * 65 * 4 / 2**20)
    assert len(buckets) == 2
    for path, _ in runs:
        profiles = sp.step_profiles(path)
        assert [p.step for p in profiles] == [2, 3]
        for p in profiles:
            assert p.device == "cpu" and p.wall_s > 0 and p.compute_s > 0 and p.comm_s > 0
            assert 0 <= p.exposed_s <= p.comm_s + 1e-12 <= p.wall_s + 2e-12
            assert math.isclose(p.overlapped_s + p.exposed_s, p.comm_s, rel_tol=1e-9, abs_tol=1e-12)
            assert 0 <= p.exposed_fraction <= 1
            assert p.collectives == {"all_reduce": len(buckets)}
            assert p.calls == {"c10d::allreduce_": len(buckets), "gloo:all_reduce": len(buckets)}
