"""Self-check for chapter 10's communication-bound section: one call prints one line.

    from labutils.checks import comm_bound as check
    check.tp_min_hidden(answer_hidden)

The expected value comes from ``labutils.costmodel`` (``tp_min_hidden``), the H100 peak
from ``labutils.costmodel.roofline.DEVICES`` and the link from ``labutils.machine.interconnects``.
"""
from __future__ import annotations

from labutils import costmodel
from labutils.machine import interconnects
from labutils.costmodel import roofline as rl
from labutils.checks.answers import first_match, number_problem

#: the exercise's tensor-parallel degree
TP_SIZE = 8


def tp_min_hidden(answer) -> None:
    """Exercise: the smallest hidden size h for which TP over 8 H100 SXM GPUs on NVLink4 is
    compute-bound (bf16, ring all-reduces, alpha = 0)."""
    peak = rl.DEVICES["h100"].peak("bf16")
    link = interconnects.link("nvlink4")
    expected = costmodel.tp_min_hidden(TP_SIZE, peak, link.per_direction_Bps)
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: h* = (2/9)(t-1) P/BW = 2/9 x {TP_SIZE - 1} x {peak / 1e12:.0f} TFLOP/s / "
                   f"{link.per_direction_GBps:.0f} GB/s = {expected:,.0f}"),
        (costmodel.tp_min_hidden(TP_SIZE, peak, link.bidirectional_Bps),
         f"you used NVLink's bidirectional {link.bidirectional_GBps:.0f} GB/s: one direction carries half"),
        (2 / 9 * TP_SIZE * peak / link.per_direction_Bps,
         "a ring all-reduce on t ranks sends 2(t-1)/t of the buffer per rank: the factor is t-1, not t"),
        (2 * expected, "that is the 2:4-sparse peak; use the dense one"),
    ], f"not {answer}: equate 72 h^2 D_GPU/(t P) with 4 x 2(t-1)/t x 2 D_GPU h / BW and solve for h", rel_tol=0.02))
