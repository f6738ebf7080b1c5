"""Hidden tests of lab 4 (ZeRO): shard ranges and Adam, stage 1, stage 2.

Parts 2 and 3 run on 4 ranks, as one data-parallel group of 4 and as two groups of 2 ({0, 1}
and {2, 3}, each with its own data), on parameter sets whose total size the group size does
not divide (38 and 11 elements: uneven shards). Each rank gets its own gradients at each of 3
steps; after the steps every rank's parameters must equal ``torch.optim.Adam`` run here, in
float64, on the unsharded parameters with the mean gradient. The optimizer's ``exp_avg`` and
``exp_avg_sq`` must hold this rank's shard only (2 x its shard size elements, and the buffers
behind them at most 2 ceil(Psi / N)), and the collectives of a step are counted against
``grading/reference/zero.py`` (``all_gather`` and ``all_gather_into_tensor`` count as one kind,
so do the two reduce-scatters). Parts 2 and 3 run with the reference shard range and Adam update.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from grading.judge.engine import Case, TestSpec
from grading.judge.rankside import SubmissionProblem
from grading.reference import zero

WORLD_SIZE = 4
DP_SIZES = (2, 4)
STEPS, LR, BETAS, EPS = 3, 0.05, (0.9, 0.999), 1e-8
_PARAMETER_SETS = {"a 5x3 + 5 + 3x5 + 3 MLP (38 values)": ((5, 3), (5,), (3, 5), (3,)),
                   "a 7 + 2x2 model (11 values)": ((7,), (2, 2))}

REFERENCE = {
    "flat_shard_range": zero.flat_shard_range,
    "adam_update_": zero.adam_update_,
    "shard_slots": zero.shard_slots,
    "unslot": zero.unslot,
    "ZeroStage1Adam": zero.ZeroStage1Adam,
    "ZeroStage2Adam": zero.ZeroStage2Adam,
}
_BASICS = ("flat_shard_range", "adam_update_", "shard_slots", "unslot")
_SAME_KIND = {"all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather",
              "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter"}


def _layout(size: int) -> str:
    if size == WORLD_SIZE:
        return f"dp_size={size}"
    groups = " and ".join("{" + ", ".join(map(str, range(s, s + size))) + "}" for s in range(0, WORLD_SIZE, size))
    return f"dp_size={size} (groups {groups})"


def _dense_adam(params: list, grads_per_step: list) -> torch.Tensor:
    """torch.optim.Adam in float64 on the unsharded parameters; the final parameters, flat."""
    leaves = [p.detach().to(torch.float64).clone().requires_grad_(True) for p in params]
    optimizer = torch.optim.Adam(leaves, lr=LR, betas=BETAS, eps=EPS)
    for grads in grads_per_step:
        for leaf, grad in zip(leaves, grads):
            leaf.grad = grad.to(torch.float64)
        optimizer.step()
    return torch.cat([leaf.detach().reshape(-1) for leaf in leaves])


# ----- Part 1: shard ranges and the Adam update ----------------------------------------------------

_RANGES = ((38, 4), (11, 4), (38, 2), (3, 4), (12, 4))


def _basics_cases(generator):
    cases = [Case(f"flat_shard_range({numel}, {n}, rank) for every rank", WORLD_SIZE,
                  {"kind": "range", "numel": numel, "n": n}, [{}]) for numel, n in _RANGES]
    cases.append(Case(f"adam_update_ on a (4, 3) tensor, {STEPS} steps (lr={LR}), against torch.optim.Adam",
                      WORLD_SIZE, {"kind": "adam"},
                      [{"param": torch.randn(4, 3, generator=generator),
                        "grads": torch.randn(STEPS, 4, 3, generator=generator)}]))
    return cases


def _basics_expected(case, data):
    if case.params["kind"] == "range":
        bounds, start = [], 0
        for part in torch.tensor_split(torch.arange(case.params["numel"]), case.params["n"]):
            bounds.append((start, start + part.numel()))
            start += part.numel()
        out = torch.tensor(bounds, dtype=torch.float64)
    else:
        out = _dense_adam([data["param"]], [[g] for g in data["grads"]])
    return [{"out": out, "grads": {}} for _ in range(case.group_size)]


def _basics_run(objects, case, run):
    if case.params["kind"] == "range":
        n = case.params["n"]
        bounds = [objects["flat_shard_range"](case.params["numel"], n, rank) for rank in range(n)]
        try:
            out = torch.tensor([[int(start), int(stop)] for start, stop in bounds], dtype=torch.float64)
        except (TypeError, ValueError):
            raise SubmissionProblem(f"flat_shard_range returned {bounds[0]!r:.60}, expected (start, stop)") from None
        return run.result(out, None)
    param = run.tensor("param")
    exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
    for step, grad in enumerate(run.tensor("grads"), start=1):
        objects["adam_update_"](param, grad, exp_avg, exp_avg_sq, step, LR, BETAS, EPS)
    return run.result(param.reshape(-1), None)


# ----- Parts 2 and 3: the sharded optimizers ---------------------------------------------------------

def _zero_cases(generator, stage: int):
    cases = []
    for size in DP_SIZES:
        for description, shapes in _PARAMETER_SETS.items():
            groups = []
            for _ in range(WORLD_SIZE // size):
                data = {f"p{i}": torch.randn(*shape, generator=generator) for i, shape in enumerate(shapes)}
                data.update({f"g{i}": torch.randn(STEPS, size, *shape, generator=generator)  # per step, per rank
                             for i, shape in enumerate(shapes)})
                groups.append(data)
            cases.append(Case(f"ZeroStage{stage}Adam, {description}, {STEPS} steps (lr={LR}), {_layout(size)}", size,
                              {"count": len(shapes)}, groups))
    return cases


def _zero_expected(case, data):
    count, size = case.params["count"], case.group_size
    params = [data[f"p{i}"] for i in range(count)]
    mean_grads = [[data[f"g{i}"][step].to(torch.float64).mean(0) for i in range(count)] for step in range(STEPS)]
    out = _dense_adam(params, mean_grads)
    numel = out.numel()
    per_rank = []
    for rank in range(size):
        shard = len(torch.tensor_split(torch.arange(numel), size)[rank])
        per_rank.append({"out": out, "grads": {},
                         "values": {"optimizer state elements (exp_avg + exp_avg_sq)":
                                    torch.tensor([2.0 * shard], dtype=torch.float64)}})
    return per_rank


def _state_elements(optimizer, numel: int, size: int) -> torch.Tensor:
    """Elements of exp_avg and exp_avg_sq; SubmissionProblem if the buffers behind them (views
    included, a buffer they share counted once) hold more than two slots (2 ceil(Psi / N)): the
    state of every parameter would still be held."""
    slot = -(-numel // size)
    held = {}
    for name in ("exp_avg", "exp_avg_sq"):
        state = getattr(optimizer, name, None)
        if not isinstance(state, torch.Tensor):
            raise SubmissionProblem(f"the optimizer has no tensor attribute {name}: keep Adam's state there, flat")
        storage = state.untyped_storage()
        held[storage.data_ptr()] = storage.nbytes() // max(1, state.element_size())
    if sum(held.values()) > 2 * slot:
        raise SubmissionProblem(f"exp_avg and exp_avg_sq are views into buffers of {sum(held.values())} elements: "
                                f"the rank holds state for more than its shard (at most 2 ceil(Psi / N) = {2 * slot})")
    return torch.tensor([float(optimizer.exp_avg.numel() + optimizer.exp_avg_sq.numel())], dtype=torch.float64)


def _zero_run(objects, case, run, stage: int):
    count = case.params["count"]
    params = [nn.Parameter(run.tensor(f"p{i}")) for i in range(count)]
    optimizer = objects[f"ZeroStage{stage}Adam"](params, run.group, lr=LR, betas=BETAS, eps=EPS)
    grads = [run.tensor(f"g{i}") for i in range(count)]
    for step in range(STEPS):
        for param, grad in zip(params, grads):
            param.grad = grad[step][run.group_rank].clone()
        with run.phase("step"):
            optimizer.step()
    result = run.result(torch.cat([p.detach().reshape(-1) for p in params]), None)
    numel = sum(p.numel() for p in params)
    result["values"] = {"optimizer state elements (exp_avg + exp_avg_sq)": _state_elements(optimizer, numel, run.group_size)}
    result["comm"]["step"] = {_SAME_KIND.get(op, op): calls for op, calls in result["comm"]["step"].items()}
    return result


def _stage1_cases(generator):
    return _zero_cases(generator, 1)


def _stage1_run(objects, case, run):
    return _zero_run(objects, case, run, 1)


def _stage2_cases(generator):
    return _zero_cases(generator, 2)


def _stage2_run(objects, case, run):
    return _zero_run(objects, case, run, 2)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_shards_and_adam": TestSpec("Part 1: flat_shard_range and adam_update_", ("flat_shard_range", "adam_update_"),
                                     (), _basics_cases, _basics_expected, _basics_run, WORLD_SIZE),
    "test_zero_stage1": TestSpec("Part 2: ZeRO stage 1", ("ZeroStage1Adam",), _BASICS,
                                 _stage1_cases, _zero_expected, _stage1_run, WORLD_SIZE),
    "test_zero_stage2": TestSpec("Part 3: ZeRO stage 2", ("ZeroStage2Adam",), _BASICS + ("ZeroStage1Adam",),
                                 _stage2_cases, _zero_expected, _stage2_run, WORLD_SIZE),
}
