"""What a rank communicated, recorded at the ProcessGroup, below ``torch.distributed``'s functions.

The judge's ranks (the reference's and the submission's) run their process groups on the
backend ``judged``: a Python ``dist.ProcessGroup`` that wraps the rank's real backend (gloo, or
NCCL on GPUs) and notes every operation it is asked for, with the bytes this rank hands it,
before passing it on. ``dist.all_reduce``, ``distributed_c10d.all_reduce``, ``group.allreduce``
on the group object, the autograd collectives of ``torch.distributed.nn``, object collectives,
every group created with ``dist.new_group`` (a ``DeviceMesh``'s too) and the functional
collectives of DTensor and FSDP2 (``torch.ops._c10d_functional``) all end here; an operation the wrapper does not
know fails (no backend is registered behind it), it is never passed on unrecorded.

Names are canonical, so equivalent calls count alike: ``all_gather`` (``all_gather``,
``all_gather_into_tensor``), ``reduce_scatter`` (``reduce_scatter``, ``reduce_scatter_tensor``),
``all_to_all`` (``all_to_all``, ``all_to_all_single``), ``send`` (``send``, ``isend``),
``recv`` (``recv``, ``irecv``), ``all_reduce``, ``broadcast``, ``reduce``, ``gather``, ``scatter``,
``barrier``. ``bytes``: what this rank puts in, its input buffers (all_reduce, broadcast, reduce,
send: the buffer; all_gather, gather: this rank's input; reduce_scatter, all_to_all, scatter:
the whole input; recv: the buffer it receives into; barrier: 0).

This is recorded inside the rank's process: code running there can still reach the wrapped
backend, or open a channel of its own (see grading/README.md, "What this does not stop").
"""
from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d
from torch.distributed._functional_collectives import REDUCE_OP_TO_STR

BACKEND_NAME = "judged"
#: Every operation of this process, in the order the ranks' code asked for them.
_log: list = []


class Message(NamedTuple):
    """One operation: canonical ``op``, ``bytes`` this rank handed it, ``peer`` (global rank of the
    other side of a send/recv, the root of a rooted collective, else None), ``group_size``."""

    op: str
    bytes: int
    peer: int | None
    group_size: int


def log_position() -> int:
    """How many operations this process has recorded so far (a mark for ``since``)."""
    return len(_log)


def since(position: int) -> list:
    """The operations recorded after ``log_position()`` returned ``position``, in order."""
    return list(_log[position:])


def summary(messages: list) -> tuple[dict, dict]:
    """({op: calls}, {op: bytes}) of ``messages``."""
    calls: dict = {}
    sizes: dict = {}
    for message in messages:
        calls[message.op] = calls.get(message.op, 0) + 1
        sizes[message.op] = sizes.get(message.op, 0) + message.bytes
    return calls, sizes


def _tensors(value) -> list:
    """The tensors in ``value`` (a tensor, or lists of them, nested)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _nbytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value))


class RecordingProcessGroup(dist.ProcessGroup):
    """A process group that records each operation (``Message``) and runs it on ``inner``."""

    def __init__(self, inner, rank: int, size: int, global_ranks: list, device_type: str = "cpu"):
        super().__init__(rank, size)
        # the default group is told no ranks: its group ranks are the global ones
        self._inner, self._global_ranks = inner, list(global_ranks) or list(range(size))
        self._device_type = device_type

    def getBackendName(self) -> str:
        return BACKEND_NAME

    # torch names each group it makes (``_set_group_name``) and finds it by that name again:
    # DeviceMesh, DTensor's collectives and FSDP2 (``torch.distributed._functional_collectives``).
    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupName(self) -> str:
        return self._group_name

    def _note(self, op: str, nbytes: int, peer: int | None = None) -> None:
        peer_global = self._global_ranks[peer] if peer is not None and 0 <= peer < len(self._global_ranks) else None
        _log.append(Message(op, int(nbytes), peer_global, self.size()))  # one append: atomic under the GIL

    def _run(self, method: str, *args, opts=None):
        function = getattr(self._inner, method)
        return function(*args) if opts is None else function(*args, opts)

    def allreduce(self, tensors, opts=None):
        self._note("all_reduce", _nbytes(tensors))
        return self._run("allreduce", _tensors(tensors), opts=opts)

    def allreduce_coalesced(self, tensors, opts=None):
        self._note("all_reduce", _nbytes(tensors))
        return self._run("allreduce_coalesced", tensors, opts=opts)

    def allgather(self, output_lists, inputs, opts=None):
        self._note("all_gather", _nbytes(inputs))
        return self._run("allgather", output_lists, _tensors(inputs), opts=opts)

    def all_gather_single(self, output, input, opts=None):
        self._note("all_gather", _nbytes(input))
        return self._run("_allgather_base", *_flat_pair(output, input), opts=opts)

    _allgather_base = all_gather_single

    def reduce_scatter(self, outputs, input_lists, opts=None):
        self._note("reduce_scatter", _nbytes(input_lists))
        return self._run("reduce_scatter", outputs, input_lists, opts=opts)

    def reduce_scatter_single(self, output, input, opts=None):
        self._note("reduce_scatter", _nbytes(input))
        flat_input, flat_output = _flat_pair(input, output)
        return self._run("_reduce_scatter_base", flat_output, flat_input, opts=opts)

    _reduce_scatter_base = reduce_scatter_single

    def alltoall(self, outputs, inputs, opts=None):
        self._note("all_to_all", _nbytes(inputs))
        return self._run("alltoall", outputs, inputs, opts=opts)

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        self._note("all_to_all", _nbytes(input))
        return self._run("alltoall_base", output, input, output_splits, input_splits, opts=opts)

    alltoall_base = all_to_all_single

    def broadcast(self, tensors, opts=None):
        self._note("broadcast", _nbytes(tensors), getattr(opts, "rootRank", None))
        return self._run("broadcast", _tensors(tensors), opts=opts)

    def reduce(self, tensors, opts=None):
        self._note("reduce", _nbytes(tensors), getattr(opts, "rootRank", None))
        return self._run("reduce", _tensors(tensors), opts=opts)

    def gather(self, outputs, inputs, opts=None):
        self._note("gather", _nbytes(inputs), getattr(opts, "rootRank", None))
        return self._run("gather", outputs, inputs, opts=opts)

    def scatter(self, outputs, inputs, opts=None):
        self._note("scatter", _nbytes(inputs), getattr(opts, "rootRank", None))
        return self._run("scatter", outputs, inputs, opts=opts)

    def send(self, tensors, dst: int, tag: int = 0):
        self._note("send", _nbytes(tensors), dst)
        return self._inner.send(_tensors(tensors), dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        self._note("recv", _nbytes(tensors), src)
        return self._inner.recv(_tensors(tensors), src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        self._note("recv", _nbytes(tensors))
        return self._inner.recv_anysource(_tensors(tensors), tag)

    def barrier(self, opts=None):
        self._note("barrier", 0)
        return self._inner.barrier() if opts is None else self._inner.barrier(opts)

    # ----- what torch asks of a group beside its operations -----
    @property
    def _device_types(self) -> list:
        """The one device type of the wrapped backend (object collectives and barrier pick it)."""
        return [torch.device(self._device_type)]

    def _get_backend(self, device=None):
        """The wrapped backend (torch reads it for splitting, eager connection and coalescing)."""
        return self._inner

    @property
    def supports_coalescing(self) -> bool:
        return bool(getattr(self._inner, "supports_coalescing", False))

    def _start_coalescing(self, device):
        return self._inner._start_coalescing(device)

    def _end_coalescing(self, device):
        return self._inner._end_coalescing(device)


def _flat_pair(whole, part):
    """(``whole``, ``part``) as 1-D views when ``whole`` is contiguous and holds group-size parts.

    ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` concatenate in memory order: NCCL
    accepts a ``whole`` of any shape with the right number of elements (``(world, *part.shape)``
    as well as ``(world * part.shape[0], ...)``), gloo only the second ("invalid tensor size at
    index 0"). Flat views make every shape NCCL runs also run on gloo, with the same bytes."""
    if whole.is_contiguous() and part.is_contiguous() and part.numel() and whole.numel() % part.numel() == 0:
        return whole.view(-1), part.view(-1)
    return whole, part


def _make_inner(kind: str, options):
    """The real backend of one group, built as ``distributed_c10d`` builds gloo's and NCCL's
    (``options``: its ``_DistributedBackendOptions``)."""
    if kind == "nccl":  # not exercised on CPU-only machines
        nccl_options = dist.ProcessGroupNCCL.Options()
        nccl_options.is_high_priority_stream = False
        nccl_options._timeout = options.timeout
        nccl_options.global_ranks_in_group = options.global_ranks_in_group
        nccl_options.group_name = options.group_id
        inner = dist.ProcessGroupNCCL(options.store, options.group_rank, options.group_size, nccl_options)
        # the group's communicator now, on the rank's device, while every member is creating the group
        inner.eager_connect_single_device(torch.device("cuda", torch.cuda.current_device()))
        return inner
    return dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)


def _creator(kind: str):
    def create(options, _backend_options):
        inner = _make_inner(kind, options)
        return RecordingProcessGroup(inner, options.group_rank, options.group_size, options.global_ranks_in_group,
                                     "cuda" if kind == "nccl" else "cpu")
    return create


def batch_isend_irecv(p2p_op_list):
    """``dist.batch_isend_irecv`` that also coalesces on a recording group. torch coalesces only when
    ``type(group) is ProcessGroup``; a ring's isend right and irecv left on NCCL must run as one
    group of operations (on the group's own communicator), or each rank waits for its right-hand
    neighbour, which waits for its own. Each operation is still recorded, one by one."""
    group = p2p_op_list[0].group if p2p_op_list else None
    group = group if group is not None else (distributed_c10d._get_default_group() if p2p_op_list else None)
    if not isinstance(group, RecordingProcessGroup) or not group.supports_coalescing:
        return _torch_batch_isend_irecv(p2p_op_list)
    distributed_c10d._check_p2p_op_list(p2p_op_list)
    with distributed_c10d._coalescing_manager(group, p2p_op_list[0].tensor.device, async_ops=True) as manager:
        for op in p2p_op_list:
            peer = {"group_dst" if op.op is distributed_c10d.isend else "group_src": op.group_peer}
            op.op(op.tensor, group=op.group, tag=op.tag, **peer)
    return manager.works


_torch_batch_isend_irecv = distributed_c10d.batch_isend_irecv


# ----- torch's functional collectives ---------------------------------------------------------
# DTensor's redistributions and DeviceMesh collectives call ``torch.ops._c10d_functional``, whose C++
# kernels reach a group's all-gather and reduce-scatter below the methods a Python process group can
# override (they ask the group for a backend: a recording group has none, and the call would fail).
# On the judge's ranks these ops run through the recording group's own methods instead, so they are
# recorded like any other call (all-reduce, all-to-all and broadcast already arrive there).

_REDUCE_OPS = {name: op for op, name in REDUCE_OP_TO_STR.items()}  # the functional ops name them as strings
_functional_library = None


def _group_named(name) -> dist.ProcessGroup:
    return distributed_c10d._resolve_process_group(name)


def _gathered(tensor: torch.Tensor, group_size: int, group_name, out: torch.Tensor | None = None) -> torch.Tensor:
    tensor = tensor.contiguous()
    if out is None:
        out = tensor.new_empty((tensor.shape[0] * group_size, *tensor.shape[1:]))
    _group_named(group_name).all_gather_single(out, tensor).wait()
    return out


def _scattered(tensor: torch.Tensor, reduce_op: str, group_size: int, group_name) -> torch.Tensor:
    tensor = tensor.contiguous()
    out = tensor.new_empty((tensor.shape[0] // group_size, *tensor.shape[1:]))
    options = dist.ReduceScatterOptions()
    options.reduceOp = _REDUCE_OPS[reduce_op.lower()]
    _group_named(group_name).reduce_scatter_single(out, tensor, options).wait()
    return out


def _functional_kernels() -> dict:
    """{op name: kernel} of the functional all-gathers and reduce-scatters, run through the group."""
    return {
        "all_gather_into_tensor": _gathered,
        "all_gather_into_tensor_out": lambda tensor, group_size, group_name, *, out: _gathered(
            tensor, group_size, group_name, out),
        "all_gather_into_tensor_coalesced": lambda tensors, group_size, group_name: [
            _gathered(t, group_size, group_name) for t in tensors],
        "reduce_scatter_tensor": _scattered,
        "reduce_scatter_tensor_coalesced": lambda tensors, reduce_op, group_size, group_name: [
            _scattered(t, reduce_op, group_size, group_name) for t in tensors],
    }


def _route_functional_collectives(kind: str) -> None:
    global _functional_library
    if _functional_library is not None:
        return
    _functional_library = torch.library.Library("_c10d_functional", "IMPL")
    for name, kernel in _functional_kernels().items():
        _functional_library.impl(name, kernel, "CUDA" if kind == "nccl" else "CPU")


def _init_options(kind: str) -> dict:
    """What ``init_process_group`` is told beside the store: on NCCL the rank's device
    (``device_id``), so that the world's communicator is made at once, every group split from it,
    and no communicator is left to be built lazily by the first send/recv between two ranks."""
    if kind != "nccl":
        return {}
    return {"device_id": torch.device("cuda", torch.cuda.current_device())}


def install() -> None:
    """Re-create this rank's default process group on the recording backend (every rank of the
    launch calls it, before any other collective): the same store, rank, world and real backend."""
    if dist.get_backend() == BACKEND_NAME:
        return
    kind = "nccl" if dist.get_backend() == "nccl" else "gloo"
    store = distributed_c10d._get_default_store()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # every rank has read the store before rank 0's group goes
    dist.destroy_process_group()
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _creator(kind), extended_api=True,
                                      devices=["cuda"] if kind == "nccl" else ["cpu"])
    options = _init_options(kind)
    dist.init_process_group(BACKEND_NAME, store=dist.PrefixStore(BACKEND_NAME, store), rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=1800), **options)
    if "device_id" in options:  # torch bound it to a group it then replaced with ours
        distributed_c10d._get_default_group().bound_device_id = options["device_id"]
    dist.batch_isend_irecv = distributed_c10d.batch_isend_irecv = batch_isend_irecv
    _route_functional_collectives(kind)
