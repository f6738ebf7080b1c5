"""Hidden tests of lab 6 (expert parallelism): routing, the all-to-all with uneven splits, the MoE layer.

Every test runs on 4 ranks, as one expert-parallel group of 4 and as two groups of 2 ({0, 1}
and {2, 3}, each with its own data). Each rank routes its own B tokens; expected results are
dense float64 maths here: top-k of the router's softmax, capacity C = ceil(B k / E * c) per
expert per rank (token 0's choices served first), lambda * E * sum_i f_i P_i with f_i constant,
and the MoE output sum over kept assignments of g * expert(x) with every expert at hand. The
judge records, at each rank's process group (whatever function made them), the all-to-alls of
each phase and the bytes of each call's send buffer (the rows a rank sends times h times 4
bytes). Each rank receives only its own tokens, the router (replicated) and its own experts'
weights, never the other ranks'. Later parts run with the reference for the earlier ones.
"""
from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn as nn

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.rankside import SubmissionProblem
from grading.reference import expert_parallel as ep

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = False
HIDDEN, FFN_HIDDEN, TOKENS, AUX_COEFFICIENT = 8, 16, 12, 1e-2
#: (group size, experts E, top_k, capacity factor c) of the routing and MoE cases.
LAYOUTS = ((4, 8, 2, 1.0), (4, 4, 1, 1.5), (2, 8, 2, 2.0))
FORWARD_BYTES, BACKWARD_BYTES = "bytes of each all_to_all_single in forward", "bytes of each all_to_all_single in backward"

REFERENCE = {
    "route": ep.route,
    "split_sizes": ep.split_sizes,
    "all_to_all_rows": ep.all_to_all_rows,
    "ExpertParallelMoE": ep.ExpertParallelMoE,
}


def _layout(size: int) -> str:
    return group_layout(f"ep_size={size}", size, WORLD_SIZE)


def _float(values) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64).reshape(-1)


def _bytes(messages) -> torch.Tensor:
    """The bytes of each all-to-all of a phase (``CaseRun.messages``), in order."""
    return _float([float(m.bytes) for m in messages if m.op == "all_to_all"])


def _own_rows(*names: str, experts: bool = False):
    """rank_data: this rank's row of each of ``names`` (one per group rank), the router (replicated),
    and with ``experts`` this rank's experts' weights (E / group size of them), nothing else."""
    def rank_data(case, data, group_rank):
        own = {name: data[name][group_rank] for name in names}
        if "router" in data:
            own["router"] = data["router"]
        if experts:
            local = case.params["experts"] // case.group_size
            mine = slice(group_rank * local, (group_rank + 1) * local)
            own.update({name: data[name][mine] for name in ("w1", "b1", "w2", "b2")})
        return own
    return rank_data


# ----- dense routing ---------------------------------------------------------------------------------

def _moe_data(generator, size: int, experts: int) -> dict:
    """One group's tensors; feature 0 of every token is 1 and the router favours low-numbered experts."""
    x = torch.randn(size, TOKENS, HIDDEN, generator=generator)
    x[..., 0] = 1.0
    router = torch.randn(experts, HIDDEN, generator=generator)
    router[:, 0] = -1.5 * torch.arange(experts) / experts
    return {"x": x, "router": router, "u": torch.randn(size, TOKENS, HIDDEN, generator=generator),
            "u_gates": torch.randn(size, TOKENS, 2, generator=generator),
            "w1": torch.randn(experts, FFN_HIDDEN, HIDDEN, generator=generator) * 0.3,
            "b1": torch.randn(experts, FFN_HIDDEN, generator=generator) * 0.1,
            "w2": torch.randn(experts, HIDDEN, FFN_HIDDEN, generator=generator) * 0.3,
            "b2": torch.randn(experts, HIDDEN, generator=generator) * 0.1}


def _dense_route(x, router, top_k: int, factor: float):
    """(gates, experts, kept (float), aux) of tokens x (float64) by the lab's rules."""
    num_experts = router.shape[0]
    probs = (x @ router.T).softmax(dim=-1)
    gates, experts = probs.topk(top_k, dim=-1)
    capacity = math.ceil(Fraction(x.shape[0] * top_k, num_experts) * Fraction(repr(float(factor))))
    served = [0] * num_experts
    kept = torch.zeros(experts.shape, dtype=torch.float64)
    for token in range(experts.shape[0]):
        for choice in range(top_k):
            expert = int(experts[token, choice])
            kept[token, choice] = float(served[expert] < capacity)
            served[expert] += 1
    share = torch.bincount(experts.reshape(-1), minlength=num_experts).to(torch.float64) / experts.numel()
    aux = AUX_COEFFICIENT * num_experts * (share * probs.mean(dim=0)).sum()
    return gates, experts, kept, aux


# ----- Part 1: routing ---------------------------------------------------------------------------------

def _route_cases(generator):
    return [Case(f"route, B={TOKENS} tokens per rank, top-{k} of E={experts}, capacity factor {factor}, {_layout(size)}",
                 size, {"experts": experts, "top_k": k, "factor": factor},
                 [_moe_data(generator, size, experts) for _ in range(WORLD_SIZE // size)])
            for size, experts, k, factor in LAYOUTS]


def _route_expected(case, data):
    k, expected = case.params["top_k"], []
    for rank in range(case.group_size):
        x = data["x"][rank].to(torch.float64).requires_grad_(True)
        router = data["router"].to(torch.float64).requires_grad_(True)
        gates, experts, kept, aux = _dense_route(x, router, k, case.params["factor"])
        ((gates * data["u_gates"][rank, :, :k].to(torch.float64)).sum() + aux).backward()
        expected.append({"out": gates.detach(), "dx": x.grad, "grads": {"router.weight": router.grad},
                         "values": {"experts chosen": experts.to(torch.float64), "kept assignments": kept,
                                    "aux loss": aux.detach().reshape(1)}})
    return expected


class _Router(nn.Module):
    def __init__(self, experts: int):
        super().__init__()
        self.router = nn.Linear(HIDDEN, experts, bias=False)


def _route_run(objects, case, run):
    holder = _Router(case.params["experts"]).to(run.device)
    run.load(holder, {"router.weight": run.tensor("router")})
    x = run.leaf("x")
    with run.phase("route"):
        gates, experts, kept, aux = objects["route"](x, holder.router.weight, case.params["top_k"],
                                                     case.params["factor"], AUX_COEFFICIENT)
    for name, value in (("gates", gates), ("experts", experts), ("kept", kept), ("the aux loss", aux)):
        if not isinstance(value, torch.Tensor):
            raise SubmissionProblem(f"route returned {type(value).__name__} for {name}, expected a tensor")
    upstream = run.tensor("u_gates")[:, :case.params["top_k"]]
    ((gates * upstream).sum() + aux).backward()  # kept is compared as a value: a wrong mask names itself
    result = run.result(gates, x.grad)
    result["values"] = {"experts chosen": experts.detach().cpu().to(torch.float64),
                        "kept assignments": kept.detach().cpu().to(torch.float64),
                        "aux loss": aux.detach().cpu().to(torch.float64).reshape(-1)}
    return result


# ----- Part 2: split sizes and the all-to-all of rows -----------------------------------------------------

def _a2a_data(generator, size: int, experts: int) -> dict:
    counts = torch.randint(0, 4, (size, experts), generator=generator)
    counts[size - 1] = 0  # the last rank of each group sends no row at all
    most = int(counts.sum(dim=1).max())
    return {"counts": counts, "rows": torch.randn(size, most, HIDDEN, generator=generator),
            "u": torch.randn(size, int(counts.sum()), HIDDEN, generator=generator)}


def _a2a_cases(generator):
    return [Case(f"split_sizes and all_to_all_rows, E={experts} experts ({experts // size} per rank), "
                 f"uneven counts, one rank sending nothing, {_layout(size)}", size, {"experts": experts},
                 [_a2a_data(generator, size, experts) for _ in range(WORLD_SIZE // size)])
            for size, experts in ((4, 8), (4, 4), (2, 8))]


def _a2a_expected(case, data):
    size, local = case.group_size, case.params["experts"] // case.group_size
    counts = data["counts"]
    rows = [data["rows"][r, :int(counts[r].sum())].to(torch.float64) for r in range(size)]
    per_rank = counts.view(size, size, local).sum(dim=2)          # [source, destination] rows
    grads = [torch.zeros_like(r) for r in rows]
    expected = []
    for dest in range(size):
        pieces, start_of = [], []
        for source in range(size):
            start = int(per_rank[source, :dest].sum())
            pieces.append(rows[source][start:start + int(per_rank[source, dest])])
            start_of.append(start)
        received = torch.cat(pieces)
        upstream = data["u"][dest, :received.shape[0]].to(torch.float64)
        offset = 0
        for source, piece in enumerate(pieces):
            grads[source][start_of[source]:start_of[source] + len(piece)] = upstream[offset:offset + len(piece)]
            offset += len(piece)
        expected.append({"out": received, "grads": {}, "values": {
            "send_splits": _float(per_rank[dest].tolist()), "recv_splits": _float(per_rank[:, dest].tolist()),
            "counts_from": counts[:, dest * local:(dest + 1) * local].to(torch.float64),
            FORWARD_BYTES: _float([4.0 * HIDDEN * int(per_rank[dest].sum())]),
            BACKWARD_BYTES: _float([4.0 * HIDDEN * received.shape[0]])}})
    for dest, item in enumerate(expected):
        item["dx"] = grads[dest]
    return expected


def _a2a_run(objects, case, run):
    counts = run.tensor("counts")
    rows = run.as_leaf(run.tensor("rows")[:int(counts.sum())])
    with run.phase("counts"):
        send, recv, counts_from = objects["split_sizes"](counts, run.group)
    with run.phase("forward"):
        out = objects["all_to_all_rows"](rows, send, recv, run.group)
    if not isinstance(out, torch.Tensor):
        raise SubmissionProblem(f"all_to_all_rows returned {type(out).__name__}, expected a tensor")
    upstream = run.tensor("u")
    if out.shape[0] > upstream.shape[0] or not out.requires_grad:
        return dict(run.result(out, None), values={})
    with run.phase("backward"):
        (out * upstream[:out.shape[0]]).sum().backward()
    result = run.result(out, rows.grad)
    result["values"] = {"send_splits": _float(list(send)), "recv_splits": _float(list(recv)),
                        "counts_from": torch.as_tensor(counts_from).detach().cpu().to(torch.float64),
                        FORWARD_BYTES: _bytes(run.messages["forward"]),
                        BACKWARD_BYTES: _bytes(run.messages["backward"])}
    return result


# ----- Part 3: the expert-parallel MoE layer ------------------------------------------------------------

def _moe_cases(generator):
    return [Case(f"ExpertParallelMoE, B={TOKENS} tokens per rank, h={HIDDEN}, top-{k} of E={experts}, "
                 f"capacity factor {factor}, {_layout(size)}", size, {"experts": experts, "top_k": k, "factor": factor},
                 [_moe_data(generator, size, experts) for _ in range(WORLD_SIZE // size)])
            for size, experts, k, factor in LAYOUTS]


def _dense_moe_rank(data, case, rank: int) -> tuple:
    """One rank's y, aux and the gradients of its loss (y * u).sum() + aux, every expert at hand."""
    leaves = {name: data[name].to(torch.float64).requires_grad_(True) for name in ("router", "w1", "b1", "w2", "b2")}
    x = data["x"][rank].to(torch.float64).requires_grad_(True)
    gates, experts, kept, aux = _dense_route(x, leaves["router"], case.params["top_k"], case.params["factor"])
    y = torch.zeros_like(x)
    for e in range(case.params["experts"]):
        weight = (gates * kept * (experts == e)).sum(dim=1, keepdim=True)  # g of token t for expert e, or 0
        hidden = torch.tanh(x @ leaves["w1"][e].T + leaves["b1"][e])
        y = y + weight * (hidden @ leaves["w2"][e].T + leaves["b2"][e])
    ((y * data["u"][rank].to(torch.float64)).sum() + aux).backward()
    received = [int(((experts == e).to(torch.float64) * kept).sum()) for e in range(case.params["experts"])]
    return y.detach(), aux.detach(), x.grad, {name: leaf.grad for name, leaf in leaves.items()}, received, int(kept.sum())


def _moe_expected(case, data):
    size, experts = case.group_size, case.params["experts"]
    local = experts // size
    ranks = [_dense_moe_rank(data, case, rank) for rank in range(size)]
    total = {name: sum(r[3][name] for r in ranks) for name in ("w1", "b1", "w2", "b2")}
    expected = []
    for rank, (y, aux, dx, grads, _, sent) in enumerate(ranks):
        received = sum(sum(r[4][rank * local:(rank + 1) * local]) for r in ranks)
        expert_grads = {}
        for j in range(local):
            e = rank * local + j
            expert_grads.update({f"experts.{j}.0.weight": total["w1"][e], f"experts.{j}.0.bias": total["b1"][e],
                                 f"experts.{j}.2.weight": total["w2"][e], f"experts.{j}.2.bias": total["b2"][e]})
        rows_bytes = 4.0 * HIDDEN
        expected.append({"out": y, "dx": dx, "grads": {"router.weight": grads["router"], **expert_grads},
                         "values": {"aux loss": aux.reshape(1),
                                    FORWARD_BYTES: _float([8.0 * experts, rows_bytes * sent, rows_bytes * received]),
                                    BACKWARD_BYTES: _float([rows_bytes * sent, rows_bytes * received])}})
    return expected


def _moe_run(objects, case, run):
    experts, k, factor = case.params["experts"], case.params["top_k"], case.params["factor"]
    local = experts // run.group_size
    model = objects["ExpertParallelMoE"](HIDDEN, FFN_HIDDEN, experts, k, factor, AUX_COEFFICIENT, run.group)
    model = model.to(run.device)
    shards = {"router.weight": run.tensor("router")}
    for j in range(local):  # this rank's experts only: rank_data sent no other
        shards.update({f"experts.{j}.0.weight": run.tensor("w1")[j], f"experts.{j}.0.bias": run.tensor("b1")[j],
                       f"experts.{j}.2.weight": run.tensor("w2")[j], f"experts.{j}.2.bias": run.tensor("b2")[j]})
    run.load(model, shards)
    x = run.leaf("x")
    with run.phase("forward"):
        output = model(x)
    if not (isinstance(output, tuple) and len(output) == 2 and all(isinstance(t, torch.Tensor) for t in output)):
        raise SubmissionProblem("ExpertParallelMoE.forward must return (y, aux_loss), two tensors")
    y, aux = output
    with run.phase("backward"):
        ((y * run.tensor("u")).sum() + aux).backward()
    result = run.result(y, x.grad)
    result["values"] = {"aux loss": aux.detach().cpu().to(torch.float64).reshape(-1),
                        FORWARD_BYTES: _bytes(run.messages["forward"]),
                        BACKWARD_BYTES: _bytes(run.messages["backward"])}
    return result


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_route": TestSpec("Part 1: route", ("route",), (), _route_cases, _route_expected, _route_run, WORLD_SIZE,
                           rank_data=_own_rows("x", "u_gates")),
    "test_all_to_all": TestSpec("Part 2: split_sizes and all_to_all_rows", ("split_sizes", "all_to_all_rows"), (),
                                _a2a_cases, _a2a_expected, _a2a_run, WORLD_SIZE,
                                rank_data=_own_rows("counts", "rows", "u")),
    "test_moe": TestSpec("Part 3: ExpertParallelMoE", ("ExpertParallelMoE",),
                         ("route", "split_sizes", "all_to_all_rows"),
                         _moe_cases, _moe_expected, _moe_run, WORLD_SIZE,
                         rank_data=_own_rows("x", "u", experts=True)),
}
