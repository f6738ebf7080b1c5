"""The template process: imports torch once, then forks ranks on request (Linux); in its first idle
moment it also imports what only ranks that build an optimizer need (``_import_when_idle``), or
before its hello where ``$LABUTILS_EAGER_IMPORTS`` is "1" (a caller with no user waiting on its
first launch, whose first ranks would otherwise import them each: the judge), or never where it is
"0" (a caller whose ranks build no optimizer: the judge of a lab without one).

Started by the caller as a fresh interpreter (``python -m labutils.ranks._template FD``), in its
own session so a kernel interrupt does not reach it. It never runs a torch operation, so
its forks start in a clean state (forking after a parallel torch op hangs the child; the
notebook kernel itself is never forked). Speaks over the socket FD (``labutils.ranks._messages``):

    template -> caller: TemplateHello(pid, torch_version, cuda_version, nccl_available,
                                      started_at, imported_at)
    caller -> template: Spawn([spec, ...])    template -> caller: Spawned([pid, ...])
    template -> caller: RankExited(pid, exitcode, signal)    whenever a rank ends
    caller closes the socket: every rank is killed and the template exits.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import selectors
import signal
import socket
import sys
import time

from labutils.ranks import _wire
from labutils.ranks._messages import RankExited, SignalRanks, Spawn, Spawned, TemplateHello

_PR_SET_PDEATHSIG = 1
#: Environment variable: "1" has the template make its idle imports before its hello, "0" never.
EAGER_IMPORTS_ENV = "LABUTILS_EAGER_IMPORTS"


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (the template) dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


def _fork_rank(spec: dict, control: socket.socket, wakeup_r: int, wakeup_w: int) -> int:
    template_pid = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    # Child: a rank. Drop the template's plumbing, then serve.
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        os.close(wakeup_r)
        os.close(wakeup_w)
        _die_with_parent()
        if os.getppid() != template_pid:
            os._exit(1)
        from labutils.ranks import _worker

        spec = dict(spec, parent_pid=template_pid)
        _worker.serve(spec)
    finally:
        os._exit(1)


def _reap(control: socket.socket, children: set) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        if os.WIFSIGNALED(status):
            message = RankExited(pid, None, os.WTERMSIG(status))
        else:
            message = RankExited(pid, os.waitstatus_to_exitcode(status), None)
        try:
            _wire.send(control, message)
        except OSError:
            pass


def _signal(children: set, pids: list, sig: int) -> None:
    """Send ``sig`` to those of ``pids`` that are this template's own ranks (the caller may live in
    another PID namespace, where these numbers mean other processes: the template signals them)."""
    for pid in pids:
        if pid in children:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _kill_all(children: set) -> None:
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _preload(control: socket.socket, started_at: float) -> None:
    """Import what every rank needs, so a fork costs milliseconds, not a torch import; then freeze
    it (``_freeze_imports``) and say hello. Versions travel as plain str: torch's own version type
    would make the caller import torch."""
    with _no_collections():
        import cloudpickle  # noqa: F401
        import torch
        import torch.distributed as dist

        import labutils.ranks._worker  # noqa: F401

        if os.environ.get(EAGER_IMPORTS_ENV) == "1":
            _import_for_optimizers()
    _freeze_imports()
    cuda = torch.version.cuda
    _wire.send(control, TemplateHello(os.getpid(), str(torch.__version__), None if cuda is None else str(cuda),
                                      bool(dist.is_nccl_available()), started_at, time.monotonic()))


@contextlib.contextmanager
def _no_collections():
    """No garbage collection while imports run: nearly every object they make lives on, so the
    collections their allocations would trigger find next to nothing, and cost CPU: 0.1 s of torch's
    1.0 s import, 0.35 s of torch._dynamo's 1.0 s (process time, measured on a 2-core CPU machine)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _freeze_imports() -> None:
    """Move every object imported so far out of the garbage collector's reach (``gc.freeze``): a
    rank's full collection then walks only the objects the rank made, not torch's few hundred
    thousand, and never writes to the pages it shares with the template. No collection first: what
    the imports left in cycles stays with the template (about 9,000 objects, 7 MB, after
    torch._dynamo's), where one full collection of its 300,000 objects would cost 0.2 s of CPU."""
    gc.freeze()


#: Seconds without a request after which the template makes its idle imports (``_import_when_idle``).
IDLE_AFTER_S = 0.3


def _import_when_idle() -> None:
    """Make the optimizers' imports (``_import_for_optimizers``) and freeze them too, once nothing is
    asked (so a first launch never waits for them)."""
    with _no_collections():
        _import_for_optimizers()
    _freeze_imports()


def _import_for_optimizers() -> None:
    """Import ``torch._dynamo``: torch.optim imports it when a rank builds its first optimizer, about
    0.9 s of CPU that every rank forked after this no longer pays, and 120,000 objects its memory
    walks (``gc.get_objects``) would list once more if the rank made them."""
    import torch._dynamo  # noqa: F401


def main(fd: int) -> None:
    started_at = time.monotonic()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    try:
        _preload(control, started_at)
    except OSError:  # the caller went away while torch imported
        os._exit(0)
    children: set[int] = set()
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    os.set_blocking(wakeup_r, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    selector.register(wakeup_r, selectors.EVENT_READ, "sigchld")
    reader = _wire.FrameReader()
    idle_imports_due = os.environ.get(EAGER_IMPORTS_ENV) not in ("1", "0")
    while True:
        events = selector.select(IDLE_AFTER_S if idle_imports_due else None)
        if not events and idle_imports_due:
            _import_when_idle()
            idle_imports_due = False
        for key, _ in events:
            if key.data == "sigchld":
                try:
                    os.read(wakeup_r, 4096)
                except BlockingIOError:
                    pass
                _reap(control, children)
                continue
            try:
                data = control.recv(1 << 16)
            except OSError:
                data = b""
            if not data:  # the caller has gone: take every rank with us
                _kill_all(children)
                os._exit(0)
            for message in reader.feed(data):
                if type(message) is Spawn:
                    pids = [_fork_rank(spec, control, wakeup_r, wakeup_w) for spec in message.specs]
                    children.update(pids)
                    _wire.send(control, Spawned(pids))
                elif type(message) is SignalRanks:
                    _signal(children, message.pids, message.signal)
        _reap(control, children)


if __name__ == "__main__":
    main(int(sys.argv[1]))
