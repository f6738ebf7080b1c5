"""Self-checks for chapter 3 (the roofline): one call per exercise prints one line.

    from labutils.checks import roofline as check
    check.gemm_intensity(answer_intensity)

The expected values come from ``labutils.costmodel.roofline`` (its datasheet table and op costs).
"""
from __future__ import annotations

from labutils.costmodel import roofline as rl
from labutils.checks.answers import first_match, number_problem

#: B/s, NVIDIA A100 datasheet, 40GB SXM column: the A100 a ridge-point answer is often taken from
A100_40GB_BANDWIDTH = 1555e9


def gemm_intensity(answer) -> None:
    """Exercise: the arithmetic intensity (FLOP/B, ideal traffic) of a BF16 GEMM, M = N = K = 4096."""
    n, size = 4096, rl.dtype_bytes("bf16")
    expected = rl.gemm(n, n, n, "bf16").intensity
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: 2 N^3 / (3 N^2 x {size} B) = N/3 = {expected:.1f} FLOP/B"),
        (expected / 2, "a multiply-add is 2 FLOPs: the GEMM does 2 M N K FLOPs (or you used 4 bytes per element: "
                       "BF16 is 2)"),
        (2 * n**3 / (2 * n * n * size), "you counted only the two inputs; the output C (M x N) is written too: 3 matrices"),
        (2 * expected, "BF16 is 2 bytes per element, not 1"),
    ], f"not {answer}: I = 2MNK / ((MK + KN + MN) x 2 bytes)", rel_tol=0.01))


def ridge_point(answer) -> None:
    """Exercise: the ridge point (FLOP/B) of an A100 80GB SXM in BF16, from ``roofline.DEVICES``."""
    a100 = rl.DEVICES["a100"]
    expected = rl.ridge_point(a100, "bf16")
    units = "units: divide FLOP/s by B/s (GB/s = 1e9 B/s), not by TB/s or MB/s"
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: P / BW = {a100.peak('bf16') / 1e12:.0f} TFLOP/s / {a100.mem_bandwidth / 1e9:,.0f} "
                   f"GB/s = {expected:.0f} FLOP/B"),
        (2 * expected, "you used the 2:4-sparse peak; the roofline uses the dense one"),
        (expected / 1000, units),
        (expected * 1000, units),
        (a100.peak("bf16") / A100_40GB_BANDWIDTH,
         "1,555 GB/s is the A100 40GB; the 80GB SXM has more: read DEVICES['a100'].mem_bandwidth"),
    ], f"not {answer}: ridge = dense peak P (FLOP/s) / memory bandwidth BW (B/s)", rel_tol=0.02))


def add_time_ms(answer) -> None:
    """Exercise: the least time (ms) for an H100 SXM to add two BF16 vectors of 1e9 elements."""
    h100, n = rl.DEVICES["h100"], 10**9
    op = rl.elementwise(n, "bf16")
    expected = rl.min_time(op, h100, "bf16") * 1e3
    bandwidth_ms = 1e3 / h100.mem_bandwidth                   # milliseconds per byte
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: {expected:.2f} ms: memory bound, {op.bytes:.3g} bytes at "
                   f"{h100.mem_bandwidth / 1e12:.2f} TB/s"),
        (op.flops / h100.peak("bf16") * 1e3, "that is the compute time; the add is memory bound: time = bytes / BW"),
        (2 * n * 2 * bandwidth_ms, "you counted the two inputs; the result c is written too: 3 x 2 bytes per element"),
        (3 * n * 4 * bandwidth_ms, "BF16 is 2 bytes per element, not 4"),
        (expected / 1e3, "give milliseconds (1 ms = 1e-3 s)"),
    ], f"not {answer}: T >= max(FLOPs / P, bytes / BW)", rel_tol=0.02))


def decode_speedup(answer) -> None:
    """Exercise: speed-up of memory-bound batch-1 decoding from an H100 SXM to an H200 SXM."""
    h100, h200 = rl.DEVICES["h100"], rl.DEVICES["h200"]
    expected = h200.mem_bandwidth / h100.mem_bandwidth
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: {expected:.2f}x, the ratio of HBM bandwidths "
                   f"({h200.mem_bandwidth / 1e12:.2f} / {h100.mem_bandwidth / 1e12:.2f} TB/s)"),
        (h200.peak("bf16") / h100.peak("bf16"), "the peaks are equal, but decoding is memory bound: use the bandwidth ratio"),
        (1 / expected, "upside down: the H200 is the faster one (speed-up > 1)"),
        (h200.memory_bytes / h100.memory_bytes, "that is the memory capacity ratio; speed follows bandwidth, not capacity"),
    ], f"not {answer}: a memory-bound op speeds up by the bandwidth ratio", rel_tol=0.02))
