"""Self-checks for chapter 3 (the roofline): one call per exercise prints one line.

    from labutils.checks import roofline as check
    check.gemm_intensity(answer_intensity)

The expected values come from ``labutils.roofline`` (its datasheet table and op costs).
"""
from __future__ import annotations

from labutils.checks._verdict import close, number_or_reason, say


def gemm_intensity(answer) -> None:
    """Exercise: the arithmetic intensity (FLOP/B, ideal traffic) of a BF16 GEMM, M = N = K = 4096."""
    from labutils import roofline as rl

    value, reason = number_or_reason(answer)
    n, size = 4096, rl.dtype_bytes("bf16")
    expected = rl.gemm(n, n, n, "bf16").intensity
    if reason:
        return say(reason)
    if close(value, expected, 0.01):
        return say(f"correct: 2 N^3 / (3 N^2 x {size} B) = N/3 = {expected:.1f} FLOP/B")
    if close(value, expected / 2, 0.01):
        return say("a multiply-add is 2 FLOPs: the GEMM does 2 M N K FLOPs "
                   "(or you used 4 bytes per element: BF16 is 2)")
    if close(value, 2 * n**3 / (2 * n * n * size), 0.01):
        return say("you counted only the two inputs; the output C (M x N) is written too: 3 matrices")
    if close(value, 2 * expected, 0.01):
        return say("BF16 is 2 bytes per element, not 1")
    say(f"not {answer}: I = 2MNK / ((MK + KN + MN) x 2 bytes)")


def ridge_point(answer) -> None:
    """Exercise: the ridge point (FLOP/B) of an A100 80GB SXM in BF16, from ``roofline.DEVICES``."""
    from labutils import roofline as rl

    value, reason = number_or_reason(answer)
    a100 = rl.DEVICES["a100"]
    expected = rl.ridge_point(a100, "bf16")
    a100_40gb_bandwidth = 1555e9   # B/s, NVIDIA A100 datasheet, 40GB SXM column
    if reason:
        return say(reason)
    if close(value, expected, 0.02):
        return say(f"correct: P / BW = {a100.peak('bf16') / 1e12:.0f} TFLOP/s / {a100.mem_bandwidth / 1e9:,.0f} GB/s "
                   f"= {expected:.0f} FLOP/B")
    if close(value, 2 * expected, 0.02):
        return say("you used the 2:4-sparse peak; the roofline uses the dense one")
    if close(value, expected / 1000, 0.02) or close(value, expected * 1000, 0.02):
        return say("units: divide FLOP/s by B/s (GB/s = 1e9 B/s), not by TB/s or MB/s")
    if close(value, a100.peak("bf16") / a100_40gb_bandwidth, 0.02):
        return say("1,555 GB/s is the A100 40GB; the 80GB SXM has more: read DEVICES['a100'].mem_bandwidth")
    say(f"not {answer}: ridge = dense peak P (FLOP/s) / memory bandwidth BW (B/s)")


def add_time_ms(answer) -> None:
    """Exercise: the least time (ms) for an H100 SXM to add two BF16 vectors of 1e9 elements."""
    from labutils import roofline as rl

    value, reason = number_or_reason(answer)
    h100, n = rl.DEVICES["h100"], 10**9
    op = rl.elementwise(n, "bf16")
    expected = rl.min_time(op, h100, "bf16") * 1e3
    if reason:
        return say(reason)
    if close(value, expected, 0.02):
        return say(f"correct: {expected:.2f} ms: memory bound, {op.bytes:.3g} bytes at "
                   f"{h100.mem_bandwidth / 1e12:.2f} TB/s")
    if close(value, op.flops / h100.peak("bf16") * 1e3, 0.05):
        return say("that is the compute time; the add is memory bound: time = bytes / BW")
    if close(value, 2 * n * 2 / h100.mem_bandwidth * 1e3, 0.02):
        return say("you counted the two inputs; the result c is written too: 3 x 2 bytes per element")
    if close(value, 3 * n * 4 / h100.mem_bandwidth * 1e3, 0.02):
        return say("BF16 is 2 bytes per element, not 4")
    if close(value, expected / 1e3, 0.02) or close(value, expected * 1e3, 0.02):
        return say("give milliseconds (1 ms = 1e-3 s)")
    say(f"not {answer}: T >= max(FLOPs / P, bytes / BW)")


def decode_speedup(answer) -> None:
    """Exercise: speed-up of memory-bound batch-1 decoding from an H100 SXM to an H200 SXM."""
    from labutils import roofline as rl

    value, reason = number_or_reason(answer)
    h100, h200 = rl.DEVICES["h100"], rl.DEVICES["h200"]
    expected = h200.mem_bandwidth / h100.mem_bandwidth
    if reason:
        return say(reason)
    if close(value, expected, 0.02):
        return say(f"correct: {expected:.2f}x, the ratio of HBM bandwidths "
                   f"({h200.mem_bandwidth / 1e12:.2f} / {h100.mem_bandwidth / 1e12:.2f} TB/s)")
    if close(value, h200.peak("bf16") / h100.peak("bf16"), 0.02):
        return say("the peaks are equal, but decoding is memory bound: use the bandwidth ratio")
    if close(value, 1 / expected, 0.02):
        return say("upside down: the H200 is the faster one (speed-up > 1)")
    if close(value, h200.memory_bytes / h100.memory_bytes, 0.02):
        return say("that is the memory capacity ratio; speed follows bandwidth, not capacity")
    say(f"not {answer}: a memory-bound op speeds up by the bandwidth ratio")
