"""Hidden tests of lab 3 (data parallelism): averaging, buckets, the ``DataParallel`` wrapper, training.

Every test runs on 4 ranks, as one data-parallel group of d = 4 and as two groups of d = 2
({0, 1} and {2, 3}, each with its own batch). Each rank computes the mean squared error of a
small MLP on its contiguous 1/d of the batch; after synchronisation every rank's gradients must
be the gradients of the mean loss over the whole batch (dense float64 maths here), and the
all-reduces of each phase are counted against the reference in
``grading/reference/data_parallel.py``. The wrapper's tests use a model with a frozen layer,
a head that no rank uses in one step and only group rank 0 uses in the next (a gradient that
must stay None, then one that must reach every rank), a buffer, ranks that start apart, and
gradient accumulation under ``no_sync()``. The training test compares AdamW with weight decay
through the wrapper with AdamW in one process on the whole batch. Later parts run with the
reference for the earlier ones.

Each rank receives only what its replica holds (``_own_batch``, the tests' ``rank_data``): the
model's initial parameters and buffer and its own rows of every batch, never the other ranks'
rows; where ranks start apart, a rank other than group rank 0 receives only its own starting
parameters and buffer (group rank 0's shifted by a random amount), so that the broadcast is the
one way to reach group rank 0's.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.rankside import SubmissionProblem
from grading.reference import data_parallel as dp

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = True
DP_SIZES = (2, 4)
IN_FEATURES, HIDDEN, OUT_FEATURES, BATCH = 6, 8, 3, 8
STEPS, LR, WEIGHT_DECAY, MICROBATCHES = 3, 0.01, 0.1, 2

REFERENCE = {
    "average_gradients": dp.average_gradients,
    "make_buckets": dp.make_buckets,
    "flatten_gradients": dp.flatten_gradients,
    "unflatten_into_gradients": dp.unflatten_into_gradients,
    "all_reduce_bucket": dp.all_reduce_bucket,
    "DataParallel": dp.DataParallel,
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
    return group_layout(f"dp_size={size}", size, WORLD_SIZE)


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


def _model(run, unused_head: bool) -> TinyMLP:
    model = TinyMLP(unused_head).to(run.device)
    run.load(model, {name: run.tensor(name) for name in _shapes(unused_head)})
    return model


def _local_backward(model, run, step: int = 0) -> None:
    """Backward of this rank's mean squared error (``x`` and ``y`` hold this rank's rows only)."""
    torch.nn.functional.mse_loss(model(run.tensor("x")[step]), run.tensor("y")[step]).backward()


def _own_batch(whole_batches: bool):
    """rank_data: the model's parameters and buffer (group rank 0's; a rank starting apart, case param
    ``apart``, gets its own, shifted by ``offsets[group_rank]``) and this rank's rows of ``x`` and ``y``
    (steps, batch, features) alone, its contiguous 1/d of each batch; with ``whole_batches`` in
    tensors of the whole batch's shape (the graded function slices them itself), the others' rows NaN."""
    def rank_data(case, data, group_rank):
        offset = float(data["offsets"][group_rank]) if case.params.get("apart") else 0.0
        own = {name: value + offset for name, value in data.items() if name not in ("x", "y", "offsets")}
        rows = torch.arange(BATCH).tensor_split(case.group_size)[group_rank]
        for name in ("x", "y"):
            own[name] = data[name][:, rows]
            if whole_batches:
                own[name] = torch.full_like(data[name], float("nan")).index_copy_(1, rows, own[name])
        return own
    return rank_data


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

#: (bucket_cap_bytes, first_bucket_cap_bytes): one bucket per parameter, two buckets, one bucket
#: never full, and a first bucket with a cap of its own (DDP's default 1 MiB first bucket, scaled down).
_CAPS = ((1, None), (120, None), (1000, None), (120, 40))


def _dense_bucket_index(unused_head: bool, cap: int, first: int | None = None) -> torch.Tensor:
    """Bucket of each parameter (in parameters() order) by DDP's rule: reverse order, a bucket closes
    once it holds >= its cap in bytes, the first bucket's cap ``first`` (default ``cap``)."""
    sizes = [4 * torch.Size(shape).numel() for shape in _shapes(unused_head).values()]
    index, bucket, filled, limit = [0] * len(sizes), 0, 0, cap if first is None else first
    for position in reversed(range(len(sizes))):
        index[position] = bucket
        filled += sizes[position]
        if filled >= limit:
            bucket, filled, limit = bucket + 1, 0, cap
    return torch.tensor(index, dtype=torch.float64)


def _dense_buckets(params: list, cap: int, first: int | None = None) -> list:
    """The parameters grouped as ``_dense_bucket_index`` says (the judge's own rule, not the reference's)."""
    index = _dense_bucket_index(False, cap, first).long().tolist()
    return [[p for p, b in zip(params, index) if b == bucket] for bucket in range(max(index) + 1)]


def _caps_text(cap: int, first: int | None) -> str:
    return f"bucket_cap_bytes={cap}" + ("" if first is None else f", first_bucket_cap_bytes={first}")


def _bucket_cases(generator):
    return [Case(f"make_buckets({_caps_text(cap, first)}) and all_reduce_bucket, TinyMLP, {_layout(size)}", size,
                 {"cap": cap, "first": first}, [_batch(generator, False) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES for cap, first in _CAPS]


def _bucket_expected(case, data):
    out = _dense_bucket_index(False, case.params["cap"], case.params["first"])
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
    caps = (case.params["cap"],) if case.params["first"] is None else (case.params["cap"], case.params["first"])
    assignment = _bucket_index(objects["make_buckets"](params, *caps), params)
    _local_backward(model, run)
    with run.phase("sync"):
        for bucket in _dense_buckets(params, *caps):
            objects["all_reduce_bucket"](bucket, run.group)
    return run.result(assignment, None)


# ----- Parts 3 and 4: the DataParallel wrapper --------------------------------------------------

#: ReplicaMLP's parameters in parameters() order: the head is registered first, so that its
#: bucket is the last one (backward reaches it last) and the others can start during backward.
_REPLICA_SHAPES = {"head.weight": (OUT_FEATURES, HIDDEN), "head.bias": (OUT_FEATURES,),
                   "fc1.weight": (HIDDEN, IN_FEATURES), "fc1.bias": (HIDDEN,),
                   "fc2.weight": (OUT_FEATURES, HIDDEN), "fc2.bias": (OUT_FEATURES,)}


class ReplicaMLP(nn.Module):
    """fc2(tanh(fc1(x * input_scale))), plus head(tanh(...)) when ``use_head``; ``input_scale``
    is a buffer (broadcast, never trained); ``frozen_fc1`` sets fc1's requires_grad to False."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(HIDDEN, OUT_FEATURES)
        self.fc1 = nn.Linear(IN_FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, OUT_FEATURES)
        self.register_buffer("input_scale", torch.ones(IN_FEATURES))

    def forward(self, x, use_head: bool = False):
        hidden = torch.tanh(self.fc1(x * self.input_scale))
        return self.fc2(hidden) + self.head(hidden) if use_head else self.fc2(hidden)


def _replica_batch(generator, microbatches: int, size: int) -> dict:
    """A group's data: parameters, buffer, batches, and ``offsets``: how far each group rank's starting
    parameters and buffer lie from group rank 0's when ranks start apart (0 for group rank 0, else 0.5 to 1)."""
    data = {name: torch.randn(*shape, generator=generator) * 0.5 for name, shape in _REPLICA_SHAPES.items()}
    data["input_scale"] = 1 + torch.rand(IN_FEATURES, generator=generator)
    data["x"] = torch.randn(microbatches, BATCH, IN_FEATURES, generator=generator)
    data["y"] = torch.randn(microbatches, BATCH, OUT_FEATURES, generator=generator)
    data["offsets"] = torch.cat([torch.zeros(1), 0.5 + 0.5 * torch.rand(size - 1, generator=generator)])
    return data


def _replica(run, frozen_fc1: bool) -> ReplicaMLP:
    """This rank's ReplicaMLP, from the parameters and buffer the rank received (its own when ranks start apart)."""
    model = ReplicaMLP().to(run.device)
    run.load(model, {name: run.tensor(name) for name in _REPLICA_SHAPES})
    with torch.no_grad():
        model.input_scale.copy_(run.tensor("input_scale"))
    if frozen_fc1:
        model.fc1.requires_grad_(False)
    return model


def _dense_replica_gradients(data: dict, frozen: tuple, steps, head_rows: int) -> dict:
    """{name: gradient or None} of the sum over ``steps`` of the whole batch's mean squared error,
    float64; the head adds to the first ``head_rows`` rows of every batch (group rank 0's shard)."""
    leaves = {name: data[name].to(torch.float64).clone().requires_grad_(name not in frozen) for name in _REPLICA_SHAPES}
    total = 0
    for step in steps:
        x, y = data["x"][step].to(torch.float64), data["y"][step].to(torch.float64)
        hidden = torch.tanh((x * data["input_scale"].to(torch.float64)) @ leaves["fc1.weight"].T + leaves["fc1.bias"])
        out = hidden @ leaves["fc2.weight"].T + leaves["fc2.bias"]
        if head_rows:
            head = (hidden[:head_rows] @ leaves["head.weight"].T + leaves["head.bias"])
            out = torch.cat([out[:head_rows] + head, out[head_rows:]])
        total = total + ((out - y) ** 2).mean()
    total.backward()
    return {name: leaf.grad for name, leaf in leaves.items()}


def _has_gradient(grads: dict) -> torch.Tensor:
    return torch.tensor([float(grads[name] is not None) for name in _REPLICA_SHAPES], dtype=torch.float64)


def _flat_gradients(grads: dict) -> torch.Tensor:
    """The gradients that exist, back to back in ``_REPLICA_SHAPES`` order."""
    present = [grads[name].reshape(-1) for name in _REPLICA_SHAPES if grads[name] is not None]
    return torch.cat(present) if present else torch.zeros(0)


def _replica_values(model) -> dict:
    grads = {name: param.grad for name, param in model.named_parameters()}
    missing = [name for name in _REPLICA_SHAPES if name not in grads]
    if missing:
        raise SubmissionProblem(f"the wrapped model lost its parameter {missing[0]}")
    return {"parameters with a gradient (1) and without (0)": _has_gradient(grads),
            "the gradients that exist": _flat_gradients(grads).detach().cpu().to(torch.float64)}


def _wrapper(objects, model, run, cap: int):
    wrapped = objects["DataParallel"](model, run.group, cap)
    if not isinstance(wrapped, nn.Module):
        raise SubmissionProblem(f"DataParallel(...) is a {type(wrapped).__name__}, expected an nn.Module")
    return wrapped


# ----- Part 3, gradients through the wrapper ------------------------------------------------------

_SYNC_MODELS = {False: "ReplicaMLP, head unused by every rank in both steps",
                True: "ReplicaMLP with fc1 frozen, head unused in step 1 and used on group rank 0 only in step 2"}


def _sync_cases(generator):
    return [Case(f"DataParallel(bucket_cap_bytes={cap}), {_SYNC_MODELS[frozen]}, {_layout(size)}", size,
                 {"kind": "sync", "cap": cap, "frozen_fc1": frozen},
                 [_replica_batch(generator, 2, size) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES for frozen in (False, True) for cap in (120, 1000)]


def _sync_expected(case, data):
    frozen = ("fc1.weight", "fc1.bias") if case.params["frozen_fc1"] else ()
    head_rows = BATCH // case.group_size if case.params["frozen_fc1"] else 0
    first = _dense_replica_gradients(data, frozen, [0], 0)
    second = _dense_replica_gradients(data, frozen, [1], head_rows)
    values = {"after step 1, parameters with a gradient (1) and without (0)": _has_gradient(first),
              "after step 1, the gradients that exist": _flat_gradients(first),
              "parameters with a gradient (1) and without (0)": _has_gradient(second),
              "the gradients that exist": _flat_gradients(second)}
    grads = {name: grad for name, grad in second.items() if grad is not None}
    return [{"grads": grads, "values": values} for _ in range(case.group_size)]


def _sync_run(objects, case, run):
    model = _replica(run, case.params["frozen_fc1"])
    wrapped = _wrapper(objects, model, run, case.params["cap"])
    values = {}
    for step in range(2):
        model.zero_grad(set_to_none=True)
        use_head = case.params["frozen_fc1"] and step == 1 and run.group_rank == 0
        x, y = run.tensor("x")[step], run.tensor("y")[step]
        with run.phase(f"step {step + 1}: backward"):
            torch.nn.functional.mse_loss(wrapped(x, use_head=use_head), y).backward()
        with run.phase(f"step {step + 1}: finish_gradient_synchronization"):
            wrapped.finish_gradient_synchronization()
        if step == 0:
            values = {f"after step 1, {label}": value for label, value in _replica_values(model).items()}
    result = run.result(None, None)
    result["values"] = {**values, **_replica_values(model)}
    return result


# ----- Part 3, replicas that start apart, accumulation under no_sync ---------------------------------

def _replicas_cases(generator):
    return [Case(f"DataParallel(bucket_cap_bytes={cap}), ranks starting from different parameters and buffer, "
                 f"2 microbatches under no_sync() then 1 synchronised, {_layout(size)}", size,
                 {"kind": "replicas", "cap": cap, "apart": True},
                 [_replica_batch(generator, 3, size) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES for cap in (120, 1000)]


def _replicas_expected(case, data):
    grads = _dense_replica_gradients(data, (), [0, 1, 2], BATCH)
    values = {"the buffer input_scale": data["input_scale"].to(torch.float64)}
    return [{"grads": grads, "values": values} for _ in range(case.group_size)]


def _replicas_run(objects, case, run):
    model = _replica(run, False)  # only group rank 0 starts from the case's parameters
    wrapped = _wrapper(objects, model, run, case.params["cap"])
    x, y = run.tensor("x"), run.tensor("y")
    with run.phase("two backward passes under no_sync()"):
        with wrapped.no_sync():
            for micro in range(2):
                torch.nn.functional.mse_loss(wrapped(x[micro], use_head=True), y[micro]).backward()
    with run.phase("the synchronised backward and finish_gradient_synchronization"):
        torch.nn.functional.mse_loss(wrapped(x[2], use_head=True), y[2]).backward()
        wrapped.finish_gradient_synchronization()
    result = run.result(None, None)
    result["values"] = {"the buffer input_scale": model.input_scale.detach().cpu().to(torch.float64)}
    return result


def _wrapper_cases(generator):
    return _sync_cases(generator) + _replicas_cases(generator)


def _wrapper_expected(case, data):
    return (_sync_expected if case.params["kind"] == "sync" else _replicas_expected)(case, data)


def _wrapper_run(objects, case, run):
    return (_sync_run if case.params["kind"] == "sync" else _replicas_run)(objects, case, run)


# ----- Part 4: training ----------------------------------------------------------------------------

def _train_cases(generator):
    return [Case(f"train_data_parallel, {STEPS} AdamW steps (lr={LR}, weight_decay={WEIGHT_DECAY}), "
                 f"{MICROBATCHES} microbatches, fc1 frozen, head unused, ranks starting apart, {_layout(size)}; "
                 "each rank receives only its own rows of each batch (x.tensor_split(d)[rank]), the others NaN",
                 size, {"apart": True}, [_replica_batch(generator, STEPS, size) for _ in range(WORLD_SIZE // size)])
            for size in DP_SIZES]


def _train_expected(case, data):
    """AdamW in one process on the whole batch, float64: fc1 frozen, the head never used."""
    model = ReplicaMLP().to(torch.float64)
    model.load_state_dict({**{name: data[name] for name in _REPLICA_SHAPES}, "input_scale": data["input_scale"]})
    model.fc1.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=WEIGHT_DECAY)
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        ((model(data["x"][step].to(torch.float64)) - data["y"][step].to(torch.float64)) ** 2).mean().backward()
        optimizer.step()
    trained = dict(model.named_parameters())
    out = torch.cat([trained[name].detach().reshape(-1) for name in _REPLICA_SHAPES])
    return [{"out": out, "grads": {}} for _ in range(case.group_size)]


def _train_run(objects, case, run):
    model = _replica(run, True)
    with run.phase("train"):
        trained = objects["train_data_parallel"](model, run.tensor("x"), run.tensor("y"), LR, WEIGHT_DECAY,
                                                 MICROBATCHES, 120, run.group)
    if not isinstance(trained, nn.Module):
        raise SubmissionProblem(f"train_data_parallel returned a {type(trained).__name__}, expected the model")
    final = dict(trained.named_parameters())
    missing = [name for name in _REPLICA_SHAPES if name not in final]
    if missing:
        raise SubmissionProblem(f"the trained model has no parameter {missing[0]}")
    return run.result(torch.cat([final[name].detach().reshape(-1) for name in _REPLICA_SHAPES]), None)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_average_gradients": TestSpec("Part 1: average_gradients", ("average_gradients",), (),
                                       _average_cases, _grads_expected, _average_run, WORLD_SIZE,
                                       rank_data=_own_batch(False)),
    "test_buckets": TestSpec("Part 2: buckets", ("make_buckets", "all_reduce_bucket"), ("average_gradients",),
                             _bucket_cases, _bucket_expected, _bucket_run, WORLD_SIZE, rank_data=_own_batch(False)),
    "test_data_parallel": TestSpec("Part 3: DataParallel", ("DataParallel",), ("average_gradients",) + _BUCKETS,
                                   _wrapper_cases, _wrapper_expected, _wrapper_run, WORLD_SIZE,
                                   rank_data=_own_batch(False)),
    "test_train_data_parallel": TestSpec("Part 4: train_data_parallel", ("train_data_parallel",),
                                         ("average_gradients", "DataParallel") + _BUCKETS,
                                         _train_cases, _train_expected, _train_run, WORLD_SIZE,
                                         rank_data=_own_batch(True)),
}
