"""Self-checks for chapter 1 (cluster metrics): one call per exercise prints a one-line verdict.

    from labutils.checks import metrics as check
    check.mfu(answer_mfu)

Each check computes the expected value from ``labutils`` (``costmodel``, ``roofline``,
``interconnects``), recognises the usual mistakes by the number they produce and names
them; ``None`` means "not answered yet". The ``*_verdict`` functions return the line the
check prints.
"""
from __future__ import annotations

import math
import numbers

from labutils import costmodel, interconnects, roofline

NOT_ANSWERED = "not answered yet"


def _number_or_reason(answer) -> tuple[float | None, str | None]:
    """(the answer as a float, None), or (None, why it is not a number to judge)."""
    if answer is None:
        return None, NOT_ANSWERED
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None, f"give a number, not {answer!r}"
    if not math.isfinite(float(answer)):
        return None, f"give a finite number, not {answer!r}"
    return float(answer), None


def _close(value: float, target: float, rel_tol: float) -> bool:
    return math.isclose(value, target, rel_tol=rel_tol)


# Exercise 1: a 7B model (L = 32, h = 4096, s = 4096) at 8,000 tokens/s on one H100 SXM, BF16.
_MFU_MODEL = dict(num_params=7e9, layers=32, hidden=4096, seq_len=4096)
_MFU_TOKENS_PER_S = 8000


def mfu_verdict(answer) -> str:
    """The verdict :func:`mfu` prints (MFU as a fraction)."""
    value, reason = _number_or_reason(answer)
    if reason:
        return reason
    dense = roofline.DEVICES["h100"].peak("bf16")
    expected = costmodel.mfu(_MFU_TOKENS_PER_S, peak_flops=dense, **_MFU_MODEL)
    if _close(value, expected, 0.02):
        return f"correct: {expected:.3f}"
    if _close(value, expected / 2, 0.02):
        return (f"you divided by the 2:4-sparse peak ({2 * dense / 1e12:,.0f} TFLOP/s); "
                f"MFU uses the dense peak ({dense / 1e12:,.0f})")
    if _close(value, _MFU_TOKENS_PER_S * 6 * _MFU_MODEL["num_params"] / dense, 0.02):
        return "you counted only 6N; add the attention FLOPs 12 L h s per token"
    if _close(value, 100 * expected, 0.02):
        return "give a fraction (0.5 for 50%), not a percentage"
    return f"not {answer}: compute tokens/s x (6N + 12 L h s) / dense peak FLOP/s"


def mfu(answer) -> None:
    """Exercise 1 of chapter 1: print whether ``answer`` is the MFU (a fraction)."""
    print(mfu_verdict(answer))


# Exercise 2: one GPU trains at 1,000 samples/s, 64 GPUs reach 48,000 samples/s.
_SCALING_ONE, _SCALING_N, _SCALING_ALL = 1_000, 64, 48_000


def scaling_verdict(answer) -> str:
    """The verdict :func:`scaling` prints (scaling efficiency as a fraction)."""
    value, reason = _number_or_reason(answer)
    if reason:
        return reason
    expected = costmodel.scaling_efficiency(_SCALING_ALL, _SCALING_N, _SCALING_ONE)
    if _close(value, expected, 0.01):
        return f"correct: {expected:.2f}"
    if _close(value, 1 / expected, 0.01):
        return "that is the ratio upside down: actual / (n x single-GPU throughput), not the reverse"
    if _close(value, _SCALING_ALL / _SCALING_ONE, 0.01):
        return f"that is the speed-up ({_SCALING_ALL / _SCALING_ONE:g}x); divide it by the {_SCALING_N} GPUs"
    if _close(value, 100 * expected, 0.01):
        return "give a fraction (0.5 for 50%), not a percentage"
    return f"not {answer}: efficiency = actual throughput / (n x single-GPU throughput)"


def scaling(answer) -> None:
    """Exercise 2 of chapter 1: print whether ``answer`` is the scaling efficiency (a fraction)."""
    print(scaling_verdict(answer))


# Exercise 3: 4,096 GPUs, each failing once every 50,000 hours; recovery takes 30 minutes.
_GPU_MTBF_H, _JOB_GPUS, _MTTR_H = 50_000, 4096, 0.5


def _up_share(mtbf_hours: float, mttr_hours: float) -> float:
    return mtbf_hours / (mtbf_hours + mttr_hours)


def availability_verdict(answer) -> str:
    """The verdict :func:`availability` prints (the job's availability as a fraction)."""
    value, reason = _number_or_reason(answer)
    if reason:
        return reason
    job_mtbf = _GPU_MTBF_H / _JOB_GPUS
    expected = _up_share(job_mtbf, _MTTR_H)
    if _close(value, expected, 0.005):
        return f"correct: job MTBF {job_mtbf:.1f} h, availability {expected:.3f}"
    if _close(value, _up_share(_GPU_MTBF_H, _MTTR_H), 0.0005):
        return (f"you used one GPU's MTBF; the job stops when ANY of the {_JOB_GPUS:,} fails: "
                f"MTBF_job = {_GPU_MTBF_H:,} h / {_JOB_GPUS:,}")
    if _close(value, _up_share(job_mtbf, 60 * _MTTR_H), 0.005):
        return "MTTR is 30 minutes = 0.5 hours; keep MTBF and MTTR in the same unit"
    if _close(value, 100 * expected, 0.005):
        return "give a fraction (0.99 for 99%), not a percentage"
    return f"not {answer}: availability = MTBF_job / (MTBF_job + MTTR), MTBF_job = MTBF_gpu / n"


def availability(answer) -> None:
    """Exercise 3 of chapter 1: print whether ``answer`` is the job's availability (a fraction)."""
    print(availability_verdict(answer))


# Exercise 4: a 1 GB (1e9 bytes) batch, pinned host memory to GPU over PCIe Gen4 x16.
_BATCH_BYTES = 1e9


def pcie_verdict(answer) -> str:
    """The verdict :func:`pcie` prints (milliseconds to copy the batch)."""
    value, reason = _number_or_reason(answer)
    if reason:
        return reason
    per_direction = interconnects.per_direction("pcie4")
    expected_ms = _BATCH_BYTES / per_direction * 1e3
    if _close(value, expected_ms, 0.03):
        return f"correct: {expected_ms:.1f} ms at {per_direction / 1e9:.1f} GB/s per direction"
    if _close(value, expected_ms / 2, 0.03):
        return (f"that is the time at {2 * per_direction / 1e9:.0f} GB/s: Gen4's figure for both directions "
                f"added (or Gen5's per direction); one copy uses one direction of Gen4 x16, "
                f"{per_direction / 1e9:.1f} GB/s")
    gib_batch_ms = 2**30 / per_direction * 1e3                        # the batch read as 1 GiB
    gib_link_ms = _BATCH_BYTES / (per_direction / 1e9 * 2**30) * 1e3  # the link read as 31.5 GiB/s
    if _close(value, gib_batch_ms, 0.01) or _close(value, gib_link_ms, 0.01):
        return "mixed GB (1e9 B) and GiB (2^30 B): the batch is 1e9 bytes and GB/s is 1e9 B/s"
    if _close(value, expected_ms / 1e3, 0.03):
        return "that is in seconds; give milliseconds"
    return f"not {answer}: time = bytes / per-direction bandwidth (Gen4 x16: 16 GT/s x 16 lanes x 128/130 / 8 bits)"


def pcie(answer) -> None:
    """Exercise 4 of chapter 1: print whether ``answer`` is the copy time in milliseconds."""
    print(pcie_verdict(answer))
