"""Self-checks of chapter 10 (expert parallelism, 3D parallelism): one call per exercise.

    from labutils.checks import strategy as check
    check.expert_capacity(answer)
"""
from __future__ import annotations

from labutils.checks.answers import (
    NOT_ANSWERED, bytes_problem, close, first_match, number_problem, whole_number_problem,
)

#: exercise 1: B tokens routed top-k over E experts
CAPACITY_CASE = dict(tokens=4096, top_k=2, num_experts=64, capacity_factor=1.25)
#: exercise 2: a global rank in a TP x DP x PP job, Megatron-LM's order (TP fastest, then DP, then PP)
COORDINATE_CASE = dict(rank=70, tp=8, dp=4, pp=4)
#: exercise 3: GPT-3 175B (arXiv:2005.14165) as TP 8 x PP 16 x DP 8, fp16 gradients
DP_TRAFFIC_CASE = dict(params=175e9, tp=8, pp=16, dp=8)
#: exercise 4: assignments a top-2 router sent to each of 4 experts, B = 512 tokens
DROP_CASE = dict(tokens=512, top_k=2, assignments=(400, 300, 200, 124), capacity_factor=1.25)


def expert_capacity(answer) -> None:
    """Exercise 1: the capacity C of each expert (token assignments)."""
    print(_expert_capacity_verdict(answer))


def _expert_capacity_verdict(answer) -> str:
    from labutils import costmodel

    case = CAPACITY_CASE
    tokens, experts, top_k, factor = case["tokens"], case["num_experts"], case["top_k"], case["capacity_factor"]
    expected = costmodel.expert_capacity(tokens, experts, top_k, factor)
    return whole_number_problem(answer, "a whole number of token assignments (C is rounded up: ceil)") or first_match(
        answer,
        [(expected, f"correct: ceil(B k / E x c) = ceil({tokens} x {top_k} / {experts} x {factor}) = {expected}"),
         (costmodel.expert_capacity(tokens, experts, 1, factor),
          "you used B instead of B k: with top-2 routing the B tokens make 2B assignments to share"),
         (costmodel.expert_capacity(tokens, experts, top_k, 1.0), f"you left out the capacity factor ({factor})")],
        "not quite: C = ceil(B k / E x c), c the capacity factor", rel_tol=0)


def _coordinates(rank: int, tp: int, dp: int, pp: int) -> tuple[int, int, int]:
    """(tp_rank, dp_rank, pp_rank) of a global rank, TP fastest, then DP, then PP."""
    return rank % tp, (rank // tp) % dp, rank // (tp * dp)


def rank_coordinates(answer) -> None:
    """Exercise 2: global rank 70's (tp_rank, dp_rank, pp_rank) in Megatron-LM's order."""
    print(_rank_coordinates_verdict(answer))


def _rank_coordinates_verdict(answer) -> str:
    case = COORDINATE_CASE
    expected = _coordinates(**case)
    if answer is None:
        return NOT_ANSWERED
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 \
            or any(whole_number_problem(value) for value in answer):
        return "give a tuple of three whole numbers: (tp_rank, dp_rank, pp_rank)"
    answer = tuple(int(value) for value in answer)
    if answer == expected:
        return f"correct: tp = rank mod t, dp = (rank // t) mod d, pp = rank // (t d): {expected}"
    if answer == tuple(reversed(expected)):
        return "right numbers, reversed order: give (tp_rank, dp_rank, pp_rank)"
    if answer[0] != expected[0]:
        return "the tensor-parallel rank is the fastest index: rank mod t"
    if answer[2] == (case["rank"] // case["tp"]) % case["pp"]:
        return "the pipeline rank is the slowest index: rank // (t x d), not (rank // t) mod p"
    return "not quite: tp_rank = rank mod t, dp_rank = (rank // t) mod d, pp_rank = rank // (t x d)"


def dp_traffic(answer) -> None:
    """Exercise 3: bytes one GPU sends per step in the data-parallel gradient all-reduce."""
    print(_dp_traffic_verdict(answer))


def _dp_traffic_verdict(answer) -> str:
    from labutils import costmodel

    case = DP_TRAFFIC_CASE
    d = case["dp"]
    expected = costmodel.comm_volume("dp", params=case["params"], tp_size=case["tp"], pp_size=case["pp"],
                                     dp_size=d).bytes_per_step
    whole_model = costmodel.comm_volume("dp", params=case["params"], dp_size=d).bytes_per_step
    return bytes_problem(answer, expected) or first_match(
        answer,
        [(expected, f"correct: 2(d-1)/d x N/(t p) x 2 bytes = {expected / 1e9:.2f} GB"),
         (whole_model, "each GPU holds only 1/(t p) of the parameters: it all-reduces only those gradients"),
         (expected / 2, "an all-reduce sends 2(d-1)/d of the buffer, not (d-1)/d"),
         (expected * d / (d - 1), f"close: that is the large-d limit 2 x buffer; at d = {d} the ring sends "
                                  f"2 x {d - 1}/{d} of it")],
        "not quite: the buffer is N / (t p) values of 2 bytes; a ring all-reduce sends 2(d-1)/d of it")


def dropped_assignments(answer) -> None:
    """Exercise 4: how many token assignments the experts drop at the capacity factor given."""
    print(_dropped_assignments_verdict(answer))


def _dropped_assignments_verdict(answer) -> str:
    from labutils import costmodel

    case = DROP_CASE
    loads, experts, factor = case["assignments"], len(case["assignments"]), case["capacity_factor"]

    def capacity(top_k: int, capacity_factor: float) -> int:
        return costmodel.expert_capacity(case["tokens"], experts, top_k, capacity_factor)

    def dropped(top_k: int, capacity_factor: float) -> int:
        return sum(max(load - capacity(top_k, capacity_factor), 0) for load in loads)

    expected, right_capacity = dropped(case["top_k"], factor), capacity(case["top_k"], factor)
    problem = whole_number_problem(answer, "a whole number of token assignments")
    if problem:
        is_share = number_problem(answer) is None and close(answer, expected / sum(loads))
        return "that is the share of the assignments dropped: give their number" if is_share else problem
    return first_match(
        answer,
        [(expected, f"correct: C = ceil(B k / E x c) = {right_capacity}; only the experts above C drop, "
                    f"and only their overflow: {expected}"),
         (dropped(1, factor), "you computed C from B instead of B k: with top-2 routing the B tokens make 2B assignments"),
         (dropped(case["top_k"], 1.0), f"you left out the capacity factor ({factor}) when computing C"),
         (sum(load for load in loads if load > right_capacity),
          "an expert over capacity still takes its first C assignments: only the overflow beyond C is dropped")],
        "not quite: compute C = ceil(B k / E x c), then add up max(load - C, 0) over the experts", rel_tol=0)
