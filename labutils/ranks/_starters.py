"""How the caller creates rank processes, and learns when they end.

Two starters share one interface (``spawn(specs) -> pids``, ``events_fileno()``,
``read_events()``, ``exit_status(pid)``, ``kill(pids)``, ``close()``):

- ``TemplateStarter`` (Linux): a template interpreter that imported torch once forks the
  ranks, so a launch costs milliseconds after the first. The caller is never forked.
- ``SpawnStarter`` (elsewhere, or ``LABUTILS_START_METHOD=spawn``): each rank is a fresh
  interpreter; slower (every rank imports torch) but needs no fork.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time

from labutils.ranks import _wire
from labutils.ranks._messages import RankExited, SignalRanks, Spawn, Spawned, TemplateHello
from labutils.ranks.errors import TemplateExitedError

#: Environment variable: a JSON list of words put before the rank template's command line (a
#: sandbox such as ``bwrap ... --``), so every rank of this process runs inside it. Unset: none.
RANK_WRAPPER_ENV = "LABUTILS_RANK_WRAPPER"


def rank_command_wrapper() -> list:
    """The words of ``$LABUTILS_RANK_WRAPPER`` (a JSON list of strings); [] when unset.
    ValueError when it is not a JSON list of strings."""
    import json

    text = os.environ.get(RANK_WRAPPER_ENV)
    if not text:
        return []
    words = json.loads(text)
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ValueError(f"${RANK_WRAPPER_ENV} must be a JSON list of strings, got {text[:80]!r}")
    return words


#: Seconds the template may take to import torch before we give up.
TEMPLATE_START_TIMEOUT_S = 120.0


def child_environment() -> dict:
    """The caller's environment plus what makes a rank start quietly and find labutils.

    Ranks get it twice: the template (or spawned interpreter) starts with it, and each rank
    applies it again as it starts, so a variable the notebook set after the template
    started (``NCCL_DEBUG``, ``NCCL_ALGO``, ``CUDA_VISIBLE_DEVICES``) still reaches it.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # Count GPUs through NVML, so that nothing initialises CUDA before a fork.
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _ExitBook:
    """Exit statuses by pid: (exitcode, signal) as reported by the starter."""

    def __init__(self):
        self.statuses: dict[int, tuple[int | None, int | None]] = {}

    def exit_status(self, pid: int):
        return self.statuses.get(pid)


class TemplateStarter(_ExitBook):
    """Starts the template interpreter at once and returns; ``wait_ready()`` waits for its hello
    (it imports torch meanwhile, so the caller's own work overlaps that import)."""

    def __init__(self):
        super().__init__()
        self.sys_path = list(sys.path)  # what the template (and every fork) imports with
        self.wrapper = rank_command_wrapper()  # the command around it, as it was at its start
        ours, theirs = socket.socketpair()
        self._sock = ours
        self._process = subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "labutils.ranks._template", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=child_environment(),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self._reader = _wire.FrameReader()
        self._pending: list = []
        self.hello: TemplateHello | None = None  # versions, and when it started and imported torch
        self.used = False  # whether it has forked ranks yet

    def wait_ready(self) -> None:
        """Block until the template has imported torch (its hello), at most TEMPLATE_START_TIMEOUT_S."""
        if self.hello is not None:
            return
        try:
            self.hello = self._next_message(TEMPLATE_START_TIMEOUT_S, TemplateHello)
        except BaseException:  # Ctrl-C while torch imports, or no answer: leave no template behind
            self._process.kill()
            self._process.wait()
            self._sock.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def stale(self) -> bool:
        """Whether the caller's sys.path changed since the template started (forks would miss it), or
        ``$LABUTILS_RANK_WRAPPER`` did (its ranks would run outside the command now asked for)."""
        return sys.path != self.sys_path or rank_command_wrapper() != self.wrapper

    def _next_message(self, timeout: float, kind: type):
        """Block until a message of type ``kind`` arrives; exit reports met on the way are booked."""
        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self._pending):
                if type(message) is kind:
                    return self._pending.pop(i)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the rank template did not answer within {timeout:.0f} s")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(1 << 16)
            except socket.timeout:
                continue
            finally:
                self._sock.settimeout(None)
            if not data:
                raise TemplateExitedError(f"the rank template exited unexpectedly ({self._exit_status()})")
            self._book(self._reader.feed(data))

    def _book(self, messages) -> None:
        """File exit reports by pid, in the order they came; a pid that ``Spawned`` names again is a
        new rank (pids are reused once the system has gone round them): its old report goes."""
        for message in messages:
            if type(message) is RankExited:
                self.statuses[message.pid] = (message.exitcode, message.signal)
                continue
            if type(message) is Spawned:
                for pid in message.pids:
                    self.statuses.pop(pid, None)
            self._pending.append(message)

    def _exit_status(self) -> str:
        """How the template's process (or the command around it) ended, in words; it closed its socket,
        so it is ending: waited for up to 5 s."""
        try:
            code = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "its process still runs"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def spawn(self, specs: list[dict]) -> list[int]:
        self.wait_ready()
        self.used = True
        _wire.send(self._sock, Spawn(specs))
        return self._next_message(30.0, Spawned).pids

    def events_fileno(self) -> int:
        return self._sock.fileno()

    def read_events(self) -> None:
        """Book the exit reports that have arrived; never blocks (readiness may be stale)."""
        try:
            data = self._sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not data:
            raise TemplateExitedError(f"the rank template exited unexpectedly ({self._exit_status()})")
        self._book(self._reader.feed(data))

    def kill(self, pids, sig: int = signal.SIGKILL) -> None:
        """Have the template send ``sig`` to its ranks ``pids``: their numbers are the template's
        own, which differ from the caller's when the template runs in a sandbox's PID namespace."""
        live = [pid for pid in pids if pid not in self.statuses]
        if live:
            try:
                _wire.send(self._sock, SignalRanks(live, int(sig)))
            except OSError:  # the template is gone, and its ranks with it
                pass

    def close(self) -> None:
        """Stop the template; it kills every rank it started before exiting (one still importing
        torch has none, and is killed)."""
        try:
            self._sock.close()
            if self.hello is None:
                self._process.kill()
        finally:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


class SpawnStarter(_ExitBook):
    torch_version = cuda_version = nccl_available = None

    def __init__(self):
        super().__init__()
        self._wake_r, self._wake_w = socket.socketpair()
        self._processes: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._reported: list[tuple] = []

    def alive(self) -> bool:
        return True

    def wait_ready(self) -> None:
        """Nothing to wait for: each rank starts its own interpreter."""

    def stale(self) -> bool:
        """Never: each rank is a fresh interpreter started with the caller's sys.path as it is."""
        return False

    def _watch(self, process: subprocess.Popen) -> None:
        code = process.wait()
        status = (None, -code) if code < 0 else (code, None)
        with self._lock:
            self._reported.append((process.pid, status))
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def spawn(self, specs: list[dict]) -> list[int]:
        env = child_environment()
        pids = []
        for spec in specs:
            process = subprocess.Popen(
                [sys.executable, "-m", "labutils.ranks._worker"],
                stdin=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
            process.stdin.write(pickle.dumps(dict(spec, parent_pid=os.getpid())))
            process.stdin.close()
            self.statuses.pop(process.pid, None)  # an earlier rank's, if the system reused its pid
            self._processes[process.pid] = process
            threading.Thread(target=self._watch, args=(process,), daemon=True).start()
            pids.append(process.pid)
        return pids

    def events_fileno(self) -> int:
        return self._wake_r.fileno()

    def read_events(self) -> None:
        try:
            self._wake_r.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        with self._lock:
            reported, self._reported = self._reported, []
        for pid, status in reported:
            self.statuses[pid] = status
            self._processes.pop(pid, None)

    def kill(self, pids, sig: int = signal.SIGKILL) -> None:
        for pid in pids:
            process = self._processes.get(pid)
            if process is not None and process.poll() is None:
                process.send_signal(sig)

    def close(self) -> None:
        for process in list(self._processes.values()):
            if process.poll() is None:
                process.kill()
            process.wait()
        self._processes.clear()


_starter = None
_starter_lock = threading.Lock()


def start_method() -> str:
    """"template" on Linux unless LABUTILS_START_METHOD=spawn; "spawn" elsewhere."""
    method = os.environ.get("LABUTILS_START_METHOD", "template" if sys.platform == "linux" else "spawn")
    if method not in ("template", "spawn"):
        raise ValueError(f"LABUTILS_START_METHOD must be 'template' or 'spawn', not {method!r}")
    return method


#: Environment variable: "0" keeps ``import labutils`` in IPython from starting the rank template
#: early (a kernel that never launches then holds no torch-importing process). Unset: it starts.
PRESTART_ENV = "LABUTILS_PRESTART"


def prestart() -> None:
    """Start the rank template now and return at once: it imports torch in the background, so a
    first launch made meanwhile or later finds it ready. Nothing when one exists, when ranks start
    as fresh interpreters or ``$LABUTILS_PRESTART`` is "0"; a template that cannot start is left
    for the first launch to report."""
    global _starter
    with _starter_lock:
        if _starter is not None or start_method() != "template" or os.environ.get(PRESTART_ENV) == "0":
            return
        try:
            _starter = TemplateStarter()
        except (OSError, ValueError):  # a wrapper that is missing or malformed: the launch says so
            pass


def _unfit(starter) -> bool:
    """Whether the live ``starter`` cannot serve a launch asked for now: its template would fork with
    an old sys.path or outside the wrapper now asked for, or it was started early (``prestart``) and
    never used while ``$LABUTILS_START_METHOD`` now asks for fresh interpreters."""
    unused_template = isinstance(starter, TemplateStarter) and not starter.used
    return starter.alive() and (starter.stale() or (unused_template and start_method() != "template"))


def get_starter():
    """The process-wide starter, created on first use (and again if its template died, or
    was started with a ``sys.path`` the caller has since changed: it is stopped first)."""
    global _starter
    with _starter_lock:
        if _starter is not None and _unfit(_starter):
            _starter.close()
            _starter = None
        if _starter is None or not _starter.alive():
            _starter = TemplateStarter() if start_method() == "template" else SpawnStarter()
        _starter.wait_ready()
        return _starter


def current_starter():
    """The process-wide starter if one exists (without creating one)."""
    return _starter


def close_starter() -> None:
    """Stop the starter (and with it any rank it still has)."""
    global _starter
    with _starter_lock:
        if _starter is not None:
            _starter.close()
            _starter = None
