"""The messages of the launcher's wire, one named type each (see ``labutils.ranks._wire``).

Between the caller and each rank (its control channel)::

    rank -> caller   RankHello(token, rank, channel)      first frame on each of its 3 channels
    rank -> caller   Started(pid, main_thread)            its main thread's id, for stack dumps
    rank 0 -> caller -> ranks 1..   StorePort(port)       the TCPStore's port, chosen by the OS
    rank -> caller   Ready()                              the process group is initialised
    caller -> rank   RunCall(call_id, payload, context)   payload = cloudpickle((fn, args, kwargs))
    caller -> rank   ExecCell(call_id, source, filename, context)   a %%distributed cell
    caller -> rank   Exit()
    rank -> caller   Done(call_id, result)                result = the return value, cloudpickled
    rank -> caller   Failed(call_id, exc_bytes, traceback, type_name, message)

Between the caller and the template (``labutils.ranks._template``)::

    template -> caller   TemplateHello(pid, torch_version, cuda_version, nccl_available,
                                       started_at, imported_at)   the last two: time.monotonic() (s)
                                       when its main() began and when torch was imported
    caller -> template   Spawn(specs)          template -> caller   Spawned(pids)
    caller -> template   SignalRanks(pids, signal)   the template signals those of its ranks
    template -> caller   RankExited(pid, exitcode, signal)   whenever a rank ends

``context`` is what changed in the caller since the last call (cwd, notebook cell sources). ``call_id`` is None in a ``Failed`` sent while the process group initialises.
On the wire a message is a plain tuple, its ``KIND`` first: only builtin values are ever
unpickled to read a frame (see ``labutils.ranks._wire``).
"""
from __future__ import annotations

from typing import NamedTuple


class RankHello(NamedTuple):
    token: str
    rank: int
    channel: str  # "ctrl", "out" or "err"


class Started(NamedTuple):
    pid: int
    main_thread: int


class StorePort(NamedTuple):
    port: int


class Ready(NamedTuple):
    pass


class RunCall(NamedTuple):
    call_id: int
    payload: bytes
    context: dict


class ExecCell(NamedTuple):
    call_id: int
    source: str
    filename: str
    context: dict


class Exit(NamedTuple):
    pass


class Done(NamedTuple):
    call_id: int | None
    result: bytes | None


class Failed(NamedTuple):
    call_id: int | None
    exc_bytes: bytes | None  # the exception, cloudpickled, or None if it could not be
    traceback: str
    type_name: str  # module.qualname of the exception's type
    message: str

    def same_error(self, other: "Failed") -> bool:
        """Whether ``other`` is the same exception (type and message) on another rank."""
        return (self.type_name, self.message) == (other.type_name, other.message)


class TemplateHello(NamedTuple):
    pid: int
    torch_version: str  # a plain str: torch's own version type would make the caller import torch
    cuda_version: str | None
    nccl_available: bool
    started_at: float  # time.monotonic() (s, the machine's clock) when the template's main() began
    imported_at: float  # time.monotonic() (s) when it had imported what every rank needs


class Spawn(NamedTuple):
    specs: list


class Spawned(NamedTuple):
    pids: list


class SignalRanks(NamedTuple):
    pids: list
    signal: int


class RankExited(NamedTuple):
    pid: int
    exitcode: int | None
    signal: int | None


#: wire name -> message type; the names are what travels, never the classes
BY_KIND = {
    "hello": RankHello, "started": Started, "port": StorePort, "ready": Ready,
    "run": RunCall, "exec": ExecCell, "exit": Exit, "ok": Done, "err": Failed,
    "template_hello": TemplateHello, "spawn": Spawn, "spawned": Spawned, "exited": RankExited,
    "signal_ranks": SignalRanks,
}
for _kind, _cls in BY_KIND.items():
    _cls.KIND = _kind
del _kind, _cls
