"""Hidden tests of lab 1 (tensor parallelism): f, g, ColumnParallelLinear, RowParallelLinear, MLP.

Every test runs on 4 ranks and covers tp_size 4 (one group) and tp_size 2 (groups {0, 1}
and {2, 3}, each with its own data: code that ignores its ``group`` argument fails there),
2-D and 3-D inputs, with and without bias. For each case the judge checks, rank by rank,
the output, the input gradient dX, every parameter gradient (dW, db), and the number of
collectives of each kind in the forward and in the backward pass against the reference
kernels in ``grading/reference``, operation by operation and byte by byte. Parts 2 to 4 run
with the reference f, g, gather and scatter (and part 4 with the reference linear layers), so
each part is graded on its own. Each rank receives only what a tensor-parallel rank holds: the
replicated input, its own shard of every weight and bias, its own slice of the upstream gradient
(``rank_data`` functions); the dense weights stay with the judge.
"""
from __future__ import annotations

import torch

from grading.judge.engine import Case, TestSpec, dense_grads, gelu, group_layout, linear
from grading.reference import tensor_parallel as tp_layers
from grading.reference import tp_communications as tp_comm
from grading.reference.tensor_parallel import column_shard, row_shard

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = False
TP_SIZES = (2, 4)

#: The lab's communication mappings (grading/reference/tp_communications.py) and layers
#: (grading/reference/tensor_parallel.py), named in the student's notebook as in the reference.
_MAPPINGS = ("CopyToTPRegion", "copy_to_tp_region", "ReduceFromTPRegion", "reduce_from_tp_region",
             "GatherFromTPRegion", "gather_from_tp_region", "ScatterToTPRegion", "scatter_to_tp_region",
             "split_last_dim", "all_gather_last_dim")
_LAYERS = ("ColumnParallelLinear", "RowParallelLinear", "ParallelMLP")
#: Name in the student's notebook -> the reference object (the lab's API).
REFERENCE = {**{name: getattr(tp_comm, name) for name in _MAPPINGS},
             **{name: getattr(tp_layers, name) for name in _LAYERS}}


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator)


def _layout(tp_size: int) -> str:
    return group_layout(f"tp_size={tp_size}", tp_size, WORLD_SIZE)


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


def _own_rows(name: str):
    """rank_data of a test whose ``name`` holds one row per group rank (the rest replicated)."""
    def rank_data(case, data, group_rank):
        return {key: value[group_rank] if key == name else value for key, value in data.items()}
    return rank_data


def _forward_backward(run, forward):
    """Rank code of every test: ``forward(x)`` on the leaf ``x`` in phase "forward", then the
    upstream gradient backpropagated in phase "backward"; the rank's result (output and dX)."""
    x = run.leaf("x")
    with run.phase("forward"):
        y = forward(x)
    upstream = run.tensor("upstream")
    with run.phase("backward"):
        (y * upstream).sum().backward()
    return run.result(y, x.grad)


def _f_run(objects, case, run):
    return _forward_backward(run, lambda x: objects["copy_to_tp_region"](x, run.group))


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
    return _forward_backward(run, lambda x: objects["reduce_from_tp_region"](x, run.group))


# ----- ColumnParallelLinear and RowParallelLinear ----------------------------------------------

def _linear_data(generator, in_features, out_features, bias, x_shape):
    data = {"x": _randn(generator, *x_shape), "weight": _randn(generator, out_features, in_features),
            "upstream": _randn(generator, *x_shape[:-1], out_features)}
    if bias:
        data["bias"] = _randn(generator, out_features)
    return data


def _dense_linear(data):
    return dense_grads(linear, {"x": data["x"], "weight": data["weight"], "bias": data.get("bias")}, data["upstream"])


def _linear_cases(generator, layer: str, flag: str, configs) -> list:
    """Cases of ``layer`` for each tp size and each (in_features, out_features, bias, value of the
    keyword argument ``flag``, x shape) of ``configs``."""
    cases = []
    for tp in TP_SIZES:
        for in_f, out_f, bias, flag_value, x_shape in configs:
            params = {"in_features": in_f, "out_features": out_f, "bias": bias, flag: flag_value}
            name = f"{layer}({in_f}, {out_f}, bias={bias}, {flag}={flag_value}), {_layout(tp)}, x of shape {x_shape}"
            cases.append(Case(name, tp, params, _groups(tp, lambda: _linear_data(generator, in_f, out_f, bias, x_shape))))
    return cases


def _linear_run(objects, case, run, layer: str, flag: str):
    """Rank code of a linear layer's test: ``layer`` built with the case's sizes, bias and ``flag``,
    this rank's shards loaded, forward and backward."""
    p = case.params
    module = objects[layer](p["in_features"], p["out_features"], run.group, bias=p["bias"], **{flag: p[flag]})
    run.load(module, {"weight": run.tensor("weight"), "bias": run.tensor("bias") if p["bias"] else None})
    return _forward_backward(run, module)


_COLUMN_CONFIGS = (  # in_features, out_features, bias, gather_output, x shape
    (8, 12, True, False, (2, 3, 8)),
    (6, 8, False, True, (5, 6)),
)


def _column_cases(generator):
    return _linear_cases(generator, "ColumnParallelLinear", "gather_output", _COLUMN_CONFIGS)


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


def _last_dim_shard(tensor: torch.Tensor, group_rank: int, group_size: int) -> torch.Tensor:
    return tensor.chunk(group_size, dim=-1)[group_rank]


def _column_rank_data(case, data, group_rank):
    """The input X (replicated), this rank's rows of W and b, its slice of dY unless gathered."""
    tp = case.group_size
    weight, bias = column_shard(data["weight"], data.get("bias"), group_rank, tp)
    upstream = data["upstream"] if case.params["gather_output"] else _last_dim_shard(data["upstream"], group_rank, tp)
    return {"x": data["x"], "weight": weight, "bias": bias, "upstream": upstream}


def _column_run(objects, case, run):
    return _linear_run(objects, case, run, "ColumnParallelLinear", "gather_output")


_ROW_CONFIGS = (  # in_features, out_features, bias, input_is_parallel, x shape
    (8, 6, True, True, (2, 3, 8)),
    (12, 5, False, False, (4, 12)),
)


def _row_cases(generator):
    return _linear_cases(generator, "RowParallelLinear", "input_is_parallel", _ROW_CONFIGS)


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


def _row_rank_data(case, data, group_rank):
    """This rank's columns of W, b (replicated), X or this rank's slice of it, dY (replicated)."""
    tp = case.group_size
    x = _last_dim_shard(data["x"], group_rank, tp) if case.params["input_is_parallel"] else data["x"]
    return {"x": x, "weight": row_shard(data["weight"], group_rank, tp), "bias": data.get("bias"),
            "upstream": data["upstream"]}


def _row_run(objects, case, run):
    return _linear_run(objects, case, run, "RowParallelLinear", "input_is_parallel")


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


def _mlp_rank_data(case, data, group_rank):
    """X and dY (replicated), this rank's rows of W1 and b1, its columns of W2, b2 (replicated)."""
    tp = case.group_size
    w1, b1 = column_shard(data["w1"], data.get("b1"), group_rank, tp)
    return {"x": data["x"], "upstream": data["upstream"], "w1": w1, "b1": b1,
            "w2": row_shard(data["w2"], group_rank, tp), "b2": data.get("b2")}


def _mlp_run(objects, case, run):
    p = case.params
    mlp = objects["ParallelMLP"](p["hidden_size"], p["ffn_hidden_size"], run.group, bias=p["bias"])
    run.load(mlp, {"fc1.weight": run.tensor("w1"), "fc1.bias": run.tensor("b1") if p["bias"] else None,
                   "fc2.weight": run.tensor("w2"), "fc2.bias": run.tensor("b2") if p["bias"] else None})
    return _forward_backward(run, mlp)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_f": TestSpec("Part 1: f (copy_to_tp_region)", ("copy_to_tp_region",), (),
                       _f_cases, _f_expected, _f_run, WORLD_SIZE, rank_data=_own_rows("upstream")),
    "test_g": TestSpec("Part 1: g (reduce_from_tp_region)", ("reduce_from_tp_region",), (),
                       _g_cases, _g_expected, _g_run, WORLD_SIZE, rank_data=_own_rows("x")),
    "test_column_parallel": TestSpec("Part 2: ColumnParallelLinear", ("ColumnParallelLinear",), _MAPPINGS,
                                     _column_cases, _column_expected, _column_run, WORLD_SIZE,
                                     rank_data=_column_rank_data),
    "test_row_parallel": TestSpec("Part 3: RowParallelLinear", ("RowParallelLinear",), _MAPPINGS,
                                  _row_cases, _row_expected, _row_run, WORLD_SIZE, rank_data=_row_rank_data),
    "test_parallel_mlp": TestSpec("Part 4: the Megatron MLP", ("ParallelMLP",),
                                  _MAPPINGS + ("ColumnParallelLinear", "RowParallelLinear"),
                                  _mlp_cases, _mlp_expected, _mlp_run, WORLD_SIZE, rank_data=_mlp_rank_data),
}
