"""Run a function on N fresh ranks, each with arguments of its own.

``labutils.launch`` sends every rank the same arguments. The judge must not: a submission's
rank may hold only what that rank holds in the parallelism under test (its weight shard, its
microbatches), so each rank's call carries that rank's arguments alone, over that rank's own
control socket (``labutils.Pool.run_each``).
"""
from __future__ import annotations

import os
import signal

from labutils.ranks._starters import RANK_WRAPPER_ENV
from labutils.ranks.call_args import validate_world_size
from labutils.ranks.errors import RankDiedError, TemplateExitedError
from labutils.ranks.pool import Pool

from grading.judge.loopback import LoopbackMeter


#: What a launch on NCCL does not check (the judge's log says it at every launch).
NOT_CHECKED_ON_NCCL = ("on NCCL the ranks' traffic is not checked: NCCL moves payloads over NVLink/PCIe, not the "
                       "sandbox's loopback, whose byte count then means nothing (a channel beside the process group "
                       "goes unseen; grade on gloo, the default, for the complete check)")
#: The memory cgroup the judge's sandboxed ranks run in (``server.sandbox_ranks`` sets it), or None.
memory_cgroup = None


class RankResults(list):
    """Each rank's result of one launch, in rank order; ``loopback_bytes``: what the ranks sent each
    other over their sandbox's loopback during the call (``loopback``), None where not measured."""

    loopback_bytes: int | None = None


def launch_each(fn, args_of_rank: list, *, backend: str = "gloo", timeout: float) -> RankResults:
    """Like ``labutils.launch(fn, len(args_of_rank), ...)``, rank r calling ``fn(*args_of_rank[r])``;
    the bytes the call sent over the ranks' loopback are counted from outside (the process group's
    start, the same in every launch, is not), on gloo only (``NOT_CHECKED_ON_NCCL``)."""
    __tracebackhide__ = True
    world_size = validate_world_size(len(args_of_rank))
    with Pool(world_size, backend=backend, timeout=timeout) as pool:
        meter = LoopbackMeter.around(pool.starter_pid()) if pool.backend == "gloo" else None
        if pool.backend != "gloo":  # the judge's log: course grade's --log
            print(f"judge: {NOT_CHECKED_ON_NCCL}", flush=True)
        elif meter is None and os.environ.get(RANK_WRAPPER_ENV):
            print("judge: the sandboxed ranks' network traffic cannot be counted (no process of theirs in a "
                  "network namespace of its own is readable here): graded without the traffic check", flush=True)
        before = meter.read() if meter else None
        results = RankResults(_run_each(pool, fn, args_of_rank, timeout))
        if meter:
            results.loopback_bytes = meter.read() - before
        return results


def _run_each(pool: Pool, fn, args_of_rank: list, timeout: float) -> list:
    """``pool.run_each``; a rank that the out-of-memory killer of ``memory_cgroup`` stopped is said to be
    (``RankDiedError``), where it would only show as SIGKILL, and so is the rank template when the
    killer chose it (all the ranks then end with it)."""
    __tracebackhide__ = True
    kills = memory_cgroup.out_of_memory_kills() if memory_cgroup else 0
    try:
        return pool.run_each(fn, args_of_rank, timeout)
    except (RankDiedError, TemplateExitedError) as exc:
        if memory_cgroup is None or memory_cgroup.out_of_memory_kills() == kills:
            raise
        cap = f"the memory cap ({memory_cgroup.limit_bytes / 2**30:.1f} GiB for the submission's processes together)"
        if isinstance(exc, TemplateExitedError):  # the killer chose the process that forks the ranks
            raise RankDiedError(f"the ranks were stopped at {cap}, with the process that starts them: they used more "
                                "memory than that", 0, None, signal.SIGKILL) from None
        raise RankDiedError(f"rank {exc.rank} was stopped at {cap}: it used more memory than that",
                            exc.rank, exc.exitcode, exc.signal) from None
