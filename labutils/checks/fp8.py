"""Self-check for chapter 2's FP8 section: one call prints one line.

    from labutils.checks import fp8 as check_fp8
    check_fp8.e4m3_scale(answer_scale)

The expected value comes from ``labutils.kernels.fp8`` (the OCP formats and Transformer Engine's
scale rule).
"""
from __future__ import annotations

from labutils.kernels import fp8
from labutils.checks.answers import first_match, number_problem

#: the exercise's tensor: its largest magnitude
AMAX = 3.5
#: the largest normal of the IEEE-like E4M3 variant with infinities (7 exponent values, bias 7): 1.875 x 2^7
E4M3_IEEE_MAX = 240.0


def e4m3_scale(answer) -> None:
    """Exercise: the per-tensor scale (margin 0) that casts a tensor with amax 3.5 to E4M3."""
    e4m3, e5m2 = fp8.FORMATS["e4m3"], fp8.FORMATS["e5m2"]
    expected = fp8.amax_scale(AMAX, "e4m3")
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: scale = max_normal / amax = {e4m3.max_normal:g} / {AMAX:g} = {expected:g}"),
        (1 / expected, "that is the dequantisation factor 1/s; the scale multiplies x before the cast"),
        (fp8.amax_scale(AMAX, "e5m2"), f"{e5m2.max_normal:g} is E5M2's largest normal; E4M3's is {e4m3.max_normal:g}"),
        (E4M3_IEEE_MAX / AMAX, "240 belongs to an IEEE-style E4M3 with infinities; the OCP E4M3 reaches 448"),
    ], f"not {answer}: scale = max_normal / amax, with E4M3's max_normal from fp8.FORMATS", rel_tol=0.01))
