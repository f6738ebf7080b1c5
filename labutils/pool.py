"""A warm pool of ranks: processes with torch.distributed initialised, kept between calls.

    with labutils.Pool(4) as pool:          # gloo on CPU, or NCCL with one GPU per rank
        sums = pool.run(fn, x)               # fn(x) on every rank, results in rank order

What goes wrong on a rank comes back to the caller quickly and by name:

- an exception on rank k is re-raised here (its original type when it can be rebuilt,
  otherwise ``RankError``), with rank k's traceback as its ``__cause__``;
- a rank that dies raises ``RankDiedError`` with its exit code or signal;
- ranks still busy at the deadline raise ``RankTimeoutError`` (a ``TimeoutError``) that
  names them and shows the Python stack where each was stuck;
- an interrupt (Ctrl-C, Kernel > Interrupt) kills every rank at once.

After a failure that leaves ranks in an unknown state (or when a rank or the template
ended between calls) the pool kills them and starts fresh ranks on its next call. Ranks
print live; each line is prefixed ``[rank k]``. They see the caller's environment
variables as they are when the ranks start (so ``NCCL_DEBUG`` set in a cell applies).
"""
from __future__ import annotations

import itertools
import linecache
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
import weakref

from labutils import _starters, _wire
from labutils.backend import choose_backend
from labutils.errors import RankDiedError, RankError, RankTimeoutError, RemoteTraceback

#: Default seconds a call may run before its ranks are stopped (env LABUTILS_TIMEOUT).
DEFAULT_TIMEOUT_S = float(os.environ.get("LABUTILS_TIMEOUT", "120"))
#: Seconds to wait for the other ranks' answers after one rank has failed.
FAILURE_GRACE_S = 0.5
#: Seconds ranks have to connect and initialise the process group.
START_TIMEOUT_S = 60.0
#: Seconds a stuck rank gets to write its stack after SIGUSR1.
STACK_DUMP_WAIT_S = 1.0

_live_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()
_announced: set[str] = set()
_SIGNAL_NAMES = {signal.SIGKILL: "SIGKILL", signal.SIGSEGV: "SIGSEGV (segmentation fault)",
                 signal.SIGABRT: "SIGABRT (abort)", signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT",
                 signal.SIGBUS: "SIGBUS (bus error)", signal.SIGFPE: "SIGFPE"}


def _validate_world_size(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, not {type(world_size).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return world_size


def _validate_timeout(timeout) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _threads_per_rank(world_size: int) -> int:
    """Cores this process may use, shared evenly among the ranks (at least one each)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


def _pickle_call(fn, args, kwargs) -> bytes:
    """cloudpickle the call here, so that a bad argument fails before any rank starts."""
    import cloudpickle

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}: {fn!r}")
    try:
        return cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        for i, arg in enumerate(args):
            try:
                cloudpickle.dumps(arg)
            except Exception as arg_exc:
                raise TypeError(f"argument {i} ({type(arg).__name__}) cannot be sent to the ranks: {arg_exc}") from None
        for key, value in kwargs.items():
            try:
                cloudpickle.dumps(value)
            except Exception as arg_exc:
                raise TypeError(f"keyword argument {key!r} ({type(value).__name__}) cannot be sent to the ranks: {arg_exc}") from None
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} cannot be sent to the ranks: {exc}") from None


def _in_memory_sources() -> dict:
    """linecache entries with no file behind them (notebook cells), so rank tracebacks show code."""
    return {
        name: entry
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None or (name.startswith("/tmp/ipykernel_") and not os.path.exists(name))
    }


def _describe_status(exitcode, sig) -> str:
    if sig is not None:
        return f"killed by signal {_SIGNAL_NAMES.get(sig, sig)}"
    return f"exited with code {exitcode}"


def _cell_names(text: str) -> str:
    """Name notebook cells in a rank's traceback as IPython does ("Cell In[3]"), not by temp file."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        names = shell.compile._filename_map if shell is not None else {}
    except (ImportError, AttributeError):
        return text
    for filename, number in names.items():
        text = text.replace(f'File "{filename}"', f"Cell In[{number}]")
    return text


def _rebuild_exception(rank: int, world_size: int, exc_bytes, tb_text: str, type_name: str, message: str):
    """The rank's exception in the caller: original type if possible, else RankError.

    A rank's ``SystemExit`` or ``KeyboardInterrupt`` becomes a ``RankError``: re-raised as
    such it would end the caller's script, or read as an interrupt of the caller.
    """
    import cloudpickle

    tb_text = _cell_names(tb_text)
    exc = None
    if exc_bytes is not None:
        try:
            exc = cloudpickle.loads(exc_bytes)
        except Exception:
            exc = None
    if not isinstance(exc, Exception):
        exc = RankError(f"rank {rank} raised {type_name.removeprefix('builtins.')}: {message}", rank, tb_text)
    exc.rank = rank
    exc.remote_traceback = tb_text
    exc.__cause__ = RemoteTraceback(f"on rank {rank} of {world_size}:\n{tb_text}")
    exc.__traceback__ = None
    if hasattr(exc, "add_note"):
        exc.add_note(f"[labutils] raised on rank {rank} of {world_size} (its traceback is shown above)")
    return exc


class _Rank:
    """The caller's view of one rank: its sockets, pid and partial output lines."""

    def __init__(self, rank: int):
        self.rank = rank
        self.pid: int | None = None
        self.main_thread: int | None = None
        self.ctrl: socket.socket | None = None
        self.out: socket.socket | None = None
        self.err: socket.socket | None = None
        self.reader = _wire.FrameReader()
        self.partial = {"out": b"", "err": b""}
        self.pending: list = []  # control messages that arrived before anyone asked for them
        self.ctrl_closed = False


class Pool:
    """``world_size`` ranks kept alive with their process group; ``run`` costs milliseconds.

    ``backend``: "auto" (NCCL with one GPU per rank if there are enough GPUs, else gloo on
    CPU), "gloo" or "nccl". ``timeout``: default seconds per call (``LABUTILS_TIMEOUT``,
    120 s unless set). Ranks start on first use; ``shutdown()`` (or leaving a ``with``
    block) stops them.
    """

    def __init__(self, world_size: int, backend: str = "auto", timeout: float | None = None):
        self.world_size = _validate_world_size(world_size)
        choice = choose_backend(backend, self.world_size)
        self.backend, self.device_type = choice.backend, choice.device_type
        self.timeout = _validate_timeout(timeout)
        if backend == "auto" and choice.backend == "gloo" and choice.reason not in _announced:
            _announced.add(choice.reason)
            print(f"labutils: {choice.reason}")
        self._ranks: list[_Rank] = []
        self._selector = None
        self._listener = None
        self._tmpdir = None
        self._calls = itertools.count()
        self._sent_context: dict = {}
        self._cells = itertools.count(1)
        self._starter = None
        self.restarts = 0
        _live_pools.add(self)

    # ----- lifecycle -------------------------------------------------------------
    @property
    def started(self) -> bool:
        return bool(self._ranks)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        state = "running" if self.started else "stopped"
        return f"<labutils.Pool world_size={self.world_size} backend={self.backend} {state}>"

    def _take_news(self) -> None:
        """Take in what arrived since the last call: exit reports, closed channels, stray output."""
        try:
            for key, _ in self._selector.select(0):
                for rank, message in self._handle_event(key, set()):
                    self._ranks[rank].pending.append(message)
        except (OSError, RuntimeError):
            pass  # the template has gone: _unhealthy_reason sees it

    def _unhealthy_reason(self) -> str | None:
        """Why the running ranks cannot take a call (template gone, a rank gone), or None."""
        if self._selector is None:
            return "the ranks were stopped half-way"  # an interrupt cut a stop short
        self._take_news()
        if self._starter is not _starters.current_starter() or not self._starter.alive():
            return "the rank template had exited"
        for r in self._ranks:
            if r.ctrl_closed or self._starter.exit_status(r.pid) is not None:
                self._await_exit_report(r)
                status = self._starter.exit_status(r.pid)
                return f"rank {r.rank} had ended" + (f" ({_describe_status(*status)})" if status else "")
        return None

    def start(self) -> None:
        """Start the ranks and initialise their process group (no-op when running and healthy)."""
        reason = self._unhealthy_reason() if self.started else None
        if reason:
            print(f"labutils: {reason}; starting {self.world_size} fresh ranks")
            self._kill()
            self.restarts += 1
        if self.started:
            return
        __tracebackhide__ = True
        starter = _starters.get_starter()
        self._tmpdir = tempfile.mkdtemp(prefix="labutils-")
        listen_path = os.path.join(self._tmpdir, "ranks.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(listen_path)
        self._listener.listen(3 * self.world_size)
        token = secrets.token_hex(8)
        threads = _threads_per_rank(self.world_size)
        environ = _starters.child_environment()  # as it is now, not when the template started
        specs = [
            {
                "rank": r,
                "world_size": self.world_size,
                "local_rank": r,
                "backend": self.backend,
                "device_type": self.device_type,
                "listen_path": listen_path,
                "token": token,
                "num_threads": threads,
                "stack_file": os.path.join(self._tmpdir, f"stack{r}.txt"),
                "pg_timeout_s": max(1800.0, self.timeout + 60.0),
                "environ": environ,
            }
            for r in range(self.world_size)
        ]
        self._ranks = [_Rank(r) for r in range(self.world_size)]
        self._starter = starter
        self._sent_context = {}
        try:
            pids = starter.spawn(specs)
            for r, pid in zip(self._ranks, pids):
                r.pid = pid
            self._connect_ranks(token)
            self._initialise_group()
        except BaseException:
            self._kill()
            raise

    def _connect_ranks(self, token: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._starter.events_fileno(), selectors.EVENT_READ, ("events", None))
        self._selector.register(self._listener, selectors.EVENT_READ, ("listen", None))
        expected = 3 * self.world_size
        connected = 0
        while connected < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"ranks did not connect within {START_TIMEOUT_S:.0f} s")
            for key, _ in self._selector.select(remaining):
                kind = key.data[0]
                if kind == "events":
                    self._starter.read_events()
                    self._raise_if_dead(starting=True)
                elif kind == "listen":
                    conn, _ = self._listener.accept()
                    conn.settimeout(10)
                    hello = _wire.recv(conn)
                    conn.settimeout(None)
                    if hello[0] != "hello" or hello[1] != token:
                        conn.close()
                        continue
                    rank = self._ranks[hello[2]]
                    setattr(rank, hello[3], conn)
                    self._selector.register(conn, selectors.EVENT_READ, (hello[3], rank))
                    connected += 1
        self._selector.unregister(self._listener)
        self._listener.close()
        self._listener = None

    def _initialise_group(self) -> None:
        started = self._collect({"started"}, time.monotonic() + START_TIMEOUT_S, "starting")
        for r in self._ranks:
            r.main_thread = started[r.rank][2]
        replies = self._collect({"port"}, time.monotonic() + START_TIMEOUT_S, "starting", ranks=[0])
        for r in self._ranks[1:]:
            _wire.send(r.ctrl, replies[0])
        self._collect({"ready"}, time.monotonic() + START_TIMEOUT_S, "initialising the process group")

    def shutdown(self) -> None:
        """Stop the ranks (politely, then by force after 2 s). The pool can start again later."""
        if not self._ranks:
            return
        for r in self._ranks:
            try:
                _wire.send(r.ctrl, ("exit",))
            except (OSError, AttributeError):
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self._all_exited():
            if self._selector is None:
                break
            for key, _ in self._selector.select(max(0.0, deadline - time.monotonic())):
                self._handle_event(key, {})
        self._drain_output()
        self._kill()

    def _all_exited(self) -> bool:
        return all(self._starter.exit_status(r.pid) is not None for r in self._ranks if r.pid)

    def _kill(self) -> None:
        """Kill every rank, wait until the starter has seen them exit, release resources."""
        if self._starter is not None and self._ranks:
            pids = [r.pid for r in self._ranks if r.pid]
            self._starter.kill(pids)
            deadline = time.monotonic() + 5.0
            sel = selectors.DefaultSelector()
            sel.register(self._starter.events_fileno(), selectors.EVENT_READ)
            try:
                while not self._all_exited() and time.monotonic() < deadline:
                    if sel.select(0.1):
                        self._starter.read_events()
            except (OSError, RuntimeError):
                pass  # the template is gone, and its ranks with it
            finally:
                sel.close()
        for r in self._ranks:
            for sock in (r.ctrl, r.out, r.err):
                if sock is not None:
                    sock.close()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        self._ranks = []

    def pids(self) -> list[int]:
        """Process ids of the running ranks (empty when stopped)."""
        return [r.pid for r in self._ranks]

    # ----- calls -----------------------------------------------------------------
    def run(self, fn, *args, timeout: float | None = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order.

        Tensors in the results come back on the CPU. ``timeout`` (s) overrides the pool's.
        """
        __tracebackhide__ = True
        payload = _pickle_call(fn, args, kwargs)
        deadline_s = _validate_timeout(timeout if timeout is not None else self.timeout)
        self.start()
        call_id = next(self._calls)
        replies = self._call(("run", call_id, payload, self._context_update()), deadline_s)
        import cloudpickle

        return [cloudpickle.loads(replies[r][2]) for r in range(self.world_size)]

    def exec_cell(self, source: str, timeout: float | None = None) -> None:
        """Run a cell's source on every rank, each in its own persistent namespace."""
        __tracebackhide__ = True
        filename = f"<distributed cell {next(self._cells)}>"
        compile(source, filename, "exec")  # a syntax error fails here, before the ranks see it
        deadline_s = _validate_timeout(timeout if timeout is not None else self.timeout)
        self.start()
        call_id = next(self._calls)
        self._call(("exec", call_id, source, filename, self._context_update()), deadline_s)

    def _call(self, request: tuple, timeout_s: float) -> dict:
        """Send ``request`` (call id second) to every rank; wait ``timeout_s`` for every answer."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout_s
        try:
            for r in self._ranks:
                try:
                    _wire.send(r.ctrl, request)
                except OSError:
                    pass  # this rank has just died: _collect reports it
        except KeyboardInterrupt:
            self._stop_on_interrupt()  # some ranks have the request, others not: none may go on
        return self._collect({"ok"}, deadline, "running", call_id=request[1])

    def _context_update(self) -> dict:
        """What changed in the caller since the last call: cwd, sys.path, cell sources."""
        context = {}
        cwd = os.getcwd()
        if self._sent_context.get("cwd") != cwd:
            context["cwd"] = self._sent_context["cwd"] = cwd
        if self._sent_context.get("sys_path") != sys.path:
            context["sys_path"] = list(sys.path)
            self._sent_context["sys_path"] = list(sys.path)
        sent = self._sent_context.setdefault("sources", {})
        sources = {k: v for k, v in _in_memory_sources().items() if sent.get(k) != v[0]}
        if sources:
            context["sources"] = sources
            sent.update({k: v[0] for k, v in sources.items()})
        return context

    # ----- the wait loop -----------------------------------------------------------
    def _collect(self, kinds: set, deadline: float, doing: str, call_id=None, ranks=None) -> dict:
        """Wait for one reply of ``kinds`` from each rank in ``ranks``; relay output meanwhile.

        Raises the first rank's exception, a RankDiedError or a RankTimeoutError; in those
        cases (and on KeyboardInterrupt) ranks that may be mid-collective are killed.
        """
        __tracebackhide__ = True
        waiting = set(range(self.world_size) if ranks is None else ranks)
        replies: dict[int, tuple] = {}
        errors: list[tuple[int, tuple]] = []  # in order of arrival
        first_failure_at = None

        def take(rank: int, message) -> bool:
            nonlocal first_failure_at
            if rank not in waiting:
                return False
            if message[0] == "err" and (call_id is None or message[1] in (call_id, None)):
                errors.append((rank, message))
                first_failure_at = first_failure_at or time.monotonic()
            elif message[0] in kinds and (call_id is None or message[1] == call_id):
                replies[rank] = message
            else:
                return False
            waiting.discard(rank)
            return True

        for r in self._ranks:
            r.pending = [m for m in r.pending if not take(r.rank, m)]
        try:
            while waiting:
                now = time.monotonic()
                if first_failure_at is not None and now - first_failure_at > FAILURE_GRACE_S:
                    break
                if now >= deadline:
                    break
                limit = deadline - now
                if first_failure_at is not None:
                    limit = min(limit, FAILURE_GRACE_S - (now - first_failure_at))
                for key, _ in self._selector.select(max(0.0, limit)):
                    for rank, message in self._handle_event(key, waiting):
                        if not take(rank, message):
                            self._ranks[rank].pending.append(message)
                if first_failure_at is None and self._dead_ranks(waiting):
                    first_failure_at = time.monotonic()  # let the other ranks' news arrive too
            self._drain_output()
            # A death comes first: the errors of the other ranks are usually its consequence.
            dead = self._dead_ranks(set(range(self.world_size)) - set(replies))
            if dead:
                self._fail_dead(dead, errors, doing)
            if errors:
                self._fail_after_errors(errors, waiting)
            if waiting:
                self._fail_timeout(sorted(waiting), doing)
        except KeyboardInterrupt:  # also while reading stacks or killing: never leave ranks running
            self._stop_on_interrupt()
        return replies

    def _stop_on_interrupt(self):
        """Ctrl-C: kill every rank at once, relay what they printed, say what happened."""
        __tracebackhide__ = True
        if self._starter is not None:
            self._starter.kill([r.pid for r in self._ranks if r.pid])  # first: a second Ctrl-C cannot skip it
        self._drain_output()
        self._kill()
        raise KeyboardInterrupt(f"labutils stopped all {self.world_size} ranks; "
                                "the pool starts fresh ranks on its next call") from None

    def _fail_dead(self, dead: list[int], errors, doing: str) -> None:
        __tracebackhide__ = True
        rank = dead[0]
        exitcode, sig = self._starter.exit_status(self._ranks[rank].pid)
        message = f"rank {rank} died while {doing}: {_describe_status(exitcode, sig)}"
        if len(dead) > 1:
            message += f"; rank{'s' if len(dead) > 2 else ''} {', '.join(map(str, dead[1:]))} died too"
        if errors:
            first = sorted(errors, key=lambda e: e[0])[0]
            message += f"; then rank {first[0]} raised {first[1][4].rsplit('.', 1)[-1]}: {first[1][5][:200]}"
        self._kill()
        raise RankDiedError(message + ". All ranks were stopped; fresh ranks start on the next call.",
                            rank, exitcode, sig)

    def _dead_ranks(self, among) -> list[int]:
        return sorted(r for r in among if self._ranks and self._starter.exit_status(self._ranks[r].pid) is not None)

    def _handle_event(self, key, waiting) -> list:
        """Process one ready socket; return (rank, message) pairs from control channels."""
        kind, rank = key.data
        if kind == "events":
            self._starter.read_events()
            return []
        try:
            data = key.fileobj.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if kind == "ctrl":
            if not data:
                self._selector.unregister(key.fileobj)
                rank.ctrl_closed = True
                if rank.rank in waiting:
                    self._await_exit_report(rank)
                return []
            return [(rank.rank, m) for m in rank.reader.feed(data)]
        if not data:
            self._selector.unregister(key.fileobj)
            return []
        self._relay(rank, kind, data)
        return []

    def _await_exit_report(self, rank: _Rank, wait_s: float = 2.0) -> None:
        """A rank closed its control channel: wait briefly until its exit status is known."""
        deadline = time.monotonic() + wait_s
        sel = selectors.DefaultSelector()
        sel.register(self._starter.events_fileno(), selectors.EVENT_READ)
        try:
            while self._starter.exit_status(rank.pid) is None and time.monotonic() < deadline:
                if sel.select(max(0.0, deadline - time.monotonic())):
                    self._starter.read_events()
        finally:
            sel.close()

    def _relay(self, rank: _Rank, kind: str, data: bytes) -> None:
        """Print complete lines from a rank, prefixed with its number."""
        text = rank.partial[kind] + data
        *lines, rank.partial[kind] = text.split(b"\n")
        if lines:
            stream = sys.stdout if kind == "out" else sys.stderr
            prefix = f"[rank {rank.rank}] "
            stream.write("".join(prefix + line.decode("utf-8", "replace") + "\n" for line in lines))
            stream.flush()

    def _drain_output(self) -> None:
        """Relay whatever output is already waiting, and any unfinished last line."""
        if self._selector is None:
            return
        while True:
            events = [k for k, _ in self._selector.select(0) if k.data[0] in ("out", "err")]
            if not events:
                break
            for key in events:
                self._handle_event(key, set())
        for r in self._ranks:
            for kind in ("out", "err"):
                if r.partial[kind]:
                    self._relay(r, kind, b"\n")

    def _fail_after_errors(self, errors, still_running) -> None:
        """Raise the first error to arrive (the cause; later ones are often its consequence);
        of ranks that raised that same error, name the lowest. Others are listed in notes."""
        __tracebackhide__ = True
        same_as_first = [e for e in errors if e[1][4:6] == errors[0][1][4:6]]
        rank, message = min(same_as_first, key=lambda e: e[0])
        if still_running or any(self._starter.exit_status(r.pid) is not None for r in self._ranks):
            self._kill()  # some ranks may be stuck in a collective the failed rank never joined
            restarted = True
        else:
            restarted = message[1] is None  # failed while initialising
            if restarted:
                self._kill()
        exc = _rebuild_exception(rank, self.world_size, *message[2:])
        same = sorted(r for r, _ in same_as_first if r != rank)
        if hasattr(exc, "add_note"):
            if same:
                who = f"rank{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}"
                exc.add_note(f"[labutils] {who} also raised this error")
            for other, m in sorted((e for e in errors if e[1][4:6] != message[4:6]), key=lambda e: e[0]):
                exc.add_note(f"[labutils] rank {other} then raised {m[4].removeprefix('builtins.')}: {m[5][:200]}")
            if restarted:
                exc.add_note("[labutils] the other ranks were stopped; the pool starts fresh ranks on its next call")
        raise exc  # the rank's traceback travels as exc.__cause__ (a RemoteTraceback), shown above this frame

    def _fail_timeout(self, ranks: list[int], doing: str) -> None:
        __tracebackhide__ = True
        stacks = self._stacks(ranks)
        self._kill()
        lines = [
            f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} did not finish "
            f"{doing} before the deadline; all ranks were stopped (fresh ranks start on the next call)."
        ]
        for r in ranks:
            lines.append(f"--- rank {r} was here (most recent call first):")
            lines.append(stacks.get(r) or "    (no stack could be read)")
        raise RankTimeoutError("\n".join(lines), ranks, stacks)

    def _stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask stuck ranks for their Python stacks (faulthandler on SIGUSR1)."""
        paths = {r: os.path.join(self._tmpdir, f"stack{r}.txt") for r in ranks}
        offsets = {r: os.path.getsize(p) if os.path.exists(p) else 0 for r, p in paths.items()}
        self._starter.kill([self._ranks[r].pid for r in ranks], signal.SIGUSR1)
        deadline = time.monotonic() + STACK_DUMP_WAIT_S
        texts: dict[int, str] = {}
        while time.monotonic() < deadline and len(texts) < len(ranks):
            time.sleep(0.05)
            for r, path in paths.items():
                if r in texts:
                    continue
                try:
                    with open(path) as f:
                        f.seek(offsets[r])
                        text = f.read()
                except OSError:
                    continue
                if text.endswith("\n") and "File" in text:
                    time.sleep(0.05)  # let the dump of every thread finish
                    with open(path) as f:
                        f.seek(offsets[r])
                        texts[r] = f.read()
        return {r: _cell_names(_main_thread_stack(t, self._ranks[r].main_thread)) for r, t in texts.items()}


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def _main_thread_stack(dump: str, main_ident: int | None) -> str:
    """The main thread's part of a faulthandler dump, without launcher frames, with source lines."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip())
    chosen = blocks[0]
    if main_ident is not None:
        for block in blocks:
            if f"0x{main_ident:016x}" in block.split("\n", 1)[0]:
                chosen = block
                break
    out = []
    for line in chosen.splitlines()[1:]:
        m = _FRAME.match(line)
        if not m:
            continue
        if m["file"].endswith(os.path.join("labutils", "_worker.py")) or m["file"].endswith(os.path.join("labutils", "_template.py")):
            continue
        out.append(f'    File "{m["file"]}", line {m["line"]}, in {m["func"]}')
        source = linecache.getline(m["file"], int(m["line"])).strip()
        if source:
            out.append(f"        {source}")
    return "\n".join(out)


def shutdown() -> None:
    """Stop every pool of this process and the rank template: no rank process is left."""
    for pool in list(_live_pools):
        pool.shutdown()
    _starters.close_starter()


def _at_exit() -> None:
    try:
        shutdown()
    except Exception:
        pass


import atexit  # noqa: E402

atexit.register(_at_exit)
