"""Hidden tests of lab 5 (pipeline parallelism): GPipe and 1F1B over send/recv.

Each test runs on 4 ranks, as one pipeline of 4 stages and as two pipelines of 2 ({0, 1} and
{2, 3}, each with its own model and batch), with 3 and 6 microbatches. The model is a stack of
4 Linear + tanh layers cut evenly into stages; the loss is the mean squared error of the whole
batch. For every stage the judge checks its parameters' gradients against dense single-process
backpropagation (float64), the last stage's loss, the peak number of microbatches in flight
(m for GPipe; p - stage for 1F1B, at most m) and the sends and receives of the step
(``send``/``isend`` counted as sends, ``recv``/``irecv`` as receives) against
``grading/reference/pipeline_parallel.py``. Part 2 runs with the submission's own StageP2P
and PipelineStep: 1F1B is where a blocking send deadlocks, so they are part of what it tests.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from judge.engine import Case, TestSpec
from judge.rankside import SubmissionProblem
from reference import pipeline_parallel as pp

WORLD_SIZE = 4
PP_SIZES = (2, 4)
NUM_LAYERS, HIDDEN, MICROBATCH = 4, 4, 2
MICROBATCH_COUNTS = (3, 6)  # m < p = 4 too: 1F1B then holds at most m

REFERENCE = {"run_gpipe": pp.run_gpipe, "run_1f1b": pp.run_1f1b}


def _layout(size: int) -> str:
    if size == WORLD_SIZE:
        return f"pp_size={size}"
    groups = " and ".join("{" + ", ".join(map(str, range(s, s + size))) + "}" for s in range(0, WORLD_SIZE, size))
    return f"pp_size={size} (groups {groups})"


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
    per_stage = NUM_LAYERS // case.tp_size
    expected = []
    for stage in range(case.tp_size):
        grads = {}
        for local in range(per_stage):
            layer = stage * per_stage + local
            grads[f"{2 * local}.weight"], grads[f"{2 * local}.bias"] = weights.grad[layer], biases.grad[layer]
        values = {"peak microbatches in flight": torch.tensor([float(peak(case, stage))], dtype=torch.float64)}
        if stage == case.tp_size - 1:
            values["loss returned by the last stage"] = loss.detach().reshape(1)
        expected.append({"grads": grads, "values": values})
    return expected


def _gpipe_expected(case, data):
    return _expected(case, data, lambda case, stage: case.params["m"])


def _1f1b_expected(case, data):
    return _expected(case, data, lambda case, stage: min(case.tp_size - stage, case.params["m"]))


def _messages(calls: dict) -> dict:
    merged: dict = {}
    for op, count in calls.items():
        key = {"isend": "send", "irecv": "recv"}.get(op, op)
        merged[key] = merged.get(key, 0) + count
    return merged


def _run(objects, case, run, name: str):
    per_stage = NUM_LAYERS // run.tp_size
    module = _stage_module(per_stage).to(run.device)
    weights, biases = run.tensor("weights"), run.tensor("biases")
    run.load(module, {path: tensor for local in range(per_stage) for path, tensor in
                      ((f"{2 * local}.weight", weights[run.tp_rank * per_stage + local]),
                       (f"{2 * local}.bias", biases[run.tp_rank * per_stage + local]))})
    inputs, targets = list(run.tensor("inputs")), list(run.tensor("targets"))
    with run.phase("step"):
        returned = objects[name](module, inputs, targets, run.group)
    try:
        loss, peak, _ = returned
    except (TypeError, ValueError):
        raise SubmissionProblem(f"{name} returned {type(returned).__name__}, "
                                "expected (loss or None, peak, actions)") from None
    result = run.result(None, None)
    result["values"] = {"peak microbatches in flight": torch.tensor([float(peak)], dtype=torch.float64)}
    if run.tp_rank == run.tp_size - 1:
        if not isinstance(loss, torch.Tensor):
            raise SubmissionProblem(f"{name} returned a {type(loss).__name__} as the last stage's loss, "
                                    "expected a tensor")
        result["values"]["loss returned by the last stage"] = loss.detach().to("cpu", torch.float64).reshape(-1)
    result["comm"]["step"] = _messages(result["comm"]["step"])
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
    "test_gpipe": TestSpec("Part 1: GPipe", ("run_gpipe",), (), _gpipe_cases, _gpipe_expected, _gpipe_run, WORLD_SIZE),
    "test_1f1b": TestSpec("Part 2: 1F1B", ("run_1f1b",), (), _1f1b_cases, _1f1b_expected, _1f1b_run, WORLD_SIZE),
}
