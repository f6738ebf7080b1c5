"""labutils.measure.bench: single-device copy, transfer, matmul and op measurements (CPU; GPU tests marked)."""
from __future__ import annotations

import time

import pytest
import torch

from labutils.costmodel import roofline
from labutils.measure import bench

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


def test_timing_statistics():
    timing = bench.Timing((0.3, 0.1, 0.2, 0.5))
    assert timing.median_s == pytest.approx(0.25)
    assert timing.min_s == 0.1 and timing.max_s == 0.5
    assert timing.spread == pytest.approx((0.5 - 0.1) / 0.25)


def test_time_iterations_warms_up_then_times_each_call():
    calls = []
    timing = bench.time_iterations(lambda: (calls.append(1), time.sleep(0.002)), torch.device("cpu"), 4, 3)
    assert len(calls) == 7
    assert len(timing.samples_s) == 4
    assert timing.min_s >= 0.002


@pytest.mark.parametrize("iters, warmup", [(0, 1), (2, -1), (1.5, 0)])
def test_time_iterations_rejects_bad_counts(iters, warmup):
    with pytest.raises(ValueError, match="iters|warmup"):
        bench.time_iterations(lambda: None, torch.device("cpu"), iters, warmup)


def test_memcpy_reports_copied_and_read_write_bandwidth():
    result = bench.memcpy_bandwidth(nbytes=2**20, device="cpu", iters=3, warmup=1)
    assert result.nbytes == 2**20 and result.device == "cpu"
    assert len(result.timing.samples_s) == 3
    assert result.copied_gb_per_s == pytest.approx(2**20 / result.timing.median_s / 1e9)
    assert result.read_write_gb_per_s == pytest.approx(2 * result.copied_gb_per_s)
    text = str(result)
    assert "copied" in text and "read+write" in text


@pytest.mark.parametrize("nbytes", [0, -5, 1.5])
def test_memcpy_rejects_bad_sizes(nbytes):
    with pytest.raises(ValueError, match="nbytes"):
        bench.memcpy_bandwidth(nbytes=nbytes, device="cpu")


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unsupported device"):
        bench.memcpy_bandwidth(nbytes=64, device="meta")


@needs_no_gpu
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        bench.memcpy_bandwidth(nbytes=64, device="cuda")


@needs_no_gpu
@pytest.mark.parametrize("pinned, direction", [(True, "h2d"), (False, "d2h")])
def test_host_device_without_gpu_says_so(pinned, direction):
    result = bench.host_device_bandwidth(nbytes=1024, pinned=pinned, direction=direction)
    assert not result.measured and result.gb_per_s is None
    assert result.reason == "no GPU: host-device copy not measurable"
    assert "no GPU" in str(result)


def test_host_device_checks_direction_even_without_gpu():
    with pytest.raises(ValueError, match="direction"):
        bench.host_device_bandwidth(direction="up")


def test_matmul_counts_two_mnk_flops():
    results = bench.matmul_throughput(sizes=[(16, 8, 4), 8], dtypes=["float32", "bf16"], device="cpu",
                                      iters=2, warmup=1)
    assert [(r.m, r.n, r.k, r.dtype) for r in results] == [
        (16, 8, 4, "float32"), (8, 8, 8, "float32"), (16, 8, 4, "bfloat16"), (8, 8, 8, "bfloat16")]
    first = results[0]
    assert first.flops == 2 * 16 * 8 * 4
    assert first.flop_per_s == pytest.approx(first.flops / first.timing.median_s)
    assert first.tflop_per_s == pytest.approx(first.flop_per_s / 1e12)
    assert "TFLOP/s" in str(first)


def test_matmul_reports_a_dtype_the_device_cannot_run(monkeypatch):
    monkeypatch.setattr(bench, "unsupported_reason",
                        lambda dtype, device: "no bf16 here" if dtype == torch.bfloat16 else "")
    results = bench.matmul_throughput(sizes=[8], dtypes=["float32", "bfloat16"], device="cpu", iters=1, warmup=0)
    measured, skipped = results
    assert measured.timing is not None and measured.skipped == ""
    assert skipped.timing is None and skipped.tflop_per_s is None and skipped.skipped == "no bf16 here"
    assert "skipped (no bf16 here)" in str(skipped)


def test_cpu_runs_float32_and_bfloat16_by_default():
    assert bench.unsupported_reason(torch.float32, torch.device("cpu")) == ""
    assert bench.unsupported_reason(torch.bfloat16, torch.device("cpu")) == ""


@pytest.mark.parametrize("kwargs, match", [({"dtypes": ["fp12"]}, "unknown dtype"),
                                           ({"sizes": [(4, 4)]}, "matmul size"),
                                           ({"sizes": [0]}, "matmul size")])
def test_matmul_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bench.matmul_throughput(device="cpu", **kwargs)


def test_op_throughput_uses_roofline_counts():
    results = bench.op_throughput(shape=(8, 16), dtype="float32", device="cpu", iters=2, warmup=1)
    expected = {
        "add": roofline.elementwise(128, "fp32", reads=2, writes=1),
        "softmax": roofline.softmax(8, 16, "fp32"),
        "layernorm": roofline.layernorm(8, 16, "fp32"),
    }
    assert [r.op for r in results] == list(bench.OPS)
    for r in results:
        assert (r.flops, r.nbytes) == (expected[r.op].flops, expected[r.op].bytes)
        assert r.intensity == pytest.approx(expected[r.op].intensity)
        assert r.flop_per_s == pytest.approx(r.flops / r.timing.median_s)
        assert r.bytes_per_s == pytest.approx(r.nbytes / r.timing.median_s)
    # the byte counts by hand: add reads 2 and writes 1 fp32 tensor; layernorm adds weight and bias
    assert expected["add"].bytes == 3 * 128 * 4
    assert expected["layernorm"].bytes == (2 * 128 + 2 * 16) * 4


@pytest.mark.parametrize("kwargs, match", [({"ops": ["gelu"]}, "unknown op"), ({"dtype": "int32"}, "floating"),
                                           ({"shape": (4,)}, "rows, cols")])
def test_op_throughput_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bench.op_throughput(device="cpu", **kwargs)


#: The most one call with the CPU defaults may move (bytes read and written) and compute (FLOP), warm-up
#: included: under 2 s on a core that copies 1 GB/s and multiplies at 1 GFLOP/s, far slower than a laptop.
CPU_CALL_BUDGET = {"bytes": 2e9, "flops": 2e9}


def _calls(timing) -> int:
    """Calls behind one CPU measurement: its timed samples and the defaults' warm-up calls."""
    return len(timing.samples_s) * timing.calls_per_sample + bench._CPU_DEFAULTS["warmup"]


@needs_no_gpu
def test_cpu_defaults_are_quick():
    """The CPU defaults stay small, judged by the work each call does (not by a clock: a busy machine
    must not fail it): a 16 MiB copy, 128 and 256 matmuls, 2048 x 2048 elementwise ops."""
    copy = bench.memcpy_bandwidth()
    matmuls = bench.matmul_throughput()
    ops = bench.op_throughput()
    moved = {"copy": 2 * copy.nbytes * _calls(copy.timing),
             "ops": sum(op.nbytes * _calls(op.timing) for op in ops)}
    computed = sum(m.flops * _calls(m.timing) for m in matmuls if m.timing)
    assert all(0 < n <= CPU_CALL_BUDGET["bytes"] for n in moved.values()), moved
    assert 0 < computed <= CPU_CALL_BUDGET["flops"], computed


@pytest.mark.gpu
@needs_gpu
def test_gpu_copy_and_transfers_are_measured():
    copy = bench.memcpy_bandwidth(nbytes=64 * 2**20, device="cuda", iters=5, warmup=2)
    assert copy.device.startswith("cuda") and copy.read_write_gb_per_s > 0
    for pinned in (True, False):
        for direction in ("h2d", "d2h"):
            result = bench.host_device_bandwidth(nbytes=16 * 2**20, pinned=pinned, direction=direction, iters=3)
            assert result.measured and result.gb_per_s > 0


@pytest.mark.gpu
@needs_gpu
def test_gpu_matmul_reports_every_dtype():
    results = bench.matmul_throughput(sizes=[512], iters=3, warmup=1)
    assert {r.dtype for r in results} == {"float32", "bfloat16", "float16"}
    assert all(r.tflop_per_s > 0 or r.skipped for r in results)


def test_op_throughput_writes_into_preallocated_outputs():
    # A fresh output per call would time page faults (outputs over 32 MiB are mmapped on Linux).
    for dtype in ("float32", "bfloat16"):
        results = bench.op_throughput(shape=(64, 256), dtype=dtype, iters=2, warmup=1)
        assert [r.op for r in results] == ["add", "softmax", "layernorm"]
    from labutils.measure.bench import _op_function

    x = torch.randn(8, 16)
    for op, expected in (("add", x + 1), ("softmax", torch.softmax(x, -1)),
                         ("layernorm", torch.nn.functional.layer_norm(x, (16,)))):
        run = _op_function(op, x)
        first = run()
        assert torch.allclose(first, expected, atol=1e-5), op
        if op != "layernorm":
            assert run().data_ptr() == first.data_ptr(), op  # the same output buffer every call


def test_layernorm_moves_the_bytes_the_roofline_counts():
    """The timed layernorm is the fused kernel alone: aten.native_layer_norm.out computes into a new
    tensor and copies it out (three copy_ calls, about twice the bytes roofline.layernorm counts)."""
    from torch.profiler import profile

    from labutils.measure.bench import _op_function

    run = _op_function("layernorm", torch.randn(64, 256))
    with profile() as trace:
        run()
    names = [event.name for event in trace.events()]
    assert "aten::native_layer_norm" in names and "aten::copy_" not in names


def test_calls_per_batch_keeps_launch_cost_out():
    # a 5 us op: 200 calls make the 1 ms batch; a 2 ms op: one call is enough; a tiny op is capped
    assert bench.calls_per_batch(5e-6) == 200
    assert bench.calls_per_batch(2e-3) == 1
    assert bench.calls_per_batch(1e-9) == bench.MAX_CALLS_PER_BATCH == bench.calls_per_batch(0.0)
    assert bench.Timing((1.0, 2.0), calls_per_sample=50).calls_per_sample == 50


@pytest.mark.fakegpu
def test_l2_size_comes_from_the_device_properties(monkeypatch):
    import types

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(L2_cache_size=60 * 2**20))
    assert bench.l2_cache_bytes(torch.device("cuda", 0)) == 60 * 2**20
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace())
    assert bench.l2_cache_bytes(torch.device("cuda", 0)) == bench.DEFAULT_L2_BYTES == 50 * 2**20
