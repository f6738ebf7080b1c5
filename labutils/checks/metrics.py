"""Self-checks for chapter 1 (cluster metrics): one call per exercise prints a one-line verdict.

    from labutils.checks import metrics as check
    check.mfu(answer_mfu)

Each check computes the expected value from ``labutils`` (``costmodel``, ``roofline``,
``interconnects``), recognises the usual mistakes by the number they produce and names
them; ``None`` means "not answered yet". The ``*_verdict`` functions return the line the
check prints.
"""
from __future__ import annotations

from labutils import costmodel
from labutils.costmodel import roofline
from labutils.machine import interconnects
from labutils.checks.answers import first_match, number_problem


# Exercise 1: a 7B model (L = 32, h = 4096, s = 4096) at 8,000 tokens/s on one H100 SXM, BF16.
_MFU_MODEL = dict(num_params=7e9, layers=32, hidden=4096, seq_len=4096)
_MFU_TOKENS_PER_S = 8000


def mfu_verdict(answer) -> str:
    """The verdict :func:`mfu` prints (MFU as a fraction)."""
    dense = roofline.DEVICES["h100"].peak("bf16")
    expected = costmodel.mfu(_MFU_TOKENS_PER_S, peak_flops=dense, **_MFU_MODEL)
    return number_problem(answer) or first_match(answer, [
        (expected, f"correct: {expected:.3f}"),
        (expected / 2, f"you divided by the 2:4-sparse peak ({2 * dense / 1e12:,.0f} TFLOP/s); "
                       f"MFU uses the dense peak ({dense / 1e12:,.0f})"),
        (_MFU_TOKENS_PER_S * 6 * _MFU_MODEL["num_params"] / dense,
         "you counted only 6N; add the attention FLOPs 12 L h s per token"),
        (100 * expected, "give a fraction (0.5 for 50%), not a percentage"),
    ], f"not {answer}: compute tokens/s x (6N + 12 L h s) / dense peak FLOP/s", rel_tol=0.02)


def mfu(answer) -> None:
    """Exercise 1 of chapter 1: print whether ``answer`` is the MFU (a fraction)."""
    print(mfu_verdict(answer))


# Exercise 2: one GPU trains at 1,000 samples/s, n = 64 GPUs reach 48,000 samples/s.
_SCALING_ONE, _SCALING_N, _SCALING_ALL = 1_000, 64, 48_000


def scaling_verdict(answer) -> str:
    """The verdict :func:`scaling` prints (scaling efficiency as a fraction)."""
    expected = costmodel.scaling_efficiency(_SCALING_ALL, _SCALING_N, _SCALING_ONE)
    return number_problem(answer) or first_match(answer, [
        (expected, f"correct: {expected:.2f}"),
        (1 / expected, "that is the ratio upside down: actual / (n x single-GPU throughput), not the reverse"),
        (_SCALING_ALL / _SCALING_ONE,
         f"that is the speed-up ({_SCALING_ALL / _SCALING_ONE:g}x); divide it by the {_SCALING_N} GPUs"),
        (100 * expected, "give a fraction (0.5 for 50%), not a percentage"),
    ], f"not {answer}: efficiency = actual throughput / (n x single-GPU throughput)", rel_tol=0.01)


def scaling(answer) -> None:
    """Exercise 2 of chapter 1: print whether ``answer`` is the scaling efficiency (a fraction)."""
    print(scaling_verdict(answer))


# Exercise 3: n = 4,096 GPUs, each failing once every 50,000 hours; recovery takes 30 minutes.
_GPU_MTBF_H, _JOB_GPUS, _MTTR_H = 50_000, 4096, 0.5


def _up_share(mtbf_hours: float, mttr_hours: float) -> float:
    return mtbf_hours / (mtbf_hours + mttr_hours)


def availability_verdict(answer) -> str:
    """The verdict :func:`availability` prints (the job's availability as a fraction)."""
    job_mtbf = _GPU_MTBF_H / _JOB_GPUS
    expected = _up_share(job_mtbf, _MTTR_H)
    return number_problem(answer) or first_match(answer, [
        (expected, f"correct: job MTBF {job_mtbf:.1f} h, availability {expected:.3f}"),
        (_up_share(_GPU_MTBF_H, _MTTR_H), f"you used one GPU's MTBF; the job stops when ANY of the {_JOB_GPUS:,} "
                                          f"fails: MTBF_job = {_GPU_MTBF_H:,} h / {_JOB_GPUS:,}"),
        (_up_share(job_mtbf, 60 * _MTTR_H), "MTTR is 30 minutes = 0.5 hours; keep MTBF and MTTR in the same unit"),
        (100 * expected, "give a fraction (0.99 for 99%), not a percentage"),
    ], f"not {answer}: availability = MTBF_job / (MTBF_job + MTTR), MTBF_job = MTBF_gpu / n", rel_tol=0.005)


def availability(answer) -> None:
    """Exercise 3 of chapter 1: print whether ``answer`` is the job's availability (a fraction)."""
    print(availability_verdict(answer))


# Exercise 4: a 1 GB (1e9 bytes) batch, pinned host memory to GPU over PCIe Gen4 x16.
_BATCH_BYTES = 1e9


def pcie_verdict(answer) -> str:
    """The verdict :func:`pcie` prints (milliseconds to copy the batch)."""
    per_direction = interconnects.per_direction("pcie4")
    expected_ms = _BATCH_BYTES / per_direction * 1e3
    gib = "mixed GB (1e9 B) and GiB (2^30 B): the batch is 1e9 bytes and GB/s is 1e9 B/s"
    return number_problem(answer) or first_match(answer, [
        (expected_ms, f"correct: {expected_ms:.1f} ms at {per_direction / 1e9:.1f} GB/s per direction"),
        (expected_ms / 2, f"that is the time at {2 * per_direction / 1e9:.0f} GB/s: Gen4's figure for both "
                          f"directions added (or Gen5's per direction); one copy uses one direction of "
                          f"Gen4 x16, {per_direction / 1e9:.1f} GB/s"),
        (2**30 / per_direction * 1e3, gib),                                  # the batch read as 1 GiB
        (_BATCH_BYTES / (per_direction / 1e9 * 2**30) * 1e3, gib),          # the link read in GiB/s
        (expected_ms / 1e3, "that is in seconds; give milliseconds"),
    ], f"not {answer}: time = bytes / per-direction bandwidth (Gen4 x16: 16 GT/s x 16 lanes x 128/130 / 8 bits)",
        rel_tol=0.03)


def pcie(answer) -> None:
    """Exercise 4 of chapter 1: print whether ``answer`` is the copy time in milliseconds."""
    print(pcie_verdict(answer))
