"""Hidden tests of lab 3 (data parallelism): averaging, buckets, overlap with backward, training.

Every test runs on 4 ranks, as one data-parallel group of 4 and as two groups of 2 ({0, 1}
and {2, 3}, each with its own batch). Each rank computes the mean squared error of a small
MLP on its contiguous 1/N of the batch; after synchronisation every rank's gradients must be
the gradients of the mean loss over the whole batch (dense float64 maths here), and the
all-reduces of each phase are counted against the reference in
``grading/reference/data_parallel.py``. The overlapped test also uses a model with a head
that the forward pass never uses (its bucket is never complete during backward), and runs
two steps in a row (state must be reset). The training test starts each rank from different
parameters and compares the parameters after 3 SGD steps with single-process training on
the whole batch from rank 0's. Later parts run with the reference for the earlier ones.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from grading.judge.engine import Case, TestSpec
from grading.judge.rankside import SubmissionProblem
from grading.reference import data_parallel as dp

WORLD_SIZE = 4
DP_SIZES = (2, 4)
IN_FEATURES, HIDDEN, OUT_FEATURES, BATCH = 6, 8, 3, 8
STEPS, LR = 3, 0.1

REFERENCE = {
    "average_gradients": dp.average_gradients,
    "make_buckets": dp.make_buckets,
    "flatten_gradients": dp.flatten_gradients,
    "unflatten_into_gradients": dp.unflatten_into_gradients,
    "all_reduce_bucket": dp.all_reduce_bucket,
    "OverlappingGradSync": dp.OverlappingGradSync,
    "broadcast_parameters": dp.broadcast_parameters,
    "train_data_parallel": dp.train_data_parallel,
}
_BUCKETS = ("make_buckets", "flatten_gradients", "unflatten_into_gradients", "all_reduce_bucket")


class TinyMLP(nn.Module):
    """fc2(tanh(fc1(x))); with ``unused_head`` a third layer that forward never calls."""

    def __init__(self, unused_head: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(IN_FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, OUT_FEATURES)
        self.head = nn.Linear(HIDDEN, OUT_FEATURES) if unused_head else None

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _shapes(unused_head: bool) -> dict:
    shapes = {"fc1.weight": (HIDDEN, IN_FEATURES), "fc1.bias": (HIDDEN,),
              "fc2.weight": (OUT_FEATURES, HIDDEN), "fc2.bias": (OUT_FEATURES,)}
    if unused_head:
        shapes.update({"head.weight": (OUT_FEATURES, HIDDEN), "head.bias": (OUT_FEATURES,)})
    return shapes


def _layout(size: int) -> str:
    if size == WORLD_SIZE:
        return f"dp_size={size}"
    groups = " and ".join("{" + ", ".join(map(str, range(s, s + size))) + "}" for s in range(0, WORLD_SIZE, size))
    return f"dp_size={size} (groups {groups})"


def _batch(generator, unused_head: bool, steps: int = 1) -> dict:
    data = {name: torch.randn(*shape, generator=generator) * 0.5 for name, shape in _shapes(unused_head).items()}
    data["x"] = torch.randn(steps, BATCH, IN_FEATURES, generator=generator)
    data["y"] = torch.randn(steps, BATCH, OUT_FEATURES, generator=generator)
    return data


def _dense_gradients(weights: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Gradients of the mean squared error over the whole batch, in float64 (unused head: zeros)."""
    leaves = {name: w.detach().to(torch.float64).clone().requires_grad_(True) for name, w in weights.items()}
    hidden = torch.tanh(x.to(torch.float64) @ leaves["fc1.weight"].T + leaves["fc1.bias"])
    out = hidden @ leaves["fc2.weight"].T + leaves["fc2.bias"]
    ((out - y.to(torch.float64)) ** 2).mean().backward()
    return {name: leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for name, leaf in leaves.items()}


def _weights(data: dict, unused_head: bool) -> dict:
    return {name: data[name] for name in _shapes(unused_head)}


def _model(run, unused_head: bool, offset: float = 0.0) -> TinyMLP:
    model = TinyMLP(unused_head).to(run.device)
    run.load(model, {name: run.tensor(name) + offset for name in _shapes(unused_head)})
    return model


def _local_backward(model, run, step: int = 0) -> None:
    x, y = run.tensor("x")[step], run.tensor("y")[step]
    x_local, y_local = x.tensor_split(run.group_size)[run.group_rank], y.tensor_split(run.group_size)[run.group_rank]
    torch.nn.functional.mse_loss(model(x_local), y_local).backward()


def _grads_expected(case, data):
    grads = _dense_gradients(_weights(data, case.params.get("unused_head", False)), data["x"][0], data["y"][0])
    return [{"grads": grads} for _ in range(case.group_size)]


# ----- Part 1: one all-reduce per parameter --------------------------------------------------

def _average_cases(generator):
    return [Case(f"average_gradients, TinyMLP, batch of {BATCH}, {_layout(size)}", size, {},
                 [_batch(generator, False) for _ in range(WORLD_SIZE // size)]) for size in DP_SIZES]


def _average_run(objects, case, run):
    model = _model(run, False)
    _local_backward(model, run)
    with run.phase("sync"):
        objects["average_gradients"](list(model.parameters()), run.group)
    return run.result(None, None)


# ----- Part 2: buckets ---------------------------------------------------------------------------

_CAPS = (1, 120, 1000)  # bytes: one bucket per parameter, two buckets, one bucket never full


def _dense_bucket_index(unused_head: bool, cap: int) -> torch.Tensor:
    """Bucket of each parameter (in parameters() order) by the rule: reverse order, close at >= cap bytes."""
    sizes = [4 * torch.Size(shape).numel() for shape in _shapes(unused_head).values()]
    index, bucket, filled = [0] * len(sizes), 0, 0
    for position in reversed(range(len(sizes))):
        index[position] = bucket
        filled += sizes[position]
        if filled >= cap:
            bucket, filled = bucket + 1, 0
    return torch.tensor(index, dtype=torch.float64)


def _dense_buckets(params: list, cap: int) -> list:
    """The parameters grouped as ``_dense_bucket_index`` says (the judge's own rule, not the reference's)."""
    index = _dense_bucket_index(False, cap).long().tolist()
    return [[p for p, b in zip(params, index) if b == bucket] for bucket in range(max(index) + 1)]


def _bucket_cases(generator):
    return [Case(f"make_buckets(bucket_cap_bytes={cap}) and all_reduce_bucket, TinyMLP, {_layout(size)}", size,
                 {"cap": cap}, [_batch(generator, False) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES for cap in _CAPS]


def _bucket_expected(case, data):
    out = _dense_bucket_index(False, case.params["cap"])
    return [dict(expected, out=out) for expected in _grads_expected(case, data)]


def _bucket_index(buckets, params) -> torch.Tensor:
    where = {}
    try:
        for index, bucket in enumerate(buckets):
            for param in bucket:
                where[id(param)] = index
    except TypeError:
        raise SubmissionProblem("make_buckets must return a list of lists of parameters") from None
    return torch.tensor([float(where.get(id(param), -1)) for param in params], dtype=torch.float64)


def _bucket_run(objects, case, run):
    model = _model(run, False)
    params = list(model.parameters())
    assignment = _bucket_index(objects["make_buckets"](params, case.params["cap"]), params)
    _local_backward(model, run)
    with run.phase("sync"):
        for bucket in _dense_buckets(params, case.params["cap"]):
            objects["all_reduce_bucket"](bucket, run.group)
    return run.result(assignment, None)


# ----- Part 3: overlapped with backward ----------------------------------------------------------

def _overlap_cases(generator):
    cases = []
    for size in DP_SIZES:
        for unused_head in (False, True):
            for cap in (120, 1000):
                model = "TinyMLP with an unused head" if unused_head else "TinyMLP"
                cases.append(Case(f"OverlappingGradSync(bucket_cap_bytes={cap}), {model}, two steps, {_layout(size)}",
                                  size, {"cap": cap, "unused_head": unused_head},
                                  [_batch(generator, unused_head) for _ in range(WORLD_SIZE // size)]))
    return cases


def _overlap_run(objects, case, run):
    model = _model(run, case.params["unused_head"])
    sync = objects["OverlappingGradSync"](list(model.parameters()), run.group, case.params["cap"])
    for _ in range(2):  # the second step must not see the first one's state
        model.zero_grad(set_to_none=True)
        with run.phase("backward"):
            _local_backward(model, run)
        with run.phase("finish"):
            sync.finish()
    return run.result(None, None)


# ----- Part 4: training ----------------------------------------------------------------------------

def _train_cases(generator):
    return [Case(f"train_data_parallel, {STEPS} SGD steps (lr={LR}), ranks starting from different parameters, "
                 f"{_layout(size)}", size, {}, [_batch(generator, False, STEPS) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES]


def _train_expected(case, data):
    weights = {name: w.to(torch.float64) for name, w in _weights(data, False).items()}
    for step in range(STEPS):
        grads = _dense_gradients(weights, data["x"][step], data["y"][step])
        weights = {name: w - LR * grads[name] for name, w in weights.items()}
    out = torch.cat([w.reshape(-1) for w in weights.values()])
    return [{"out": out, "grads": {}} for _ in range(case.group_size)]


def _train_run(objects, case, run):
    model = _model(run, False, offset=0.5 * run.group_rank)  # only rank 0 starts from the right parameters
    with run.phase("train"):
        trained = objects["train_data_parallel"](model, run.tensor("x"), run.tensor("y"), LR, 120, run.group)
    if not isinstance(trained, nn.Module):
        raise SubmissionProblem(f"train_data_parallel returned a {type(trained).__name__}, expected the model")
    final = dict(trained.named_parameters())
    missing = [name for name in _shapes(False) if name not in final]
    if missing:
        raise SubmissionProblem(f"the trained model has no parameter {missing[0]}")
    return run.result(torch.cat([final[name].detach().reshape(-1) for name in _shapes(False)]), None)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_average_gradients": TestSpec("Part 1: average_gradients", ("average_gradients",), (),
                                       _average_cases, _grads_expected, _average_run, WORLD_SIZE),
    "test_buckets": TestSpec("Part 2: buckets", ("make_buckets", "all_reduce_bucket"), ("average_gradients",),
                             _bucket_cases, _bucket_expected, _bucket_run, WORLD_SIZE),
    "test_overlapping_sync": TestSpec("Part 3: OverlappingGradSync", ("OverlappingGradSync",),
                                      ("average_gradients",) + _BUCKETS,
                                      _overlap_cases, _grads_expected, _overlap_run, WORLD_SIZE),
    "test_train_data_parallel": TestSpec("Part 4: train_data_parallel", ("train_data_parallel",),
                                         ("average_gradients", "OverlappingGradSync") + _BUCKETS,
                                         _train_cases, _train_expected, _train_run, WORLD_SIZE),
}
