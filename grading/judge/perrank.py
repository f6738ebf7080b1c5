"""Run a function on N fresh ranks, each with arguments of its own.

``labutils.launch`` sends every rank the same arguments. The judge must not: a submission's
rank may hold only what that rank holds in the parallelism under test (its weight shard, its
microbatches), so each rank's ``RunCall`` carries that rank's arguments alone, over that
rank's own control socket. This is ``labutils.Pool``'s call, sent once per rank.
"""
from __future__ import annotations

import time

from labutils import _wire
from labutils._replies import StragglerNotice, collect
from labutils.call_args import pickle_call, validate_timeout, validate_world_size
from labutils.messages import Done, RunCall
from labutils.pool import Pool


class _PerRankPool(Pool):
    """A ``labutils.Pool`` whose ``run_each`` gives every rank its own arguments."""

    def run_each(self, fn, args_of_rank: list, timeout: float) -> list:
        """``fn(*args_of_rank[r])`` on rank r; the results in rank order (cloudpickled on the ranks)."""
        __tracebackhide__ = True
        payloads = [pickle_call(fn, tuple(args), {}) for args in args_of_rank]
        deadline_s = validate_timeout(timeout)
        self.start()
        call_id, context = next(self._calls), self._context_update()
        for link, payload in zip(self._links.ranks, payloads):
            try:
                _wire.send(link.ctrl, RunCall(call_id, payload, context))
            except OSError:
                pass  # this rank has just died: collect reports it
        replies = collect(self._links, (Done,), time.monotonic() + deadline_s, "running", call_id=call_id,
                          notice=StragglerNotice(self._links, deadline_s))
        import cloudpickle  # through the module: the judge may have restricted its loads

        return [cloudpickle.loads(replies[r].result) for r in range(self.world_size)]


def launch_each(fn, args_of_rank: list, *, backend: str = "auto", timeout: float) -> list:
    """Like ``labutils.launch(fn, len(args_of_rank), ...)``, rank r calling ``fn(*args_of_rank[r])``."""
    __tracebackhide__ = True
    world_size = validate_world_size(len(args_of_rank))
    with _PerRankPool(world_size, backend=backend, timeout=timeout) as pool:
        return pool.run_each(fn, args_of_rank, timeout)
