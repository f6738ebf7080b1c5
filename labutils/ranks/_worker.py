"""The rank side of the launcher: one process per rank, started by the template or by spawn.

A rank connects three Unix-socket channels to the caller (control, stdout, stderr),
points its file descriptors 1 and 2 at the output channels (so C++ and NCCL output is
forwarded too), initialises the process group, then serves requests until told to exit
(the messages are those of ``labutils.ranks._messages``):

    RunCall(call_id, payload, context)   payload = cloudpickle((fn, args, kwargs))
    ExecCell(call_id, source, filename, context)  a %%distributed cell, in this rank's namespace
    Exit()

and answers Done(call_id, result_bytes) or Failed(call_id, exc_bytes, traceback, type_name,
message). On SIGUSR1 it writes every thread's Python stack to its stack file
(faulthandler), which the caller reads when a rank is stuck.
"""
from __future__ import annotations

import ast
import ctypes
import faulthandler
import linecache
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import warnings

from labutils.ranks import _wire
from labutils.ranks._messages import Done, ExecCell, Exit, Failed, RankHello, Ready, RunCall, Started, StorePort

#: How often (s) a rank checks that the process that started it is still there.
WATCHDOG_PERIOD_S = 0.5


def _connect(path: str, token: str, rank: int, channel: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    _wire.send(sock, RankHello(token, rank, channel))
    return sock


def _redirect_output(out: socket.socket, err: socket.socket) -> None:
    """Send fd 1 and 2 (C level and Python level) to the caller, line by line."""
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


try:
    _libc_fflush = ctypes.CDLL(None).fflush
except (OSError, AttributeError):
    _libc_fflush = None


def _flush_all() -> None:
    """Flush Python's and C stdio's buffers (printf from extensions) before answering."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if _libc_fflush is not None:
        _libc_fflush(None)


def _exit_as_caller_gone(launch_folder: str, status: int) -> None:
    """End this rank, whose caller has gone: first remove the folder the caller made for this launch
    (its socket, the stack files), which a caller that was killed cannot remove itself."""
    shutil.rmtree(launch_folder, ignore_errors=True)
    os._exit(status)


def _start_watchdog(parent_pid: int, launch_folder: str) -> None:
    """Exit when the process that started this rank is gone (no orphaned ranks)."""

    def watch():
        while True:
            time.sleep(WATCHDOG_PERIOD_S)
            if os.getppid() != parent_pid:
                _exit_as_caller_gone(launch_folder, 70)

    threading.Thread(target=watch, name="labutils-watchdog", daemon=True).start()


def _quiet_known_warnings() -> None:
    """Silence torch.distributed deprecation chatter: nbgrader zeroes a cell with any stderr."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed")


def _loopback_listener() -> socket.socket:
    """A listening IPv4 socket on 127.0.0.1 and a free port (chosen by the OS: no collisions), for
    rank 0's TCPStore. Left to itself the store listens on every interface, IPv6 included, and its
    server names each peer, ``::ffff:127.0.0.1``, by a reverse DNS query that /etc/hosts cannot answer:
    a slow name server then holds the launch's start for its timeout (5 s)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(socket.SOMAXCONN)
    return listener


def _init_process_group(spec: dict, ctrl: socket.socket):
    """Rank 0 opens a TCPStore on the loopback interface (``_loopback_listener``); the caller
    relays its port to the other ranks; everyone joins the process group."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, world_size = spec["rank"], spec["world_size"]
    timeout = datetime.timedelta(seconds=spec["pg_timeout_s"])
    if spec["device_type"] == "cuda":
        torch.cuda.set_device(spec["local_rank"])
        device = torch.device("cuda", spec["local_rank"])
    else:
        device = torch.device("cpu")
    if rank == 0:
        listener = _loopback_listener()
        port = listener.getsockname()[1]
        store = dist.TCPStore("127.0.0.1", port, world_size, True, timeout=timeout, wait_for_workers=False,
                              master_listen_fd=listener.detach())
        _wire.send(ctrl, StorePort(port))
    else:
        message = _wire.recv(ctrl)
        if type(message) is not StorePort:
            raise RuntimeError(f"expected the store's port, got {type(message).__name__}")
        port = message.port
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=timeout)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    kwargs = {"device_id": device} if spec["device_type"] == "cuda" else {}
    # torch reads TORCH_DISTRIBUTED_DEBUG when torch.distributed is imported, here long before this
    # launch's environment arrived (ranks fork from a template): read it again for this launch
    dist.set_debug_level_from_env()
    dist.init_process_group(
        spec["backend"], store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs
    )
    from labutils.ranks import strict

    strict.setup(device)  # LABUTILS_STRICT_COLLECTIVES: NCCL's rules checked on every collective
    from labutils import rank as rank_info

    rank_info.configure(device, spec["backend"])
    return device, store


def _user_traceback(exc: BaseException) -> str:
    """The exception's traceback without this module's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _error_reply(call_id, exc: BaseException, context: str = "") -> Failed:
    import cloudpickle

    try:
        exc_bytes = cloudpickle.dumps(exc)
    except Exception:
        exc_bytes = None
    text = _user_traceback(exc)
    if context:
        text = f"{context}\n{text}"
    return Failed(call_id, exc_bytes, text, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


def _apply_context(context: dict | None) -> None:
    """Follow the caller's working directory and in-memory sources (notebook cells).

    The caller's ``sys.path`` reaches a rank through ``PYTHONPATH`` when it starts; when it
    changes later the pool starts fresh ranks (see ``labutils.ranks.pool``).
    """
    if not context:
        return
    if "cwd" in context:
        try:
            os.chdir(context["cwd"])
        except OSError:
            pass
    for filename, entry in context.get("sources", {}).items():
        linecache.cache[filename] = entry


def _run_call(call_id, payload: bytes):
    import cloudpickle

    fn, args, kwargs = cloudpickle.loads(payload)
    result = fn(*args, **kwargs)
    try:
        return Done(call_id, _wire.dumps_on_cpu(result))
    except Exception as exc:
        raise TypeError(
            f"the return value of {getattr(fn, '__name__', fn)!r} cannot be sent back to the caller: {exc}"
        ) from exc


def _exec_cell(call_id, source: str, filename: str, namespace: dict):
    """Run a cell's source; like IPython, show the value of a final expression."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = ast.parse(source, filename=filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)
        if value is not None:
            print(repr(value))
    return Done(call_id, None)


def _start_rank(spec: dict) -> socket.socket:
    """Connect the three channels, send output to the caller, arm the stack dump and the
    watchdog, set the rank's environment; return the control channel."""
    os.environ.clear()
    os.environ.update(spec["environ"])  # the caller's, as it was when this launch started
    tempfile.tempdir = None  # TMPDIR read again: the template's imports (torch._dynamo's) cached its own
    ctrl = _connect(spec["listen_path"], spec["token"], spec["rank"], "ctrl")
    out = _connect(spec["listen_path"], spec["token"], spec["rank"], "out")
    err = _connect(spec["listen_path"], spec["token"], spec["rank"], "err")
    _redirect_output(out, err)
    stack_file = open(spec["stack_file"], "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _start_watchdog(spec["parent_pid"], os.path.dirname(spec["listen_path"]))
    _quiet_known_warnings()
    os.environ.update(
        RANK=str(spec["rank"]),
        WORLD_SIZE=str(spec["world_size"]),
        LOCAL_RANK=str(spec["local_rank"]),
        LOCAL_WORLD_SIZE=str(spec["world_size"]),
        OMP_NUM_THREADS=str(spec["num_threads"]),
    )
    return ctrl


def _answer(message, namespace: dict):
    """The reply to one request: Done, or Failed with whatever the call raised."""
    try:
        if type(message) is RunCall:
            _apply_context(message.context)
            return _run_call(message.call_id, message.payload)
        if type(message) is ExecCell:
            _apply_context(message.context)
            return _exec_cell(message.call_id, message.source, message.filename, namespace)
        raise RuntimeError(f"unknown request {type(message).__name__}")
    except BaseException as exc:  # KeyboardInterrupt and SystemExit are reported too
        return _error_reply(getattr(message, "call_id", None), exc)


def serve(spec: dict) -> None:
    """Body of a rank process: connect, initialise, serve requests, exit."""
    ctrl = _start_rank(spec)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(spec["num_threads"])
    _wire.send(ctrl, Started(os.getpid(), threading.main_thread().ident))
    try:
        device, _store = _init_process_group(spec, ctrl)
    except BaseException as exc:
        _flush_all()
        _wire.send(ctrl, _error_reply(None, exc, "the process group could not be initialised:"))
        os._exit(1)
    _wire.send(ctrl, Ready())
    namespace = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "rank": spec["rank"],
        "world_size": spec["world_size"],
        "device": device,
        "dist": dist,
        "torch": torch,
    }
    while True:
        try:
            message = _wire.recv(ctrl)
        except EOFError:
            _exit_as_caller_gone(os.path.dirname(spec["listen_path"]), 0)
        if type(message) is Exit:
            break
        reply = _answer(message, namespace)
        _flush_all()
        _wire.send(ctrl, reply)
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    _flush_all()
    os._exit(0)


def main() -> None:
    """Entry point of a rank started as a fresh interpreter: the spec arrives on stdin."""
    import pickle

    spec = pickle.loads(sys.stdin.buffer.read())
    try:
        serve(spec)
    finally:
        os._exit(1)


if __name__ == "__main__":
    main()
