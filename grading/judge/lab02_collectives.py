"""Hidden tests of lab 2 (collectives): a ring all-reduce from send/recv, and its bandwidth.

Every test runs on 4 ranks and covers rings of 4 (one group) and of 2 (groups {0, 1} and
{2, 3}, each with its own data: code that names peers by their rank in the group instead
of their global rank, or ignores ``group``, fails there). Buffers cover sizes that the
ring size does not divide, sizes smaller than the ring (empty chunks), and float32,
float64, bfloat16 and float16; their values are small integers, so every summation order
gives the exact sum. Point-to-point calls are counted per rank at its process group
(``send`` and ``isend`` as sends, ``recv`` and ``irecv`` as receives), with their bytes,
against the reference in ``grading/reference/collectives.py``. Each rank receives its own
buffer only, never the other ranks'. Later parts run with the reference for the earlier
ones, so each part is graded on its own.
"""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.rankside import SubmissionProblem, substitute
from grading.reference import collectives

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = False
RING_SIZES = (2, 4)

#: Name in the student's notebook -> the reference object (the lab's API).
REFERENCE = {
    "chunk_bounds": collectives.chunk_bounds,
    "ring_neighbours": collectives.ring_neighbours,
    "send_and_receive": collectives.send_and_receive,
    "ring_reduce_scatter": collectives.ring_reduce_scatter,
    "ring_all_gather": collectives.ring_all_gather,
    "ring_all_reduce": collectives.ring_all_reduce,
    "bus_bandwidth": collectives.bus_bandwidth,
    "measure_ring_all_reduce": collectives.measure_ring_all_reduce,
}
_BASICS = ("chunk_bounds", "ring_neighbours", "send_and_receive")
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: nccl-tests' busbw / algbw (doc/PERFORMANCE.md), written out here, not taken from the reference.
_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n}


def _layout(ring: int) -> str:
    return group_layout(f"ring of {ring}" if ring == WORLD_SIZE else f"rings of {ring}", ring, WORLD_SIZE)


def _integers(generator, ring: int, shape: tuple, dtype: str) -> torch.Tensor:
    """(ring, *shape) small integers in ``dtype``: exact in every dtype, and so is their sum."""
    return torch.randint(-8, 9, (ring, *shape), generator=generator).to(_DTYPES[dtype])


def _dense_bounds(numel: int, ring: int) -> list:
    """torch.tensor_split's chunks of range(numel), as (start, stop)."""
    bounds, start = [], 0
    for part in torch.tensor_split(torch.arange(numel), ring):
        bounds.append((start, start + part.numel()))
        start += part.numel()
    return bounds


def _own_buffer(case, data, group_rank):
    """rank_data: this rank's row of ``x`` (one buffer per group rank), the rest as it is."""
    return {key: value[group_rank] if key == "x" else value for key, value in data.items()}


def _same_dtype(got: torch.Tensor, expected_dtype: torch.dtype, what: str) -> None:
    if not isinstance(got, torch.Tensor):
        raise SubmissionProblem(f"{what} returned a {type(got).__name__}, expected a torch.Tensor")
    if got.dtype != expected_dtype:
        raise SubmissionProblem(f"{what} returned {got.dtype} for a {expected_dtype} buffer: keep the dtype")


# ----- Part 1: chunk bounds, neighbours, one ring step -----------------------------------------

_BOUNDS = ((8, 4), (7, 4), (10, 4), (3, 4), (1, 2), (9, 2), (0, 4))


def _basics_cases(generator):
    cases = [Case(f"chunk_bounds({numel}, {n})", WORLD_SIZE, {"kind": "bounds", "numel": numel, "n": n}, [{}])
             for numel, n in _BOUNDS]
    for ring in RING_SIZES:
        cases.append(Case(f"ring_neighbours, {_layout(ring)}", ring, {"kind": "neighbours"},
                          [{"first": torch.tensor(first)} for first in range(0, WORLD_SIZE, ring)]))
        for numel, dtype in ((5, "float32"), (3, "bfloat16")):
            cases.append(Case(f"send_and_receive of {numel} {dtype} values, {_layout(ring)}", ring,
                              {"kind": "step", "dtype": dtype},
                              [{"x": _integers(generator, ring, (numel,), dtype)} for _ in range(WORLD_SIZE // ring)]))
    return cases


def _basics_expected(case, data):
    kind, ring = case.params["kind"], case.group_size
    if kind == "bounds":
        out = torch.tensor(_dense_bounds(case.params["numel"], case.params["n"]), dtype=torch.float64)
        return [{"out": out, "grads": {}} for _ in range(ring)]
    if kind == "neighbours":
        first = int(data["first"])  # the global rank of the group's rank 0
        return [{"out": torch.tensor([first + (r + 1) % ring, first + (r - 1) % ring], dtype=torch.float64),
                 "grads": {}} for r in range(ring)]
    return [{"out": data["x"][(r - 1) % ring], "grads": {}} for r in range(ring)]


def _basics_run(objects, case, run):
    kind = case.params["kind"]
    if kind == "bounds":
        bounds = objects["chunk_bounds"](case.params["numel"], case.params["n"])
        try:
            out = torch.tensor([[int(start), int(stop)] for start, stop in bounds], dtype=torch.float64).reshape(-1, 2)
        except (TypeError, ValueError):
            raise SubmissionProblem(f"chunk_bounds returned {bounds!r:.100}, "
                                    "expected a list of (start, stop)") from None
        return run.result(out, None)
    if kind == "neighbours":
        right, left = objects["ring_neighbours"](run.group)
        return run.result(torch.tensor([int(right), int(left)], dtype=torch.float64), None)
    right = dist.get_global_rank(run.group, (run.group_rank + 1) % run.group_size)  # the judge's own, not the reference's
    left = dist.get_global_rank(run.group, (run.group_rank - 1) % run.group_size)
    mine = run.tensor("x").contiguous()
    received = torch.full_like(mine, 99)
    with run.phase("forward"):
        objects["send_and_receive"](mine, right, received, left, run.group)
    return run.result(received, None)


# ----- Parts 2 to 4: reduce-scatter, all-gather, all-reduce -------------------------------------

_FLAT = ((8, "float32"), (7, "float64"), (3, "bfloat16"), (13, "float16"))


def _flat_cases(generator, what: str, kind: str, shapes=None):
    cases = []
    for ring in RING_SIZES:
        for shape, dtype in shapes or [((numel,), dtype) for numel, dtype in _FLAT]:
            cases.append(Case(f"{what} of {dtype} values of shape {shape}, {_layout(ring)}", ring,
                              {"kind": kind, "dtype": dtype},
                              [{"x": _integers(generator, ring, shape, dtype)} for _ in range(WORLD_SIZE // ring)]))
    return cases


def _reduce_scatter_cases(generator):
    return _flat_cases(generator, "ring_reduce_scatter", "reduce_scatter")


def _reduce_scatter_expected(case, data):
    total = data["x"].to(torch.float64).sum(0)
    bounds = _dense_bounds(total.numel(), case.group_size)
    return [{"out": total[start:stop], "grads": {}} for start, stop in bounds]


def _reduce_scatter_run(objects, case, run):
    flat = run.tensor("x").contiguous()
    with run.phase("forward"):
        mine = objects["ring_reduce_scatter"](flat, run.group)
    _same_dtype(mine, flat.dtype, "ring_reduce_scatter")
    return run.result(mine, None)


def _all_gather_cases(generator):
    return _flat_cases(generator, "ring_all_gather", "all_gather")


def _all_gather_expected(case, data):
    x = data["x"].to(torch.float64)
    bounds = _dense_bounds(x.shape[1], case.group_size)
    gathered = torch.cat([x[owner, start:stop] for owner, (start, stop) in enumerate(bounds)])
    return [{"out": gathered, "grads": {}} for _ in range(case.group_size)]


def _all_gather_run(objects, case, run):
    flat = run.tensor("x").contiguous()  # only chunk group_rank is this rank's to give
    with run.phase("forward"):
        gathered = objects["ring_all_gather"](flat, run.group)
    _same_dtype(gathered, flat.dtype, "ring_all_gather")
    return run.result(gathered, None)


_ALL_REDUCE_SHAPES = (((8,), "float32"), ((3, 5), "float32"), ((2, 3, 2), "bfloat16"), ((1,), "float16"),
                      ((6,), "float64"))


def _all_reduce_cases(generator):
    return _flat_cases(generator, "ring_all_reduce", "all_reduce", _ALL_REDUCE_SHAPES)


def _all_reduce_expected(case, data):
    total = data["x"].to(torch.float64).sum(0)
    return [{"out": total, "grads": {}} for _ in range(case.group_size)]


def _all_reduce_run(objects, case, run):
    x = run.tensor("x")
    with run.phase("forward"):
        total = objects["ring_all_reduce"](x, run.group)
    _same_dtype(total, x.dtype, "ring_all_reduce")
    return run.result(total, None)


# ----- Parts 5 and 6: bandwidth ----------------------------------------------------------------

_BANDWIDTH = (("all_reduce", 2), ("all_reduce", 8), ("all_gather", 4), ("all_gather", 8),
              ("reduce_scatter", 2), ("reduce_scatter", 4))


def _bandwidth_cases(generator):
    cases = []
    for op, n in _BANDWIDTH:
        size_bytes = int(torch.randint(1, 2**30, (1,), generator=generator))
        time_s = float(torch.empty(1).uniform_(1e-5, 1e-1, generator=generator))
        cases.append(Case(f"bus_bandwidth({op!r}, size_bytes={size_bytes}, time_s={time_s:.3g}, world_size={n})",
                          WORLD_SIZE, {"op": op, "size_bytes": size_bytes, "time_s": time_s, "n": n}, [{}]))
    return cases


def _bandwidth_expected(case, data):
    p = case.params
    algbw = p["size_bytes"] / p["time_s"] / 1e9
    out = torch.tensor([algbw, algbw * _BUS_FACTOR[p["op"]](p["n"])], dtype=torch.float64)
    return [{"out": out, "grads": {}} for _ in range(case.group_size)]


def _bandwidth_run(objects, case, run):
    p = case.params
    algbw, busbw = objects["bus_bandwidth"](p["op"], p["size_bytes"], p["time_s"], p["n"])
    return run.result(torch.tensor([float(algbw), float(busbw)], dtype=torch.float64), None)


_MEASURE = ((1000, "float32"), (999, "bfloat16"))
_ITERS, _WARMUP = 3, 1
#: iters x time_s must cover at least this share of the timed calls' own durations (1 for a timer around
#: the loop or around each call; below 1 for rounding only): a made-up time fails.
_MIN_COVERED = 0.9


def _measure_cases(generator):
    return [Case(f"measure_ring_all_reduce({numel}, torch.{dtype}, iters={_ITERS}, warmup={_WARMUP}), {_layout(ring)}",
                 ring, {"numel": numel, "dtype": dtype}, [{} for _ in range(WORLD_SIZE // ring)])
            for ring in RING_SIZES for numel, dtype in _MEASURE]


def _measure_expected(case, data):
    # algbw x time / size must be 1 (size in bytes of the dtype), busbw / algbw the all-reduce factor
    return [{"out": torch.tensor([1.0, _BUS_FACTOR["all_reduce"](case.group_size)], dtype=torch.float64), "grads": {}}
            for _ in range(case.group_size)]


def _timed(ring_all_reduce, spans: list):
    """``ring_all_reduce`` that notes the (start, end) host time of every call in ``spans``."""
    def timed_ring_all_reduce(tensor, group):
        start = time.perf_counter()
        try:
            return ring_all_reduce(tensor, group)
        finally:
            spans.append((start, time.perf_counter()))
    return timed_ring_all_reduce


def _check_own_timing(time_s: float, spans: list, returned_at: float) -> None:
    """The submission's time_s must come from timing its own ``iters`` calls: iters x time_s covers at
    least the timed calls as the judge saw them, and at most from the end of the warm-up to the return."""
    if len(spans) != _WARMUP + _ITERS:
        raise SubmissionProblem(f"measure_ring_all_reduce called ring_all_reduce {len(spans)} times, expected "
                                f"warmup + iters = {_WARMUP + _ITERS} (call it by that name)")
    least = _MIN_COVERED * sum(end - start for start, end in spans[_WARMUP:])
    most = returned_at - (spans[_WARMUP - 1][1] if _WARMUP else spans[0][0])
    if not least <= time_s * _ITERS <= most:
        raise SubmissionProblem(f"measure_ring_all_reduce returned time_s={time_s:.3g} s, but its {_ITERS} timed calls "
                                f"took {least / _MIN_COVERED / _ITERS:.3g} s each: time the calls after the warm-up")


def _measure_run(objects, case, run):
    p = case.params
    dtype = _DTYPES[p["dtype"]]
    spans: list = []
    # the reference's ring_all_reduce (lent to a submission), timed: the reference is held to the same check
    substitute(objects, {"ring_all_reduce": _timed(objects["ring_all_reduce"], spans)})
    with run.phase("forward"):
        time_s, algbw, busbw = objects["measure_ring_all_reduce"](p["numel"], dtype, _ITERS, _WARMUP, run.group)
        returned_at = time.perf_counter()
    time_s, algbw, busbw = float(time_s), float(algbw), float(busbw)
    if not (math.isfinite(time_s) and time_s > 0 and algbw > 0):
        raise SubmissionProblem(f"measure_ring_all_reduce returned time_s={time_s:.3g}, algbw={algbw:.3g}: "
                                "both must be positive")
    _check_own_timing(time_s, spans, returned_at)
    size_bytes = p["numel"] * torch.empty(0, dtype=dtype).element_size()
    return run.result(torch.tensor([algbw * time_s * 1e9 / size_bytes, busbw / algbw], dtype=torch.float64), None)


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_ring_basics": TestSpec("Part 1: chunk bounds, neighbours and one ring step", _BASICS, (),
                                 _basics_cases, _basics_expected, _basics_run, WORLD_SIZE, rank_data=_own_buffer),
    "test_ring_reduce_scatter": TestSpec("Part 2: ring reduce-scatter", ("ring_reduce_scatter",), _BASICS,
                                         _reduce_scatter_cases, _reduce_scatter_expected, _reduce_scatter_run,
                                         WORLD_SIZE, rank_data=_own_buffer),
    "test_ring_all_gather": TestSpec("Part 3: ring all-gather", ("ring_all_gather",), _BASICS,
                                     _all_gather_cases, _all_gather_expected, _all_gather_run, WORLD_SIZE, rank_data=_own_buffer),
    "test_ring_all_reduce": TestSpec("Part 4: ring all-reduce", ("ring_all_reduce",),
                                     _BASICS + ("ring_reduce_scatter", "ring_all_gather"),
                                     _all_reduce_cases, _all_reduce_expected, _all_reduce_run, WORLD_SIZE, rank_data=_own_buffer),
    "test_bus_bandwidth": TestSpec("Part 5: algbw and busbw", ("bus_bandwidth",), (),
                                   _bandwidth_cases, _bandwidth_expected, _bandwidth_run, WORLD_SIZE),
    "test_measure_busbw": TestSpec("Part 6: busbw from your own timings", ("measure_ring_all_reduce",),
                                   _BASICS + ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce",
                                              "bus_bandwidth"),
                                   _measure_cases, _measure_expected, _measure_run, WORLD_SIZE),
}
