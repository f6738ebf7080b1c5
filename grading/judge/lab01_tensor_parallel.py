"""Hidden tests of lab 1 (tensor parallelism): f, g, ColumnParallelLinear, RowParallelLinear, MLP.

Every test runs on 4 ranks and covers tp_size 4 (one group) and tp_size 2 (groups {0, 1}
and {2, 3}, each with its own data: code that ignores its ``group`` argument fails there),
2-D and 3-D inputs, with and without bias. For each case the judge checks, rank by rank,
the output, the input gradient dX, every parameter gradient (dW, db), and the number of
collectives of each kind in the forward and in the backward pass against the reference
kernels in ``grading/reference``. Parts 2 to 4 run with the reference f, g, gather and
scatter (and part 4 with the reference linear layers), so each part is graded on its own.
"""
from __future__ import annotations

import torch

from grading.judge.engine import Case, TestSpec, dense_grads, gelu, linear
from grading.reference import tensor_parallel as tp_layers
from grading.reference import tp_communications as tp_comm
from grading.reference.tensor_parallel import column_shard, row_shard

WORLD_SIZE = 4
TP_SIZES = (2, 4)

#: Name in the student's notebook -> the reference object (the lab's API).
REFERENCE = {
    "CopyToTPRegion": tp_comm.CopyToTPRegion,
    "copy_to_tp_region": tp_comm.copy_to_tp_region,
    "ReduceFromTPRegion": tp_comm.ReduceFromTPRegion,
    "reduce_from_tp_region": tp_comm.reduce_from_tp_region,
    "GatherFromTPRegion": tp_comm.GatherFromTPRegion,
    "gather_from_tp_region": tp_comm.gather_from_tp_region,
    "ScatterToTPRegion": tp_comm.ScatterToTPRegion,
    "scatter_to_tp_region": tp_comm.scatter_to_tp_region,
    "split_last_dim": tp_comm.split_last_dim,
    "all_gather_last_dim": tp_comm.all_gather_last_dim,
    "ColumnParallelLinear": tp_layers.ColumnParallelLinear,
    "RowParallelLinear": tp_layers.RowParallelLinear,
    "ParallelMLP": tp_layers.ParallelMLP,
}
_MAPPINGS = ("CopyToTPRegion", "copy_to_tp_region", "ReduceFromTPRegion", "reduce_from_tp_region",
             "GatherFromTPRegion", "gather_from_tp_region", "ScatterToTPRegion", "scatter_to_tp_region",
             "split_last_dim", "all_gather_last_dim")


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator)


def _layout(tp_size: int) -> str:
    if tp_size == WORLD_SIZE:
        return f"tp_size={tp_size}"
    groups = " and ".join("{" + ", ".join(map(str, range(s, s + tp_size))) + "}" for s in range(0, WORLD_SIZE, tp_size))
    return f"tp_size={tp_size} (groups {groups})"


def _groups(tp_size: int, make) -> list:
    return [make() for _ in range(WORLD_SIZE // tp_size)]


# ----- f and g --------------------------------------------------------------------------------

_F_SHAPES = ((6,), (2, 3, 4))


def _f_cases(generator):
    return [
        Case(f"f = copy_to_tp_region, {_layout(tp)}, x of shape {shape}", tp, {"shape": shape},
             _groups(tp, lambda: {"x": _randn(generator, *shape), "upstream": _randn(generator, tp, *shape)}))
        for tp in TP_SIZES for shape in _F_SHAPES
    ]


def _f_expected(case, data):
    # identity forward; backward: every rank gets the sum of all ranks' upstream gradients
    return [{"out": data["x"], "dx": data["upstream"].sum(0), "grads": {}} for _ in range(case.group_size)]


def _f_run(objects, case, run):
    x = run.leaf("x")
    with run.phase("forward"):
        y = objects["copy_to_tp_region"](x, run.group)
    upstream = run.tensor("upstream")[run.group_rank]
    with run.phase("backward"):
        (y * upstream).sum().backward()
    return run.result(y, x.grad)


def _g_cases(generator):
    return [
        Case(f"g = reduce_from_tp_region, {_layout(tp)}, x of shape {shape}", tp, {"shape": shape},
             _groups(tp, lambda: {"x": _randn(generator, tp, *shape), "upstream": _randn(generator, *shape)}))
        for tp in TP_SIZES for shape in _F_SHAPES
    ]


def _g_expected(case, data):
    # forward: every rank gets the sum of all ranks' inputs; backward: identity
    return [{"out": data["x"].sum(0), "dx": data["upstream"], "grads": {}} for _ in range(case.group_size)]


def _g_run(objects, case, run):
    x = run.as_leaf(run.tensor("x")[run.group_rank])
    with run.phase("forward"):
        y = objects["reduce_from_tp_region"](x, run.group)
    with run.phase("backward"):
        (y * run.tensor("upstream")).sum().backward()
    return run.result(y, x.grad)


# ----- ColumnParallelLinear and RowParallelLinear ----------------------------------------------

def _linear_data(generator, in_features, out_features, bias, x_shape):
    data = {"x": _randn(generator, *x_shape), "weight": _randn(generator, out_features, in_features),
            "upstream": _randn(generator, *x_shape[:-1], out_features)}
    if bias:
        data["bias"] = _randn(generator, out_features)
    return data


def _dense_linear(data):
    return dense_grads(linear, {"x": data["x"], "weight": data["weight"], "bias": data.get("bias")}, data["upstream"])


_COLUMN_CONFIGS = (  # in_features, out_features, bias, gather_output, x shape
    (8, 12, True, False, (2, 3, 8)),
    (6, 8, False, True, (5, 6)),
)


def _column_cases(generator):
    cases = []
    for tp in TP_SIZES:
        for in_f, out_f, bias, gather, x_shape in _COLUMN_CONFIGS:
            params = {"in_features": in_f, "out_features": out_f, "bias": bias, "gather_output": gather}
            name = (f"ColumnParallelLinear({in_f}, {out_f}, bias={bias}, gather_output={gather}), "
                    f"{_layout(tp)}, x of shape {x_shape}")
            cases.append(Case(name, tp, params, _groups(tp, lambda: _linear_data(generator, in_f, out_f, bias, x_shape))))
    return cases


def _column_expected(case, data):
    out, grads = _dense_linear(data)
    tp, per_rank = case.group_size, []
    for r in range(tp):
        expected_grads = {"weight": grads["weight"].chunk(tp, 0)[r]}
        if case.params["bias"]:
            expected_grads["bias"] = grads["bias"].chunk(tp, 0)[r]
        per_rank.append({"out": out if case.params["gather_output"] else out.chunk(tp, -1)[r],
                         "dx": grads["x"], "grads": expected_grads})
    return per_rank


def _column_run(objects, case, run):
    p = case.params
    layer = objects["ColumnParallelLinear"](p["in_features"], p["out_features"], run.group,
                                           bias=p["bias"], gather_output=p["gather_output"])
    weight, bias = column_shard(run.tensor("weight"), run.tensor("bias") if p["bias"] else None,
                                run.group_rank, run.group_size)
    run.load(layer, {"weight": weight, "bias": bias})
    x = run.leaf("x")
    with run.phase("forward"):
        y = layer(x)
    upstream = run.tensor("upstream")
    if not p["gather_output"]:
        upstream = run.shard_last_dim(upstream)
    with run.phase("backward"):
        (y * upstream).sum().backward()
    return run.result(y, x.grad)


_ROW_CONFIGS = (  # in_features, out_features, bias, input_is_parallel, x shape
    (8, 6, True, True, (2, 3, 8)),
    (12, 5, False, False, (4, 12)),
)


def _row_cases(generator):
    cases = []
    for tp in TP_SIZES:
        for in_f, out_f, bias, parallel, x_shape in _ROW_CONFIGS:
            params = {"in_features": in_f, "out_features": out_f, "bias": bias, "input_is_parallel": parallel}
            name = (f"RowParallelLinear({in_f}, {out_f}, bias={bias}, input_is_parallel={parallel}), "
                    f"{_layout(tp)}, x of shape {x_shape}")
            cases.append(Case(name, tp, params, _groups(tp, lambda: _linear_data(generator, in_f, out_f, bias, x_shape))))
    return cases


def _row_expected(case, data):
    out, grads = _dense_linear(data)
    tp, per_rank = case.group_size, []
    for r in range(tp):
        expected_grads = {"weight": grads["weight"].chunk(tp, 1)[r]}
        if case.params["bias"]:
            expected_grads["bias"] = grads["bias"]
        dx = grads["x"].chunk(tp, -1)[r] if case.params["input_is_parallel"] else grads["x"]
        per_rank.append({"out": out, "dx": dx, "grads": expected_grads})
    return per_rank


def _row_run(objects, case, run):
    p = case.params
    layer = objects["RowParallelLinear"](p["in_features"], p["out_features"], run.group,
                                        bias=p["bias"], input_is_parallel=p["input_is_parallel"])
    run.load(layer, {"weight": row_shard(run.tensor("weight"), run.group_rank, run.group_size),
                     "bias": run.tensor("bias") if p["bias"] else None})
    x = run.leaf("x", shard_last_dim=p["input_is_parallel"])
    with run.phase("forward"):
        y = layer(x)
    with run.phase("backward"):
        (y * run.tensor("upstream")).sum().backward()
    return run.result(y, x.grad)


# ----- the Megatron MLP -------------------------------------------------------------------------

_MLP_CONFIGS = (  # hidden_size, ffn_hidden_size, bias, x shape
    (6, 16, True, (2, 3, 6)),
    (4, 8, False, (5, 4)),
)


def _mlp_data(generator, hidden, ffn, bias, x_shape):
    data = {"x": _randn(generator, *x_shape), "w1": _randn(generator, ffn, hidden),
            "w2": _randn(generator, hidden, ffn), "upstream": _randn(generator, *x_shape)}
    if bias:
        data.update(b1=_randn(generator, ffn), b2=_randn(generator, hidden))
    return data


def _mlp_cases(generator):
    cases = []
    for tp in TP_SIZES:
        for hidden, ffn, bias, x_shape in _MLP_CONFIGS:
            params = {"hidden_size": hidden, "ffn_hidden_size": ffn, "bias": bias}
            name = f"ParallelMLP({hidden}, {ffn}, bias={bias}), {_layout(tp)}, x of shape {x_shape}"
            cases.append(Case(name, tp, params, _groups(tp, lambda: _mlp_data(generator, hidden, ffn, bias, x_shape))))
    return cases


def _dense_mlp(x, w1, w2, b1=None, b2=None):
    return linear(gelu(linear(x, w1, b1)), w2, b2)


def _mlp_expected(case, data):
    inputs = {k: data.get(k) for k in ("x", "w1", "w2", "b1", "b2")}
    out, grads = dense_grads(_dense_mlp, inputs, data["upstream"])
    tp, per_rank = case.group_size, []
    for r in range(tp):
        expected_grads = {"fc1.weight": grads["w1"].chunk(tp, 0)[r], "fc2.weight": grads["w2"].chunk(tp, 1)[r]}
        if case.params["bias"]:
            expected_grads.update({"fc1.bias": grads["b1"].chunk(tp, 0)[r], "fc2.bias": grads["b2"]})
        per_rank.append({"out": out, "dx": grads["x"], "grads": expected_grads})
    return per_rank


def _mlp_run(objects, case, run):
    p = case.params
    mlp = objects["ParallelMLP"](p["hidden_size"], p["ffn_hidden_size"], run.group, bias=p["bias"])
    w1, b1 = column_shard(run.tensor("w1"), run.tensor("b1") if p["bias"] else None, run.group_rank, run.group_size)
    run.load(mlp, {"fc1.weight": w1, "fc1.bias": b1,
                   "fc2.weight": row_shard(run.tensor("w2"), run.group_rank, run.group_size),
                   "fc2.bias": run.tensor("b2") if p["bias"] else None})
    x = run.leaf("x")
    with run.phase("forward"):
        y = mlp(x)
    with run.phase("backward"):
        (y * run.tensor("upstream")).sum().backward()
    return run.result(y, x.grad)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_f": TestSpec("Part 1: f (copy_to_tp_region)", ("copy_to_tp_region",), (),
                       _f_cases, _f_expected, _f_run, WORLD_SIZE),
    "test_g": TestSpec("Part 1: g (reduce_from_tp_region)", ("reduce_from_tp_region",), (),
                       _g_cases, _g_expected, _g_run, WORLD_SIZE),
    "test_column_parallel": TestSpec("Part 2: ColumnParallelLinear", ("ColumnParallelLinear",), _MAPPINGS,
                                     _column_cases, _column_expected, _column_run, WORLD_SIZE),
    "test_row_parallel": TestSpec("Part 3: RowParallelLinear", ("RowParallelLinear",), _MAPPINGS,
                                  _row_cases, _row_expected, _row_run, WORLD_SIZE),
    "test_parallel_mlp": TestSpec("Part 4: the Megatron MLP", ("ParallelMLP",),
                                  _MAPPINGS + ("ColumnParallelLinear", "RowParallelLinear"),
                                  _mlp_cases, _mlp_expected, _mlp_run, WORLD_SIZE),
}
