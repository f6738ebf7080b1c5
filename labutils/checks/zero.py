"""Self-checks for chapter 7 (ZeRO and FSDP): one call per exercise prints a one-line verdict.

    from labutils.checks import zero as check
    check.stage2_memory(answer)

Expected values come from ``labutils.costmodel`` (``zero_memory``, ``zero_comm_bytes``) with
the ZeRO paper's mixed-precision Adam (arXiv:1910.02054: 2 + 2 + 12 bytes per parameter; the
paper writes the parameter count as Psi, the course N); the usual mistakes are named.
GB = 1e9 bytes.
"""
from __future__ import annotations

import math

from labutils import costmodel
from labutils.costmodel import roofline
from labutils.checks.answers import NOT_ANSWERED, first_match, number_problem, whole_number_problem

_MAX_GPUS = 1 << 20
_REL_TOL = 5e-3  # answers given to three significant figures pass


# Exercise 1: 13e9 parameters, ZeRO stage 2, 16 GPUs.
_EX1_PARAMS, _EX1_GPUS = 13e9, 16


def stage2_memory_verdict(answer) -> str:
    """The verdict :func:`stage2_memory` prints (GB of model states per GPU)."""
    by_stage = {row.stage: row.total / 1e9 for row in costmodel.zero_memory_table(_EX1_PARAMS, _EX1_GPUS)}
    expected = by_stage[2]
    wrong_stages = [(total, f"that is stage {stage} ({'DDP' if stage == 0 else 'ZeRO-' + str(stage)}); stage 2 "
                            "shards the optimizer states and the gradients, not the 2N bytes of fp16 parameters")
                    for stage, total in by_stage.items() if stage != 2]
    problem = number_problem(answer, "a number of GB", finite="a finite number of GB", show_type=True)
    return problem or first_match(answer, [
        (expected, f"correct: 2N + 14N/d = 26 + {14 * 13 / 16:g} = {expected:.2f} GB"),
        *wrong_stages,
        (expected * 1e9 / 2**30, "right bytes in GiB (2^30); the course uses GB = 1e9 bytes"),
        (14 * _EX1_PARAMS / _EX1_GPUS / 1e9,
         "you sharded gradients and optimizer states (14N/d) but forgot the unsharded fp16 parameters (2N)"),
    ], "not quite: stage 2 keeps 2N bytes of parameters plus (2 + 12)N/d of gradients and optimizer states",
        rel_tol=_REL_TOL)


def stage2_memory(answer) -> None:
    """Exercise 1 of chapter 7: GB of model states per GPU under ZeRO stage 2."""
    print(stage2_memory_verdict(answer))


# Exercise 2: 30e9 parameters, ZeRO stage 3, H100 memory.
_EX2_PARAMS = 30e9


def _fewest_gpus(stage: int, capacity_bytes: float) -> int:
    """The smallest d whose model states per GPU under ``stage`` fit ``capacity_bytes``."""
    return next(d for d in range(1, _MAX_GPUS)
                if costmodel.zero_memory(_EX2_PARAMS, d, stage).total <= capacity_bytes)


def stage3_gpus_verdict(answer) -> str:
    """The verdict :func:`stage3_gpus` prints (a whole number of GPUs)."""
    if answer is None:
        return NOT_ANSWERED
    if whole_number_problem(answer):
        return "give a whole number of GPUs"
    answer = int(answer)
    capacity = roofline.get_device("h100").memory_bytes / 2**30 * 1e9  # the exercise's "80 GB of an H100"
    expected, stage_2 = _fewest_gpus(3, capacity), _fewest_gpus(2, capacity)
    if answer == expected:
        return f"correct: 16 x 30e9 / d <= {capacity / 1e9:.0f}e9 needs d >= {expected}"
    if answer == stage_2:
        return "that is the answer for stage 2 (2N + 14N/d); stage 3 also shards the fp16 parameters: 16N/d"
    if answer < 1:
        return "give a positive number of GPUs"
    if answer < expected:
        need = costmodel.zero_memory(_EX2_PARAMS, answer, 3).total / 1e9
        return f"with {answer} GPUs each holds 16N/d = {need:.0f} GB, more than {capacity / 1e9:.0f} GB"
    if answer == 2 ** math.ceil(math.log2(expected)):
        return f"{answer} fits, but it is not the smallest: d need not be a power of two"
    return f"{answer} GPUs fit, but fewer do too: solve 16 x 30e9 / d <= {capacity / 1e9:.0f}e9"


def stage3_gpus(answer) -> None:
    """Exercise 2 of chapter 7: the fewest GPUs that hold a 30e9-parameter model under stage 3."""
    print(stage3_gpus_verdict(answer))


# Exercise 3: 7.5e9 parameters, ZeRO stage 3, 64 GPUs, bf16 on the wire.
_EX3_PARAMS, _EX3_GPUS, _EX3_BYTES = 7.5e9, 64, 2


def stage3_traffic_verdict(answer) -> str:
    """The verdict :func:`stage3_traffic` prints (GB one GPU sends per step)."""
    expected = costmodel.zero_comm_bytes(_EX3_PARAMS, _EX3_GPUS, 3, bytes_per_value=_EX3_BYTES) / 1e9
    stage_2 = costmodel.zero_comm_bytes(_EX3_PARAMS, _EX3_GPUS, 2, bytes_per_value=_EX3_BYTES) / 1e9
    problem = number_problem(answer, "a number of GB", finite="a finite number of GB", show_type=True)
    return problem or first_match(answer, [
        (expected, f"correct: 3 x (d-1)/d x N x 2 bytes = {expected:.2f} GB"),
        (stage_2, "that is DDP or stages 1-2 (2N); stage 3 all-gathers the parameters again in backward: 3 passes"),
        (3 * _EX3_PARAMS * _EX3_BYTES / 1e9,
         "that is the d -> infinity limit 3N; each ring pass moves (d-1)/d of the buffer, 63/64 here"),
        (expected / _EX3_BYTES, "count bytes, not parameters: bf16 is 2 bytes per value"),
        (expected * _EX3_GPUS, "that is the traffic summed over all 64 GPUs; the step time depends on one GPU's share"),
    ], "not quite: stage 3 makes three ring passes over the parameter bytes, each (d-1)/d of them", rel_tol=_REL_TOL)


def stage3_traffic(answer) -> None:
    """Exercise 3 of chapter 7: GB one GPU sends per step under ZeRO stage 3."""
    print(stage3_traffic_verdict(answer))


# Exercise 4: a checkpoint every 500 steps of 2.0 s, a rank lost at the start of step 1,730, a
# 6-minute restart (the failure-and-restart cost of 7.10).
_EX4_EVERY, _EX4_STEP_S, _EX4_KILLED_AT, _EX4_RESTART_S = 500, 2.0, 1730, 360.0


def failure_cost_verdict(answer) -> str:
    """The verdict :func:`failure_cost` prints (seconds of wall time one failure costs)."""
    last_checkpoint = _EX4_KILLED_AT // _EX4_EVERY * _EX4_EVERY
    redone_s = (_EX4_KILLED_AT - last_checkpoint) * _EX4_STEP_S
    expected = redone_s + _EX4_RESTART_S
    problem = number_problem(answer, "a number of seconds", finite="a finite number of seconds", show_type=True)
    return problem or first_match(answer, [
        (expected, f"correct: steps {last_checkpoint}-{_EX4_KILLED_AT - 1} run again "
                   f"({redone_s:g} s) plus the restart ({_EX4_RESTART_S:g} s) = {expected:g} s"),
        (redone_s, "that is the work done again; the restart itself (start, rendezvous, load) adds 360 s"),
        (_EX4_RESTART_S, "that is the restart alone; the steps since the last checkpoint must also run again"),
        ((_EX4_KILLED_AT - last_checkpoint + 1) * _EX4_STEP_S + _EX4_RESTART_S,
         f"one step too many: the job resumes at step {last_checkpoint}, the first step after the checkpoint, "
         f"and the failure came at the start of step {_EX4_KILLED_AT}"),
        (_EX4_EVERY / 2 * _EX4_STEP_S + _EX4_RESTART_S,
         "that is the average over failures (T/2 lost, 7.9); this failure's step is known"),
        (_EX4_EVERY * _EX4_STEP_S + _EX4_RESTART_S,
         "that is a whole interval; only the steps since the last checkpoint are lost"),
        (expected / 60, "right amount in minutes; the question asks for seconds"),
    ], "not quite: the job goes back to the last checkpoint before the failure, redoes the steps since, "
       "and pays the restart once", rel_tol=1e-3)  # one step (2 s) is 0.24% of the answer


def failure_cost(answer) -> None:
    """Exercise 4 of chapter 7: seconds of wall time one failure costs."""
    print(failure_cost_verdict(answer))
