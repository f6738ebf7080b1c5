"""Record every torch.distributed call a rank makes: op, bytes, dtype, group size, time.

    from labutils.measure import commtrace

    with commtrace.record() as trace:
        y = model(x)                       # code that calls dist.all_reduce, dist.isend, ...
    trace.count("all_reduce")              # -> 2
    trace.total_bytes("all_reduce")        # bytes, nccl-tests' size convention (below)
    print(trace)                           # one line per op: calls, bytes, seconds
    commtrace.expect_calls(trace, {"all_reduce": 1}, what="your forward")
    # AssertionError: your forward did 2 all_reduce calls, expected 1

While a ``record()`` block is open, the functions in ``TRACED_OPS`` are replaced on the
``torch.distributed`` module by wrappers that time the call and note it, and put back
when the last open block closes (also when it raises). Blocks nest: each open trace sees
every call. Code that calls through the module (``dist.all_reduce(...)``, and
``torch.distributed.nn.functional``'s autograd collectives, forward and backward) is
seen; a function imported by name before the block (``from torch.distributed import
all_reduce``), DDP's C++ reducer and functional collectives (DTensor) are not.

``bytes`` follows nccl-tests' size column: the buffer for all_reduce, broadcast, reduce
and point-to-point ops; the total output (n x per-rank input) for all_gather and gather;
the total input (n x per-rank output) for reduce_scatter and scatter; the per-rank send
buffer for all_to_all; the sum of the messages for batch_isend_irecv; 0 for barriers;
None for object collectives (their pickled size is not known to the caller).
``duration_s`` is host time of the call: for async calls, and on a GPU where NCCL calls
return once queued, it is the launch time, not the transfer time.
"""
from __future__ import annotations

import functools
import inspect
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

_TENSOR_OPS = ("all_reduce", "broadcast", "reduce", "send", "recv", "isend", "irecv")
_GATHER_LIST_OPS = {"all_gather": "tensor_list", "reduce_scatter": "input_list", "all_to_all": "input_tensor_list"}
# all_gather_single / reduce_scatter_single are what FSDP2 calls (torch >= 2.13).
_FIRST_ARG_OPS = {"all_gather_into_tensor": "output_tensor", "_all_gather_base": "output_tensor",
                  "all_gather_single": "output_tensor", "reduce_scatter_tensor": "input",
                  "_reduce_scatter_base": "input", "reduce_scatter_single": "input", "all_to_all_single": "input"}
_TIMES_GROUP_OPS = ("gather", "scatter")
_BARRIERS = ("barrier", "monitored_barrier")
_OBJECT_OPS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
               "send_object_list", "recv_object_list")
_ALWAYS_ASYNC = ("isend", "irecv", "batch_isend_irecv")

#: The torch.distributed functions a trace records.
TRACED_OPS = (_TENSOR_OPS + tuple(_GATHER_LIST_OPS) + tuple(_FIRST_ARG_OPS) + _TIMES_GROUP_OPS
              + ("batch_isend_irecv",) + _BARRIERS + _OBJECT_OPS)


@dataclass(frozen=True)
class CommRecord:
    """One call: ``op`` (the torch.distributed function's name), made by global rank ``rank``.

    ``bytes``: nccl-tests' size convention (module docstring), None for object
    collectives. ``peer``: the other rank of a point-to-point call, or the root
    (src/dst) of a rooted collective; None otherwise. ``duration_s``: host seconds.
    """

    op: str
    bytes: int | None
    dtype: str | None
    group_size: int
    duration_s: float
    async_op: bool
    peer: int | None
    rank: int


@dataclass(eq=False)  # traces compare by identity: two empty traces are not the same trace
class CommTrace:
    """The calls recorded while a ``record()`` block was open, in call order."""

    records: list[CommRecord] = field(default_factory=list)

    def count(self, op: str | None = None) -> int:
        """Number of calls of ``op`` (all calls when None)."""
        _check_op_name(op)
        return sum(1 for r in self.records if op is None or r.op == op)

    def total_bytes(self, op: str | None = None) -> int:
        """Bytes of every call of ``op`` (all ops when None); object collectives count 0."""
        _check_op_name(op)
        return sum(r.bytes or 0 for r in self.records if op is None or r.op == op)

    def summary(self) -> dict[str, dict]:
        """{op: {"calls": n, "bytes": total bytes, "duration_s": total seconds}}, ops in order of first call."""
        result: dict[str, dict] = {}
        for r in self.records:
            entry = result.setdefault(r.op, {"calls": 0, "bytes": 0, "duration_s": 0.0})
            entry["calls"] += 1
            entry["bytes"] += r.bytes or 0
            entry["duration_s"] += r.duration_s
        return result

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __str__(self) -> str:
        if not self.records:
            return "no torch.distributed calls recorded"
        lines = [f"{'op':<24} {'calls':>6} {'bytes':>14} {'seconds':>10}"]
        for op, entry in self.summary().items():
            lines.append(f"{op:<24} {entry['calls']:>6} {entry['bytes']:>14,} {entry['duration_s']:>10.6f}")
        return "\n".join(lines)


def _check_op_name(op: str | None) -> None:
    if op is not None and op not in TRACED_OPS:
        raise ValueError(f"{op!r} is not a traced torch.distributed function: use one of {', '.join(TRACED_OPS)}")


# ---------------------------------------------------------------------------------------
# Measuring one call from its bound arguments
# ---------------------------------------------------------------------------------------

def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _group_size(group) -> int:
    import torch.distributed as dist

    return dist.get_world_size(group) if dist.is_initialized() else 1


def _describe(op: str, arguments: dict) -> tuple[int | None, str | None, int]:
    """(bytes, dtype name, group size) of a call of ``op`` with these bound arguments."""
    if op == "batch_isend_irecv":
        p2p_ops = arguments["p2p_op_list"]
        size = _group_size(p2p_ops[0].group) if p2p_ops else _group_size(None)
        dtype = str(p2p_ops[0].tensor.dtype).removeprefix("torch.") if p2p_ops else None
        return sum(_nbytes(p.tensor) for p in p2p_ops), dtype, size
    size = _group_size(arguments.get("group"))
    if op in _BARRIERS:
        return 0, None, size
    if op in _OBJECT_OPS:
        return None, None, size
    if op in _GATHER_LIST_OPS:
        tensors = arguments[_GATHER_LIST_OPS[op]]
        return sum(_nbytes(t) for t in tensors), str(tensors[0].dtype).removeprefix("torch."), size
    tensor = arguments[_FIRST_ARG_OPS.get(op, "tensor")]
    nbytes = _nbytes(tensor) * (size if op in _TIMES_GROUP_OPS else 1)
    return nbytes, str(tensor.dtype).removeprefix("torch."), size


def _peer(arguments: dict) -> int | None:
    """The global rank named by dst/src (or group_dst/group_src) in a call, if any."""
    for key in ("dst", "src"):
        if arguments.get(key) is not None:
            return int(arguments[key])
    for key in ("group_dst", "group_src"):
        if arguments.get(key) is not None:
            import torch.distributed as dist

            group = arguments.get("group") or dist.group.WORLD
            return dist.get_global_rank(group, int(arguments[key]))
    return None


# ---------------------------------------------------------------------------------------
# Patching torch.distributed while at least one trace is open
# ---------------------------------------------------------------------------------------

_lock = threading.Lock()
_open_traces: list[CommTrace] = []
_installed: dict[str, "_TracedFunction"] = {}
_inside = threading.local()  # .depth > 0 while a traced call runs on this thread


class _TracedFunction:
    """Stands in for a torch.distributed function; notes each outermost call in every open trace.

    It compares equal to the function it wraps, so torch's own checks
    (``P2POp(dist.isend, ...)`` tests ``op in [isend, irecv]``) accept it.
    """

    def __init__(self, name: str, original):
        functools.update_wrapper(self, original)
        self.op = name
        self.original = original
        self.signature = inspect.signature(original)

    def __eq__(self, other):
        return other is self.original or (isinstance(other, _TracedFunction) and other.original is self.original)

    def __hash__(self):
        return hash(self.original)

    def __call__(self, *args, **kwargs):
        if self.op == "batch_isend_irecv":
            _unwrap_p2p_ops(*args, **kwargs)
        depth = getattr(_inside, "depth", 0)
        if depth or not _open_traces:
            return self.original(*args, **kwargs)
        arguments = self.signature.bind(*args, **kwargs).arguments
        _inside.depth = depth + 1
        try:
            start = time.perf_counter()
            result = self.original(*args, **kwargs)
            duration = time.perf_counter() - start
        finally:
            _inside.depth = depth
        self._note(arguments, duration)
        return result

    def _note(self, arguments: dict, duration: float) -> None:
        import torch.distributed as dist

        nbytes, dtype, group_size = _describe(self.op, arguments)
        record = CommRecord(
            op=self.op, bytes=nbytes, dtype=dtype, group_size=group_size, duration_s=duration,
            async_op=self.op in _ALWAYS_ASYNC or bool(arguments.get("async_op", False)),
            peer=_peer(arguments), rank=dist.get_rank() if dist.is_initialized() else 0,
        )
        for trace in list(_open_traces):
            trace.records.append(record)


def _unwrap_p2p_ops(p2p_op_list) -> None:
    """Give each P2POp the real isend/irecv: batch_isend_irecv tests ``op.op is isend``."""
    for p2p_op in p2p_op_list:
        if isinstance(p2p_op.op, _TracedFunction):
            p2p_op.op = p2p_op.op.original


def _install() -> None:
    import torch.distributed as dist

    for name in TRACED_OPS:
        original = getattr(dist, name, None)
        if original is None:
            continue
        wrapper = _TracedFunction(name, original)
        _installed[name] = wrapper
        setattr(dist, name, wrapper)


def _uninstall() -> None:
    import torch.distributed as dist

    for name, wrapper in _installed.items():
        if getattr(dist, name) is wrapper:  # leave alone what someone patched over us
            setattr(dist, name, wrapper.original)
    _installed.clear()


@contextmanager
def record():
    """Open a trace: yields a ``CommTrace`` that fills with this process's torch.distributed calls."""
    trace = CommTrace()
    with _lock:
        if not _open_traces:
            _install()
        _open_traces.append(trace)
    try:
        yield trace
    finally:
        with _lock:
            _open_traces.remove(trace)
            if not _open_traces:
                _uninstall()


def expect_calls(trace: CommTrace, expected: dict[str, int], what: str = "your code", exact: bool = False) -> None:
    """Assert that ``trace`` made exactly ``expected[op]`` calls of each op listed.

    With ``exact=True``, any other op that was called is an error too. Raises
    ``AssertionError`` with one line per mismatch, e.g. "your forward did 2 all_reduce
    calls, expected 1".
    """
    for op in expected:
        _check_op_name(op)
    wanted = dict(expected)
    if exact:
        for op in trace.summary():
            wanted.setdefault(op, 0)
    problems = []
    for op, count in wanted.items():
        done = trace.count(op)
        if done != count:
            problems.append(f"{what} did {done} {op} call{'' if done == 1 else 's'}, expected {count}")
    if problems:
        raise AssertionError("; ".join(problems))
