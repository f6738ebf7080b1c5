"""Hidden tests of lab 5 (pipeline parallelism): GPipe and 1F1B over send/recv.

Each test runs on 4 ranks, as one pipeline of 4 stages and as two pipelines of 2 ({0, 1} and
{2, 3}, each with its own model and batch), with 3 and 6 microbatches. The model is a stack of
4 Linear + tanh layers cut evenly into stages; the loss is the mean squared error of the whole
batch. For every stage the judge checks its parameters' gradients against dense single-process
backpropagation (float64), the last stage's loss, the peak number of microbatches in flight
(m for GPipe; p - stage for 1F1B, at most m) both as the submission counted it and as the
judge measures it from the order of the stage's sends and receives, the bubble of the
schedule the stages ran (that order replayed with ``labutils.costmodel.schedules.simulate``, F = 1,
B = 2: (p-1)/(m+p-1) for both schedules) and the sends and receives of the step, with their
bytes (``send``/``isend`` counted as sends, ``recv``/``irecv`` as receives, all recorded at the
stage's process group, whatever function made them) against
``grading/reference/pipeline_parallel.py``. Each stage receives only what it holds in a
pipeline: its own layers' weights, the microbatches if it is the first stage, the targets if it
is the last (other stages get zeros of the same shapes, so buffers can be shaped after them). Part 2 runs with the submission's own StageP2P
and PipelineStep: 1F1B is where a blocking send deadlocks, so they are part of what it tests.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from labutils.costmodel import schedules

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.rankside import SubmissionProblem
from grading.reference import pipeline_parallel as pp

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = False
PP_SIZES = (2, 4)
NUM_LAYERS, HIDDEN, MICROBATCH = 4, 4, 2
MICROBATCH_COUNTS = (3, 6)  # m < p = 4 too: 1F1B then holds at most m

REFERENCE = {"run_gpipe": pp.run_gpipe, "run_1f1b": pp.run_1f1b}
PEAK = "peak microbatches in flight (as you counted them)"
MEASURED_PEAK = "peak microbatches in flight (measured from the order of your sends and receives)"
BUBBLE = "bubble of the schedule your stages ran (their order replayed with F = 1, B = 2)"
LOSS = "loss returned by the last stage"


def _layout(size: int) -> str:
    return group_layout(f"pp_size={size}", size, WORLD_SIZE)


def _stage_module(num_layers: int) -> nn.Sequential:
    """Linear(H, H), Tanh, Linear(H, H), Tanh, ...: parameter paths "0.weight", "0.bias", "2.weight", ..."""
    layers = []
    for _ in range(num_layers):
        layers += [nn.Linear(HIDDEN, HIDDEN), nn.Tanh()]
    return nn.Sequential(*layers)


def _cases(generator, schedule: str):
    cases = []
    for size in PP_SIZES:
        for m in MICROBATCH_COUNTS:
            groups = [{"weights": torch.randn(NUM_LAYERS, HIDDEN, HIDDEN, generator=generator) * 0.7,
                       "biases": torch.randn(NUM_LAYERS, HIDDEN, generator=generator) * 0.1,
                       "inputs": torch.randn(m, MICROBATCH, HIDDEN, generator=generator),
                       "targets": torch.randn(m, MICROBATCH, HIDDEN, generator=generator)}
                      for _ in range(WORLD_SIZE // size)]
            cases.append(Case(f"{schedule}, {NUM_LAYERS} layers, m={m} microbatches of {MICROBATCH}, {_layout(size)}",
                              size, {"m": m}, groups))
    return cases


def _expected(case, data, peak):
    weights = data["weights"].to(torch.float64).requires_grad_(True)
    biases = data["biases"].to(torch.float64).requires_grad_(True)
    h = data["inputs"].to(torch.float64).reshape(-1, HIDDEN)
    for layer in range(NUM_LAYERS):
        h = torch.tanh(h @ weights[layer].T + biases[layer])
    loss = ((h - data["targets"].to(torch.float64).reshape(-1, HIDDEN)) ** 2).mean()
    loss.backward()
    per_stage = NUM_LAYERS // case.group_size
    expected = []
    for stage in range(case.group_size):
        grads = {}
        for local in range(per_stage):
            layer = stage * per_stage + local
            grads[f"{2 * local}.weight"], grads[f"{2 * local}.bias"] = weights.grad[layer], biases.grad[layer]
        p, m = case.group_size, case.params["m"]  # the bubble of both schedules: arXiv:1811.06965, arXiv:2104.04473
        values = {PEAK: torch.tensor([float(peak(case, stage))], dtype=torch.float64),
                  MEASURED_PEAK: torch.tensor([float(peak(case, stage))], dtype=torch.float64),
                  BUBBLE: torch.tensor([(p - 1) / (m + p - 1)], dtype=torch.float64)}
        if stage == case.group_size - 1:
            values[LOSS] = loss.detach().reshape(1)
        expected.append({"grads": grads, "values": values})
    return expected


def _gpipe_expected(case, data):
    return _expected(case, data, lambda case, stage: case.params["m"])


def _1f1b_expected(case, data):
    return _expected(case, data, lambda case, stage: min(case.group_size - stage, case.params["m"]))


def _stage_data(case, data, group_rank):
    """rank_data: this stage's layers, the inputs on the first stage, the targets on the last."""
    per_stage = NUM_LAYERS // case.group_size
    layers = slice(group_rank * per_stage, (group_rank + 1) * per_stage)
    first, last = group_rank == 0, group_rank == case.group_size - 1
    return {"weights": data["weights"][layers], "biases": data["biases"][layers],
            "inputs": data["inputs"] if first else torch.zeros_like(data["inputs"]),
            "targets": data["targets"] if last else torch.zeros_like(data["targets"])}


def _stage_order(messages, run) -> torch.Tensor:
    """What this stage ran, in order, read off its messages with one neighbour: +1 a forward, -1 a backward.

    A stage that is not the last ends each forward by sending its activation to stage s + 1 and
    starts each backward by receiving its gradient from s + 1; the last stage starts each forward
    by receiving from s - 1 and ends each backward by sending the gradient back to s - 1.
    """
    last = run.group_rank == run.group_size - 1
    neighbour = dist.get_global_rank(run.group, run.group_rank - 1 if last else run.group_rank + 1)
    order = []
    for message in messages:  # recording.Message: what the stage's process group was asked, in order
        if message.peer != neighbour:
            continue
        if message.op == "send":
            order.append(-1.0 if last else 1.0)
        elif message.op == "recv":
            order.append(1.0 if last else -1.0)
    return torch.tensor(order, dtype=torch.float64)


def _peak_of(order: torch.Tensor) -> float:
    """Most forwards done whose backward has not started, over the stage's order."""
    return float(max(0.0, order.cumsum(0).max().item())) if order.numel() else 0.0


def _measure(case, results) -> None:
    """Replay every pipeline's measured orders in simulated time; its bubble into each stage's values."""
    p = case.group_size
    for first in range(0, len(results), p):
        stages = results[first:first + p]
        try:
            plan = []
            for result in stages:
                counts, actions = {"F": 0, "B": 0}, []
                for step in result["order"].tolist():
                    kind = "F" if step > 0 else "B"
                    actions.append(schedules.Action(kind, counts[kind]))
                    counts[kind] += 1
                plan.append(actions)
            bubble = torch.tensor([schedules.simulate(plan, t_forward=1.0, t_backward=2.0).bubble_fraction()],
                                  dtype=torch.float64)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            bubble = f"could not be replayed from the order of the sends and receives ({str(exc)[:150]})"
        for result in stages:
            if isinstance(result, dict) and isinstance(result.setdefault("values", {}), dict):
                result["values"][BUBBLE] = bubble


def _run(objects, case, run, name: str):
    per_stage = NUM_LAYERS // run.group_size
    module = _stage_module(per_stage).to(run.device)
    weights, biases = run.tensor("weights"), run.tensor("biases")
    run.load(module, {path: tensor for local in range(per_stage) for path, tensor in
                      ((f"{2 * local}.weight", weights[local]), (f"{2 * local}.bias", biases[local]))})
    inputs, targets = list(run.tensor("inputs")), list(run.tensor("targets"))
    with run.phase("step"):
        returned = objects[name](module, inputs, targets, run.group)
    try:
        loss, peak, _ = returned
    except (TypeError, ValueError):
        raise SubmissionProblem(f"{name} returned {type(returned).__name__}, "
                                "expected (loss or None, peak, actions)") from None
    result = run.result(None, None)
    try:
        counted = float(peak)
    except (TypeError, ValueError):
        raise SubmissionProblem(f"{name} returned {type(peak).__name__} as the peak in flight, expected a number") from None
    order = _stage_order(run.messages["step"], run)
    result["order"] = order
    result["values"] = {PEAK: torch.tensor([counted], dtype=torch.float64),
                        MEASURED_PEAK: torch.tensor([_peak_of(order)], dtype=torch.float64)}
    if run.group_rank == run.group_size - 1:
        if not isinstance(loss, torch.Tensor):
            raise SubmissionProblem(f"{name} returned a {type(loss).__name__} as the last stage's loss, "
                                    "expected a tensor")
        result["values"][LOSS] = loss.detach().to("cpu", torch.float64).reshape(-1)
    return result


def _gpipe_run(objects, case, run):
    return _run(objects, case, run, "run_gpipe")


def _1f1b_run(objects, case, run):
    return _run(objects, case, run, "run_1f1b")


def _gpipe_cases(generator):
    return _cases(generator, "GPipe")


def _1f1b_cases(generator):
    return _cases(generator, "1F1B")


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_gpipe": TestSpec("Part 1: GPipe", ("run_gpipe",), (), _gpipe_cases, _gpipe_expected, _gpipe_run, WORLD_SIZE,
                           measure=_measure, rank_data=_stage_data),
    "test_1f1b": TestSpec("Part 2: 1F1B", ("run_1f1b",), (), _1f1b_cases, _1f1b_expected, _1f1b_run, WORLD_SIZE,
                          measure=_measure, rank_data=_stage_data),
}
