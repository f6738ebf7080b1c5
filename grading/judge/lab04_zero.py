"""Hidden tests of lab 4 (ZeRO): shard ranges and AdamW, stage 1, stage 2, stage 3 (FSDP).

Parts 2 to 4 run on 4 ranks, as one data-parallel group of 4 and as two groups of 2 ({0, 1}
and {2, 3}, each with its own data), on models whose size the group size does not divide (uneven shards).

Part 1: ``adamw_update_`` against torch.optim.AdamW in float64, and bit for bit against its
default (single-tensor) float32 steps, run here (torch's order of operations).

Parts 2 and 3: ``ZeroStage1`` / ``ZeroStage2(params, optimizer_class, process_group=..., **defaults)``
as torch's ``ZeroRedundancyOptimizer`` is called, with torch.optim.AdamW and (one case)
torch.optim.SGD with momentum, two parameter groups of their own lr, betas and weight decay, a
frozen parameter and a parameter without a gradient at step 1 (torch skips it). Stage 1 gets the
mean gradient in ``.grad`` (what DDP leaves); stage 2 gets each rank's own, from a backward (its
hooks reduce them). After step 2 the state dict is consolidated on group rank 0, sent to every
rank and loaded into a fresh optimizer; it must hold the whole model's state. After the steps
every rank's parameters must equal the same torch optimizer run here, in float64, on the
unsharded parameters with the mean gradient. The memory is measured before the checkpoint and
after the last step, three ways (``optimizer_memory``): what the optimizer reaches must be its state
for this rank's shard (AdamW: 2 x shard x 4 bytes per group, at most 2 slots of ceil(N / d) + 64
bytes); other tensors made since it was built at most 64 bytes; the whole process's growth at most
state and gradient shard + 1 MiB (a case of 525,312 values makes hidden full-size state megabytes).
The collectives of backward and step are counted against ``grading/reference/zero.py`` (stage 1
none in backward: a step that reduces again shows); a step must not warn about a deprecated one.

Part 4: a two-unit MLP (Linear + GELU, Linear) wrapped in ``ShardedLayer`` runs forward and
backward on each rank's own batch; outputs, input gradients and each unit's ``shard.grad``
(the shard of the mean gradient) are compared with dense maths, then one AdamW step on the
shards (the grader's ``adamw_update_``, eps ``SHARD_STEP_EPS``) with ``torch.optim.AdamW`` on
the dense model; the collectives per phase are counted (an all-gather per unit in forward, an
all-gather and a reduce-scatter per unit in backward); and between forward and backward the
model and the autograd graph may hold the shards and the units' inputs and outputs, no full parameter
(measured by ``held_memory``). Parts 2 to 4 run with the grader's Part 1. Only Parts 2 and 3 build
``torch.optim`` optimizers on the ranks (``RANKS_BUILD_OPTIMIZERS``: the first imports torch's compiler).

In Parts 2 to 4 each rank receives only what it holds in ZeRO (``_own_gradients`` and
``_own_batch``, the tests' ``rank_data``): the parameters (every rank starts from all of them)
and its own gradients or its own batch, never another rank's.
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.held_memory import held_storages, live_storages, storages_of
from grading.judge.optimizer_memory import PROCESS_SLACK_BYTES, SMALL_BYTES, process_growth, state_bytes, warm_up
from grading.judge.process_memory import measure as measure_process
from grading.judge.process_memory import steady as steady_memory
from grading.judge.rankside import SubmissionProblem
from grading.reference import fsdp, zero
from grading.reference.zero import adamw_update_

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = True
DP_SIZES = (2, 4)
STEPS, LR, BETAS, EPS, WEIGHT_DECAY = 3, 0.05, (0.9, 0.999), 1e-8, 0.1
SHARD_STEP_EPS = 1e-2  # Part 4's step: lr g/(|g|+eps) moves <= lr e/eps for an error e in g (1e-8: up to 2 lr)
#: The second parameter group's own hyperparameters (the first takes the optimizer's defaults).
SECOND_GROUP = {"lr": 0.02, "betas": (0.8, 0.99), "weight_decay": 0.0}
#: name -> (shapes, which parameter group each belongs to, index of a frozen parameter or None).
_PARAMETER_SETS = {"a 5x3 + 5 + 3x5 + 3 MLP (38 values; weights and biases in two groups)":
                   (((5, 3), (5,), (3, 5), (3,)), (0, 1, 0, 1), None),
                   "a 7 + 2x2 model (11 values) and a frozen 3-vector, one group":
                   (((7,), (2, 2), (3,)), (0, 0, 0), 2)}
#: A case whose hidden full-size moments (4 MiB) dwarf the 1 MiB slack: once per stage, dp_size=WORLD_SIZE.
_LARGE_SET = {"a 1024x512 + 1024 layer (525,312 values, one group)": (((1024, 512), (1024,)), (0, 0), None)}
HIDDEN, FFN, BATCH = 8, 16, 2

REFERENCE = {
    "flat_shard_range": zero.flat_shard_range,
    "adamw_update_": zero.adamw_update_,
    "shard_slots": zero.shard_slots,
    "unslot": zero.unslot,
    "shard_pieces": zero.shard_pieces,
    "assemble_state_dict": zero.assemble_state_dict,
    "ZeroStage1": zero.ZeroStage1,
    "ZeroStage2": zero.ZeroStage2,
    "ShardedLayer": fsdp.ShardedLayer,
}
_BASICS = ("flat_shard_range", "adamw_update_", "shard_slots", "unslot")
_SAME_KIND = {"all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather", "all_gather_single": "all_gather",
              "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
              "reduce_scatter_single": "reduce_scatter"}
_STATE = "bytes the optimizer holds (its state for this rank's shard)"
_BITS = "elements that differ from torch.optim.AdamW's in float32 (torch's order of operations gives 0)"
_DEPRECATED = ("deprecation warnings in the steps (torch 2.13 deprecates all_gather_into_tensor and "
               "reduce_scatter_tensor: all_gather_single, reduce_scatter_single)")
_CONSOLIDATED = "values of per-element state in the consolidated state_dict (the whole model's)"
_HELD = "bytes held between forward and backward (shards and activations, no full parameter)"


def _layout(size: int) -> str:
    return group_layout(f"dp_size={size}", size, WORLD_SIZE)


def _shard_lengths(numel: int, size: int) -> list:
    """Elements of each rank's shard (torch.tensor_split's sizes)."""
    return [numel // size + (1 if rank < numel % size else 0) for rank in range(size)]


def _dense_optimizer(optimizer_class, defaults: dict, param_groups: list, grads_per_step: list) -> list:
    """``optimizer_class(**defaults)`` in float64 on the unsharded parameters (``param_groups``: torch's,
    with tensors); ``grads_per_step[step][i]`` is the gradient of the groups' parameter i, in the
    groups' order (None: no gradient, skipped). The final parameters, in that order."""
    leaves, groups = [], []
    for group in param_groups:
        params = [p.detach().to(torch.float64).clone().requires_grad_(True) for p in group["params"]]
        leaves += params
        groups.append({**group, "params": params})
    optimizer = optimizer_class(groups, **defaults)
    for grads in grads_per_step:
        for leaf, grad in zip(leaves, grads):
            leaf.grad = None if grad is None else grad.to(torch.float64)
        optimizer.step()
    return [leaf.detach() for leaf in leaves]


def _dense_adamw(param_groups: list, grads_per_step: list, eps: float = EPS) -> list:
    """``_dense_optimizer`` with torch.optim.AdamW at the tests' defaults (``eps``: its epsilon)."""
    return _dense_optimizer(torch.optim.AdamW, {"lr": LR, "betas": BETAS, "eps": eps, "weight_decay": WEIGHT_DECAY},
                            param_groups, grads_per_step)


# ----- Part 1: shard ranges and the AdamW update ---------------------------------------------------

_RANGES = ((38, 4), (11, 4), (38, 2), (3, 4), (12, 4))


def _basics_cases(generator):
    cases = [Case(f"flat_shard_range({numel}, {n}, rank) for every rank", WORLD_SIZE,
                  {"kind": "range", "numel": numel, "n": n}, [{}]) for numel, n in _RANGES]
    param, grads = torch.randn(10, 10, generator=generator), torch.randn(STEPS, 10, 10, generator=generator)
    cases.append(Case(f"adamw_update_ on a (10, 10) tensor, {STEPS} steps (lr={LR}, weight_decay={WEIGHT_DECAY}), "
                      "against torch.optim.AdamW (float64), and bit for bit against it in float32", WORLD_SIZE,
                      {"kind": "adamw"}, [{"param": param, "grads": grads, "torch32": _torch_adamw_float32(param, grads)}]))
    return cases


def _torch_adamw_float32(param: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """``torch.optim.AdamW``'s default (single-tensor) float32 steps on ``param``, run here, flat."""
    leaf = nn.Parameter(param.clone())
    optimizer = torch.optim.AdamW([leaf], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False)
    for grad in grads:
        leaf.grad = grad.clone()
        optimizer.step()
    return leaf.detach().reshape(-1)


def _basics_expected(case, data):
    if case.params["kind"] == "range":
        bounds, start = [], 0
        for length in _shard_lengths(case.params["numel"], case.params["n"]):
            bounds.append((start, start + length))
            start += length
        out = torch.tensor(bounds, dtype=torch.float64)
    else:
        (out,) = _dense_adamw([{"params": [data["param"]]}], [[g] for g in data["grads"]])
        out = out.reshape(-1)
        return [{"out": out, "grads": {}, "values": {_BITS: torch.zeros(1, dtype=torch.float64)}}
                for _ in range(case.group_size)]
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
        objects["adamw_update_"](param, grad, exp_avg, exp_avg_sq, step, LR, BETAS, EPS, WEIGHT_DECAY)
    result = run.result(param.reshape(-1), None)
    differ = (param.reshape(-1) != run.tensor("torch32")).sum().item()
    result["values"] = {_BITS: torch.tensor([float(differ)], dtype=torch.float64)}
    return result


# ----- Parts 2 and 3: the sharded optimizers ---------------------------------------------------------

#: name -> (optimizer class, its keyword arguments, per-element state values per trained value).
_OPTIMIZERS = {"AdamW": (torch.optim.AdamW, {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY}, 2),
               "SGD": (torch.optim.SGD, {"lr": LR, "momentum": 0.9, "weight_decay": WEIGHT_DECAY}, 1)}
#: The parameter (index) that gets no gradient at step 0 on any rank: torch's optimizers skip it.
_SKIPPED = 1


def _zero_cases(generator, stage: int):
    cases = []
    runs = [(size, name, optimizer) for size in DP_SIZES for name in _PARAMETER_SETS for optimizer in ("AdamW",)]
    runs.append((DP_SIZES[0], next(iter(_PARAMETER_SETS)), "SGD"))
    runs.append((WORLD_SIZE, next(iter(_LARGE_SET)), "AdamW"))
    for size, description, optimizer in runs:
        shapes, groups_of, frozen = {**_PARAMETER_SETS, **_LARGE_SET}[description]
        groups = []
        large = description in _LARGE_SET
        for _ in range(WORLD_SIZE // size):
            data = {f"p{i}": torch.randn(*shape, generator=generator) for i, shape in enumerate(shapes)}
            data.update({f"g{i}": _gradients(generator, size, shape, large)  # per step, per rank
                         for i, shape in enumerate(shapes) if i != frozen})
            groups.append(data)
        reduced = "averaged before step (as DDP leaves them)" if stage == 1 else "from each rank's backward"
        cases.append(Case(f"ZeroStage{stage}(params, torch.optim.{optimizer}, process_group=...), {description}, "
                          f"gradients {reduced}, parameter {_SKIPPED} without one at step 0, {STEPS} steps "
                          f"(second group {SECOND_GROUP}), state_dict consolidated on group rank 0 and loaded on "
                          f"every rank after step {STEPS - 1}, {_layout(size)}", size,
                          {"count": len(shapes), "groups_of": groups_of, "frozen": frozen, "optimizer": optimizer,
                           "stage": stage}, groups))
    return cases


def _gradients(generator, size: int, shape: tuple, large: bool) -> torch.Tensor:
    """(STEPS, size, *shape) gradients, one per step and rank. In the large case each element's mean
    over the ranks is +-1 with a little noise: among half a million standard normal means a few are
    within 1e-7 of zero, where AdamW's g / (|g| + eps) turns float32's rounding of the mean into
    differences of 1e-4 from the float64 expectation, in the reference as in any answer."""
    if not large:
        return torch.randn(STEPS, size, *shape, generator=generator)
    signs = torch.randn(STEPS, 1, *shape, generator=generator).sign()
    return signs + 0.1 * torch.randn(STEPS, size, *shape, generator=generator)


def _own_gradients(case, data, group_rank):
    """rank_data of Parts 2 and 3: the parameters ``p<i>`` (every rank starts from all of them) and
    ``g<i>`` (steps, *shape): in stage 2 this rank's own gradients, in stage 1 their mean over the
    group, what DDP leaves in ``.grad`` (never another rank's own)."""
    pick = (lambda g: g.mean(1)) if case.params["stage"] == 1 else (lambda g: g[:, group_rank])
    return {name: pick(value) if name.startswith("g") else value for name, value in data.items()}


def _param_groups(params: list, case) -> list:
    """The case's parameter groups: group 0 takes the optimizer's defaults, group 1 ``SECOND_GROUP``
    (SGD has no betas)."""
    second = {k: v for k, v in SECOND_GROUP.items() if k != "betas" or case.params["optimizer"] == "AdamW"}
    groups = [{"params": []}, {"params": [], **second}]
    for param, index in zip(params, case.params["groups_of"]):
        groups[index]["params"].append(param)
    return [group for group in groups if group["params"]]


def _trainable_numels(case, shapes: list) -> list:
    """Trainable elements of each parameter group of the case."""
    numels = [0, 0]
    for i, (shape, index) in enumerate(zip(shapes, case.params["groups_of"])):
        if i != case.params["frozen"]:
            numels[index] += int(torch.Size(shape).numel())
    return [n for n in numels if n]


def _gradient(case, grads: dict, i: int, step: int):
    """Parameter i's gradient at ``step`` (None: frozen, or the skipped one at step 0)."""
    return None if i not in grads or (i == _SKIPPED and step == 0) else grads[i][step]


def _zero_expected(case, data):
    count, size = case.params["count"], case.group_size
    optimizer_class, defaults, per_value = _OPTIMIZERS[case.params["optimizer"]]
    params = [data[f"p{i}"] for i in range(count)]
    grads = {i: data[f"g{i}"].to(torch.float64).mean(1) for i in range(count) if f"g{i}" in data}
    order = [i for g in _param_groups(list(range(count)), case) for i in g["params"]]  # the groups' order
    final = _dense_optimizer(optimizer_class, defaults, _param_groups(params, case),
                             [[_gradient(case, grads, i, step) for i in order] for step in range(STEPS)])
    by_index = dict(zip(order, final))
    out = torch.cat([by_index[i].reshape(-1) for i in range(count)])
    numels = _trainable_numels(case, [p.shape for p in params])
    per_element = 4 * per_value
    consolidated = torch.tensor([float(per_value * sum(numels))], dtype=torch.float64)
    return [{"out": out, "grads": {},
             "values": {_STATE: torch.tensor([float(sum(per_element * _shard_lengths(n, size)[rank] for n in numels))],
                                             dtype=torch.float64), _CONSOLIDATED: consolidated,
                        _DEPRECATED: torch.zeros(1, dtype=torch.float64)}}
            for rank in range(size)]


def _state_limits(case, params: list, run) -> tuple:
    """(exact, most, allowed) bytes for this rank: its optimizer state for its shard, that state in
    slots (ceil(N / d) per group) + ``SMALL_BYTES``, and what its process may grow by (state and
    gradient shard in slots + ``PROCESS_SLACK_BYTES``)."""
    numels = _trainable_numels(case, [p.shape for p in params])
    per_value = _OPTIMIZERS[case.params["optimizer"]][2]
    exact = sum(4 * per_value * _shard_lengths(n, run.group_size)[run.group_rank] for n in numels)
    slots = sum(-(-n // run.group_size) for n in numels)
    return exact, 4 * per_value * slots + SMALL_BYTES, 4 * (per_value + 1) * slots + PROCESS_SLACK_BYTES


def _checkpoint(optimizer, make, run):
    """consolidate_state_dict(to=0), state_dict() on group rank 0 sent to every rank, loaded into a
    fresh optimizer; returns it and the per-element state values the consolidated dict holds."""
    optimizer.consolidate_state_dict(to=0)
    saved = [optimizer.state_dict() if run.group_rank == 0 else None]
    dist.broadcast_object_list(saved, src=dist.get_global_rank(run.group, 0), group=run.group)
    if not isinstance(saved[0], dict) or not isinstance(saved[0].get("state"), dict):
        raise SubmissionProblem(f"state_dict() on group rank 0 returned {type(saved[0]).__name__}, expected "
                                "torch's {'state': ..., 'param_groups': ...}")
    values = sum(v.numel() for entry in saved[0]["state"].values() for v in entry.values()
                 if torch.is_tensor(v) and v.dim() > 0)
    fresh = make()
    fresh.load_state_dict(saved[0])
    return fresh, torch.tensor([float(values)], dtype=torch.float64)


def _zero_step_gradients(case, params: list, grads: dict, step: int, run) -> None:
    """Stage 1: ``.grad`` set to the mean (DDP's); stage 2: a backward whose gradients are this rank's."""
    if case.params["stage"] == 1:
        for i, param in enumerate(params):
            param.grad = None if _gradient(case, grads, i, step) is None else _gradient(case, grads, i, step).clone()
        return
    used = [(param, _gradient(case, grads, i, step)) for i, param in enumerate(params)]
    with run.phase(f"step {step + 1}: backward"):
        sum((param * grad).sum() for param, grad in used if grad is not None).backward()


def _zero_run(objects, case, run, stage: int):
    count, frozen = case.params["count"], case.params["frozen"]
    params = [nn.Parameter(run.tensor(f"p{i}"), requires_grad=i != frozen) for i in range(count)]
    zero_class = objects[f"ZeroStage{stage}"]
    optimizer_class, defaults, _ = _OPTIMIZERS[case.params["optimizer"]]
    make = lambda: zero_class(_param_groups(params, case), optimizer_class, process_group=run.group,  # noqa: E731
                              **defaults)
    grads = {i: run.tensor(f"g{i}") for i in range(count) if i != frozen}
    exact, most, allowed = _state_limits(case, params, run)
    warm_up(optimizer_class, defaults)
    steady_memory()
    before = set(live_storages())  # what the rank holds before the optimizer exists
    before_process = measure_process(run.private_folder)
    optimizer = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            if step == STEPS - 1:
                held_before = state_bytes(optimizer, params, exact, most, before)
                optimizer, consolidated = _checkpoint(optimizer, make, run)
            optimizer.zero_grad()
            _zero_step_gradients(case, params, grads, step, run)
            with run.phase(f"step {step + 1}: step"):
                optimizer.step()
    deprecated = [w for w in caught if issubclass(w.category, FutureWarning) and "deprecated" in str(w.message)]
    held = held_before if isinstance(held_before, str) else state_bytes(optimizer, params, exact, most, before)
    if not isinstance(held, str):
        held = process_growth(optimizer, params, allowed, run.private_folder, before_process) or held
    result = run.result(torch.cat([p.detach().reshape(-1) for p in params]), None)
    result["values"] = {_STATE: held,
                        _CONSOLIDATED: consolidated,
                        _DEPRECATED: torch.tensor([float(len(deprecated))], dtype=torch.float64)}
    return result


def _stage1_cases(generator):
    return _zero_cases(generator, 1)


def _stage1_run(objects, case, run):
    return _zero_run(objects, case, run, 1)


def _stage2_cases(generator):
    return _zero_cases(generator, 2)


def _stage2_run(objects, case, run):
    return _zero_run(objects, case, run, 2)


# ----- Part 4: ZeRO-3, parameters sharded per layer ----------------------------------------------------

def _units(weights: dict) -> list:
    """The dense units (Linear(HIDDEN, FFN) + GELU, Linear(FFN, HIDDEN)) holding ``weights``."""
    units = [nn.Sequential(nn.Linear(HIDDEN, FFN), nn.GELU()), nn.Linear(FFN, HIDDEN)]
    with torch.no_grad():
        for unit, index in zip(units, (0, 1)):
            linear = unit[0] if isinstance(unit, nn.Sequential) else unit
            linear.weight.copy_(weights[f"w{index}"])
            linear.bias.copy_(weights[f"b{index}"])
    return units


def _zero3_cases(generator):
    cases = []
    for size in DP_SIZES:
        groups = []
        for _ in range(WORLD_SIZE // size):
            data = {"w0": torch.randn(FFN, HIDDEN, generator=generator) / HIDDEN**0.5,
                    "b0": torch.randn(FFN, generator=generator),
                    "w1": torch.randn(HIDDEN, FFN, generator=generator) / FFN**0.5,
                    "b1": torch.randn(HIDDEN, generator=generator)}
            data.update(x=torch.randn(size, BATCH, HIDDEN, generator=generator),
                        dout=torch.randn(size, BATCH, HIDDEN, generator=generator))
            groups.append(data)
        cases.append(Case(f"ShardedLayer units [Linear({HIDDEN}, {FFN}) + GELU, Linear({FFN}, {HIDDEN})], "
                          f"{BATCH} rows per rank, forward, backward, one AdamW step on the shards "
                          f"(lr={LR}, eps={SHARD_STEP_EPS}, weight_decay={WEIGHT_DECAY}), {_layout(size)}",
                          size, {}, groups))
    return cases


def _own_batch(case, data, group_rank):
    """rank_data of Part 4: the units' parameters (each rank's ShardedLayer shards them) and this rank's
    own rows ``x`` and their upstream gradient ``dout`` (BATCH, HIDDEN), no other rank's."""
    return {name: value[group_rank] if name in ("x", "dout") else value for name, value in data.items()}


def _zero3_expected(case, data):
    size = case.group_size
    leaves = [data[name].to(torch.float64).requires_grad_(True) for name in ("w0", "b0", "w1", "b1")]
    outs, dxs, grads = [], [], [torch.zeros_like(leaf) for leaf in leaves]
    for rank in range(size):
        x = data["x"][rank].to(torch.float64).requires_grad_(True)
        out = F.linear(F.gelu(F.linear(x, leaves[0], leaves[1])), leaves[2], leaves[3])
        dx, *param_grads = torch.autograd.grad(out, [x] + leaves, data["dout"][rank].to(torch.float64))
        for total, grad in zip(grads, param_grads):
            total += grad / size
        dxs.append(dx)
        outs.append(out.detach())
    final = _dense_adamw([{"params": leaves}], [grads], eps=SHARD_STEP_EPS)
    flat = lambda tensors: [torch.cat([t.reshape(-1) for t in tensors[i:i + 2]]) for i in (0, 2)]  # noqa: E731
    flat_grads, flat_final = flat(grads), flat(final)
    expected = []
    for rank in range(size):
        shards = [[f.tensor_split(size)[rank] for f in flats] for flats in (flat_grads, flat_final)]
        numels = [f.numel() for f in flat_final]
        expected.append({"out": outs[rank], "dx": dxs[rank],
                         "grads": {f"unit {u}'s shard": shards[0][u] for u in (0, 1)},
                         "values": {"shards after the AdamW step": torch.cat(shards[1]),
                                    _HELD: torch.tensor([float(sum(4 * _shard_lengths(n, size)[rank]
                                                                   for n in numels))], dtype=torch.float64)}})
    return expected


def _shard_of(unit, index: int) -> torch.Tensor:
    shard = getattr(unit, "shard", None)
    if not isinstance(shard, nn.Parameter):
        raise SubmissionProblem(f"ShardedLayer of unit {index} has no nn.Parameter `shard` (this rank's flat shard)")
    return shard


def _held_between(model, out, x, shards: list, run) -> torch.Tensor | str:
    """The shards' bytes when the model and ``out``'s graph hold at most the shards (slots), the
    units' inputs and outputs and ``SMALL_BYTES`` more, besides ``x`` and ``out``; else a string."""
    held = sum(held_storages([model, out.grad_fn], storages_of([x, out])).values())
    exact = sum(4 * s.numel() for s in shards)
    activations = 4 * BATCH * 2 * (HIDDEN + FFN)  # each unit's input and output
    slots = sum(4 * -(-n // run.group_size) for n in (FFN * (HIDDEN + 1), HIDDEN * (FFN + 1)))
    most = slots + activations + SMALL_BYTES
    if held <= most:
        return torch.tensor([float(exact)], dtype=torch.float64)
    return (f"between forward and backward the model and its autograd graph hold {held} bytes of tensors besides "
            f"the input and output, more than the shards ({exact} bytes) and the units' activations "
            f"({activations} bytes) could take (at most {most}): a gathered full parameter is still allocated")


def _zero3_run(objects, case, run):
    units = [objects["ShardedLayer"](unit, run.group) for unit in _units({k: run.tensor(k) for k in
                                                                          ("w0", "b0", "w1", "b1")})]
    model = nn.Sequential(*units)
    shards = [_shard_of(unit, index) for index, unit in enumerate(units)]
    x = run.tensor("x").requires_grad_(True)
    with run.phase("forward"):
        out = model(x)
    held = _held_between(model, out, x, shards, run)
    with run.phase("backward"):
        out.backward(run.tensor("dout"))
    result = run.result(out, x.grad)
    result["grads"] = {f"unit {u}'s shard": None if s.grad is None else s.grad.detach().clone()
                       for u, s in enumerate(shards)}
    with torch.no_grad():  # one AdamW step on each shard (the grader's adamw_update_, see the docstring)
        for shard in shards:
            if shard.grad is not None:
                zeros = torch.zeros_like(shard)
                adamw_update_(shard, shard.grad, zeros, zeros.clone(), 1, LR, BETAS, SHARD_STEP_EPS, WEIGHT_DECAY)
    result["values"] = {"shards after the AdamW step": torch.cat([s.detach().reshape(-1) for s in shards]).clone(),
                        _HELD: held}
    for phase in ("forward", "backward"):
        result["comm"][phase] = {_SAME_KIND.get(op, op): calls for op, calls in result["comm"][phase].items()}
    return result


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_shards_and_adamw": TestSpec("Part 1: flat_shard_range and adamw_update_", ("flat_shard_range",
                                                                                     "adamw_update_"),
                                      (), _basics_cases, _basics_expected, _basics_run, WORLD_SIZE),
    "test_zero_stage1": TestSpec("Part 2: ZeRO stage 1", ("shard_pieces", "ZeroStage1"),
                                 _BASICS + ("assemble_state_dict",), _stage1_cases, _zero_expected, _stage1_run,
                                 WORLD_SIZE, rank_data=_own_gradients, walks_live_objects=True),
    "test_zero_stage2": TestSpec("Part 3: ZeRO stage 2", ("ZeroStage2",),
                                 _BASICS + ("assemble_state_dict", "shard_pieces", "ZeroStage1"), _stage2_cases,
                                 _zero_expected, _stage2_run, WORLD_SIZE, rank_data=_own_gradients,
                                 walks_live_objects=True),
    "test_zero_stage3": TestSpec("Part 4: ZeRO stage 3 (FSDP)", ("ShardedLayer",), _BASICS,
                                 _zero3_cases, _zero3_expected, _zero3_run, WORLD_SIZE, rank_data=_own_batch),
}
