"""A warm pool of ranks: processes with torch.distributed initialised, kept between calls.

    with labutils.Pool(4) as pool:          # gloo on CPU, or NCCL with one GPU per rank
        sums = pool.run(fn, x)               # fn(x) on every rank, results in rank order

What goes wrong on a rank comes back to the caller quickly and by name:

- an exception on rank k is re-raised here (its original type when it can be rebuilt,
  otherwise ``RankError``), with rank k's traceback as its ``__cause__``;
- a rank that dies raises ``RankDiedError`` with its exit code or signal;
- ranks still busy at the deadline raise ``RankTimeoutError`` (a ``TimeoutError``) that
  names them and shows the Python stack where each was stuck; well before that, when some
  ranks have returned while others wait inside a collective, one line says which ranks wait
  in which collective and how to shorten the wait;
- an interrupt (Ctrl-C, Kernel > Interrupt) kills every rank at once.

After a failure that leaves ranks in an unknown state (under NCCL, any failure: a rank may
have an unmatched collective still queued on its GPU; or when a rank or the template
ended between calls, or the caller's ``sys.path`` changed) the pool kills them and starts
fresh ranks on its next call, saying why in one line. Ranks
print live; each line is prefixed ``[rank k]``. They see the caller's environment
variables as they are when the ranks start (so ``NCCL_DEBUG`` set in a cell applies).

The pool is this module (lifecycle and calls); ``labutils.ranks._ranklinks`` holds the ranks'
processes and sockets, ``labutils.ranks._replies`` waits for their answers and raises their
failures, ``labutils.ranks._render`` shows those failures, ``labutils.ranks._messages`` names what
travels between them.
"""
from __future__ import annotations

import atexit
import itertools
import linecache
import os
import secrets
import socket
import sys
import time
import weakref

from labutils.ranks import _launch_folder, _starters, _wire
from labutils.ranks._ranklinks import RankLink, RankLinks
from labutils.ranks._render import describe_status
from labutils.ranks._replies import StragglerNotice, collect, fail_dead, stop_on_interrupt
from labutils.devices.backend import choose_backend
from labutils.devices.gpu_exclusive import check_ranks_can_own
from labutils.ranks.call_args import DEFAULT_TIMEOUT_S, pickle_call, validate_timeout, validate_world_size
from labutils.ranks._messages import Done, ExecCell, Exit, Ready, RunCall, Started, StorePort

__all__ = ["Pool", "shutdown", "DEFAULT_TIMEOUT_S"]

#: Seconds ranks have to connect and initialise the process group.
START_TIMEOUT_S = 60.0

_live_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()
_announced: set[str] = set()


def _threads_per_rank(world_size: int) -> int:
    """Cores this process may use, shared evenly among the ranks (at least one each)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


def _in_memory_sources() -> dict:
    """linecache entries with no file behind them (notebook cells), so rank tracebacks show code."""
    return {
        name: entry
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None or (name.startswith("/tmp/ipykernel_") and not os.path.exists(name))
    }


class Pool:
    """``world_size`` ranks kept alive with their process group; ``run`` costs milliseconds.

    ``backend``: "auto" (NCCL with one GPU per rank if there are enough GPUs, else gloo on
    CPU), "gloo" or "nccl". ``timeout``: default seconds per call (``LABUTILS_TIMEOUT``,
    120 s unless set). Ranks start on first use; ``shutdown()`` (or leaving a ``with``
    block) stops them.
    """

    def __init__(self, world_size: int, backend: str = "auto", timeout: float | None = None):
        self.world_size = validate_world_size(world_size)
        choice = choose_backend(backend, self.world_size)
        self.backend, self.device_type = choice.backend, choice.device_type
        self.timeout = validate_timeout(timeout)
        if backend == "auto" and choice.backend == "gloo" and choice.reason not in _announced:
            _announced.add(choice.reason)
            print(f"labutils: {choice.reason}")
        self._links = RankLinks(self.world_size)
        self._calls = itertools.count()
        self._sent_context: dict = {}
        self._cells = itertools.count(1)
        self.restarts = 0
        self._started_sys_path: list[str] = []  # the caller's sys.path when the ranks started
        _live_pools.add(self)

    # ----- lifecycle -------------------------------------------------------------
    @property
    def started(self) -> bool:
        return bool(self._links.ranks)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        state = "running" if self.started else "stopped"
        return f"<labutils.Pool world_size={self.world_size} backend={self.backend} {state}>"

    def _unhealthy_reason(self) -> str | None:
        """Why the running ranks cannot take a call (template gone, a rank gone), or None."""
        links = self._links
        if links.selector is None:
            return "the ranks were stopped half-way"  # an interrupt cut a stop short
        if sys.path != self._started_sys_path:
            return "sys.path changed since the ranks started (they import with the new one)"
        links.take_news()
        if links.starter is not _starters.current_starter() or not links.starter.alive():
            return "the rank template had exited"
        for r in links.ranks:
            if r.ctrl_closed or links.starter.exit_status(r.pid) is not None:
                links.await_exit_report(r)
                status = links.starter.exit_status(r.pid)
                return f"rank {r.rank} had ended" + (f" ({describe_status(*status)})" if status else "")
        return None

    def start(self) -> None:
        """Start the ranks and initialise their process group (no-op when running and healthy)."""
        reason = self._unhealthy_reason() if self.started else None
        if reason:
            print(f"labutils: {reason}; starting {self.world_size} fresh ranks")
            self._links.kill()
            self.restarts += 1
        if self.started:
            return
        __tracebackhide__ = True
        if self.backend == "nccl":
            check_ranks_can_own(self.world_size)  # an exclusive GPU this kernel holds: say so, start nothing
        links = self._links
        links.starter = _starters.get_starter()
        _launch_folder.sweep_abandoned()
        links.folder = _launch_folder.LaunchFolder()
        listen_path = links.folder.socket_path
        links.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        links.listener.bind(listen_path)
        links.listener.listen(3 * self.world_size)
        token = secrets.token_hex(8)
        specs = self._rank_specs(listen_path, token)
        links.ranks = [RankLink(r) for r in range(self.world_size)]
        self._sent_context = {}
        self._started_sys_path = list(sys.path)  # the ranks' PYTHONPATH (see child_environment)
        try:
            for r, pid in zip(links.ranks, links.starter.spawn(specs)):
                r.pid = pid
            links.connect(token, START_TIMEOUT_S, self._fail_if_a_rank_died)
            self._initialise_group()
        except BaseException:
            links.kill()
            raise

    def _rank_specs(self, listen_path: str, token: str) -> list[dict]:
        """What each rank is told when it starts (see ``labutils.ranks._worker.serve``)."""
        threads = _threads_per_rank(self.world_size)
        environ = _starters.child_environment()  # as it is now, not when the template started
        return [
            {
                "rank": r,
                "world_size": self.world_size,
                "local_rank": r,
                "backend": self.backend,
                "device_type": self.device_type,
                "listen_path": listen_path,
                "token": token,
                "num_threads": threads,
                "stack_file": self._links.folder.stack_file(r),
                "pg_timeout_s": max(1800.0, self.timeout + 60.0),
                "environ": environ,
            }
            for r in range(self.world_size)
        ]

    def _fail_if_a_rank_died(self) -> None:
        """While the ranks connect: a rank that has already ended fails the start."""
        __tracebackhide__ = True
        dead = self._links.dead_ranks(range(self.world_size))
        if dead:
            fail_dead(self._links, dead, [], "starting")

    def _initialise_group(self) -> None:
        """Rank 0's store port goes to the others; every rank joins the process group."""
        links = self._links
        started = collect(links, (Started,), time.monotonic() + START_TIMEOUT_S, "starting")
        for r in links.ranks:
            r.main_thread = started[r.rank].main_thread
        replies = collect(links, (StorePort,), time.monotonic() + START_TIMEOUT_S, "starting", ranks=[0])
        for r in links.ranks[1:]:
            _wire.send(r.ctrl, replies[0])
        collect(links, (Ready,), time.monotonic() + START_TIMEOUT_S, "initialising the process group")

    def shutdown(self) -> None:
        """Stop the ranks (politely, then by force after 2 s). The pool can start again later."""
        links = self._links
        if not links.ranks:
            return
        for r in links.ranks:
            try:
                _wire.send(r.ctrl, Exit())
            except (OSError, AttributeError):
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not links.all_exited():
            if links.selector is None:
                break
            for key, _ in links.selector.select(max(0.0, deadline - time.monotonic())):
                links.handle_event(key, {})
        links.drain_output()
        links.kill()

    def pids(self) -> list[int]:
        """Process ids of the running ranks (empty when stopped)."""
        return [r.pid for r in self._links.ranks]

    def starter_pid(self) -> int | None:
        """Process id, as this process sees it, of what the running ranks were forked from: the rank
        template, or the command that wraps it (``$LABUTILS_RANK_WRAPPER``); None when stopped or when
        each rank is a fresh process (``LABUTILS_START_METHOD=spawn``)."""
        starter = self._links.starter if self._links.ranks else None
        return getattr(starter, "pid", None)

    # ----- calls -----------------------------------------------------------------
    def run(self, fn, *args, timeout: float | None = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order.

        Tensors in the results come back on the CPU. ``timeout`` (s) overrides the pool's.
        """
        __tracebackhide__ = True
        payload = pickle_call(fn, args, kwargs)
        deadline_s = validate_timeout(timeout if timeout is not None else self.timeout)
        self.start()
        replies = self._call(RunCall(next(self._calls), payload, self._context_update()), deadline_s)
        import cloudpickle

        return [cloudpickle.loads(replies[r].result) for r in range(self.world_size)]

    def run_each(self, fn, args_of_rank: list, timeout: float | None = None) -> list:
        """Run ``fn(*args_of_rank[r])`` on rank r, each rank receiving only its own arguments (a
        shard, its microbatches); return the results in rank order. ``timeout`` (s) as in ``run``."""
        __tracebackhide__ = True
        if len(args_of_rank) != self.world_size:
            raise ValueError(f"run_each needs one argument tuple per rank: {len(args_of_rank)} for "
                             f"{self.world_size} ranks")
        payloads = [pickle_call(fn, tuple(args), {}) for args in args_of_rank]
        deadline_s = validate_timeout(timeout if timeout is not None else self.timeout)
        self.start()
        call_id, context = next(self._calls), self._context_update()
        replies = self._call([RunCall(call_id, payload, context) for payload in payloads], deadline_s)
        import cloudpickle

        return [cloudpickle.loads(replies[r].result) for r in range(self.world_size)]

    def exec_cell(self, source: str, timeout: float | None = None) -> None:
        """Run a cell's source on every rank, each in its own persistent namespace."""
        __tracebackhide__ = True
        filename = f"<distributed cell {next(self._cells)}>"
        compile(source, filename, "exec")  # a syntax error fails here, before the ranks see it
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for stuck stacks
        deadline_s = validate_timeout(timeout if timeout is not None else self.timeout)
        self.start()
        self._call(ExecCell(next(self._calls), source, filename, self._context_update()), deadline_s)

    def _call(self, request, timeout_s: float) -> dict:
        """Send ``request`` to every rank (or, a list, ``request[r]`` to rank r); wait ``timeout_s``
        for every rank's ``Done``."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout_s
        requests = request if isinstance(request, list) else [request] * len(self._links.ranks)
        try:
            for r, rank_request in zip(self._links.ranks, requests):
                try:
                    _wire.send(r.ctrl, rank_request)
                except OSError:
                    pass  # this rank has just died: collect reports it
        except KeyboardInterrupt:
            stop_on_interrupt(self._links)  # some ranks have the request, others not: none may go on
        return collect(self._links, (Done,), deadline, "running", call_id=requests[0].call_id,
                       notice=StragglerNotice(self._links, timeout_s), retire_on_error=self.backend == "nccl")

    def _context_update(self) -> dict:
        """What changed in the caller since the last call: cwd, cell sources."""
        context = {}
        cwd = os.getcwd()
        if self._sent_context.get("cwd") != cwd:
            context["cwd"] = self._sent_context["cwd"] = cwd
        sent = self._sent_context.setdefault("sources", {})
        sources = {k: v for k, v in _in_memory_sources().items() if sent.get(k) != v[0]}
        if sources:
            context["sources"] = sources
            sent.update({k: v[0] for k, v in sources.items()})
        return context


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


atexit.register(_at_exit)
