"""Waiting for the ranks' replies to one request, and turning a failure into one exception.

``collect`` waits for one reply of the asked types from each rank while relaying output.
What can go wrong on the ranks is raised here, quickly and by name:

- a rank that raised: its exception (the first to arrive; see ``fail_after_errors``);
- a rank that died: ``RankDiedError`` with its exit code or signal;
- ranks still busy at the deadline: ``RankTimeoutError`` with the stack where each is stuck;
- an interrupt of the caller: every rank is killed at once, then ``KeyboardInterrupt``.

In every case the ranks that may be mid-collective are killed (the pool starts fresh ones
on its next call).
"""
from __future__ import annotations

import time

from labutils.ranks import strict
from labutils.ranks._ranklinks import RankLinks
from labutils.ranks._render import (collective_in, describe_status, hide_launcher_frames, ranks_phrase,
                              rebuild_exception, short_type_name, shorten, stderr_explanation)
from labutils.ranks.errors import RankDiedError, RankTimeoutError
from labutils.ranks._messages import Failed

#: what torch says when a collective gets a CPU tensor on an NCCL-only process group
CPU_TENSOR_ON_NCCL = "No backend type associated with device type cpu"
CPU_TENSOR_HINT = ("[labutils] these ranks run NCCL, which takes only CUDA tensors: create them on the rank's "
                   "device (torch.ones(1, device=labutils.rank.device()); `device` in a %%distributed cell), "
                   "or launch with backend='gloo' to keep them on the CPU")
#: Seconds to wait for the other ranks' answers after one rank has failed.
FAILURE_GRACE_S = 0.5
#: Seconds after the first rank finished a call at which the ranks still busy are looked at
#: (their stacks, as for a timeout): if they wait in a collective, the caller is told at once.
STRAGGLER_CHECKS_S = (0.5, 2.0, 8.0)


class StragglerNotice:
    """Says in the cell's output, seconds after a rank finished a call, which ranks are still
    inside a collective (the finished one never joined it) and how long they will wait.

    Nothing happens while every rank is busy or every rank answers: the fast path pays nothing.
    """

    def __init__(self, links: RankLinks, waiting_up_to_s: float):
        self.links, self.waiting_up_to_s = links, waiting_up_to_s
        self.first_finish_at: float | None = None
        self.due_at: float | None = None
        self.checks_done = 0
        self.strict = strict.enabled()
        self.mismatch: str | None = None  # strict mode: why the call is a collective mismatch
        self.told = False

    def update(self, waiting: set) -> None:
        """Called after each batch of replies; samples the stacks of ``waiting`` when due.

        Under ``LABUTILS_STRICT_COLLECTIVES``, when every rank still running is inside a
        collective :data:`labutils.ranks.strict.MISMATCH_AFTER_S` after another finished, ``mismatch``
        is set (a rank still computing might yet join them, so that is not called one)."""
        if not waiting or len(waiting) == self.links.world_size or self.checks_done == len(STRAGGLER_CHECKS_S):
            return
        now = time.monotonic()
        if self.first_finish_at is None:
            self.first_finish_at = now
            self.due_at = now + STRAGGLER_CHECKS_S[0]
        if now < self.due_at:
            return
        self.checks_done += 1
        stacks = self.links.stacks(sorted(waiting))
        inside = {r: op for r in sorted(waiting)
                  if (op := strict.checked_call_in(stacks.get(r, "")) or collective_in(stacks.get(r, "")))}
        finished = set(range(self.links.world_size)) - waiting
        stuck = len(inside) == len(waiting)  # nobody left computing who could still join them
        if inside and stuck and self.strict and now - self.first_finish_at >= strict.MISMATCH_AFTER_S:
            self.mismatch = mismatch_line(finished, inside)
        elif inside and not self.told:
            self.told = True
            print(f"labutils: {straggler_line(finished, inside, self.waiting_up_to_s)}", flush=True)
        if inside and not self.strict:
            self.checks_done = len(STRAGGLER_CHECKS_S)
        if self.checks_done < len(STRAGGLER_CHECKS_S):
            self.due_at = self.first_finish_at + STRAGGLER_CHECKS_S[self.checks_done]
        else:
            self.due_at = None


def mismatch_line(finished, inside: dict[int, str]) -> str:
    """"rank 1 returned without calling all_reduce, which rank 0 is still inside: ..."."""
    ops = sorted(set(inside.values()))
    return (f"{ranks_phrase(finished)} returned without calling {' / '.join(ops)}, which "
            f"{ranks_phrase(sorted(inside))} {'is' if len(inside) == 1 else 'are'} still inside "
            f"{strict.MISMATCH_AFTER_S:g} s later: the ranks issued different collectives (NCCL would hang here). "
            f"All ranks were stopped ({strict.ENV} is on); fresh ranks start on the next call.")


def straggler_line(finished, inside: dict[int, str], waiting_up_to_s: float) -> str:
    """"rank 1 finished; rank 0 is still in all_reduce (waiting up to 120 s: ...)"."""
    by_op: dict[str, list[int]] = {}
    for rank, op in sorted(inside.items()):
        by_op.setdefault(op, []).append(rank)
    where = ", ".join(f"{ranks_phrase(rs)} {'is' if len(rs) == 1 else 'are'} still in {op}"
                      for op, rs in by_op.items())
    return (f"{ranks_phrase(finished)} finished; {where} (waiting up to {waiting_up_to_s:g} s: "
            "pass timeout= (or %%distributed --timeout) or set LABUTILS_TIMEOUT to change it)")


def collect(links: RankLinks, kinds: tuple, deadline: float, doing: str, call_id=None, ranks=None,
            notice: StragglerNotice | None = None, retire_on_error: bool = False) -> dict:
    """Wait for one message of a type in ``kinds`` from each rank in ``ranks`` (all by default),
    of call ``call_id`` when given; relay output meanwhile. Return {rank: message}.

    ``deadline`` is a ``time.monotonic()`` time; ``doing`` names the phase in error messages
    ("running", "starting"); ``notice`` tells about ranks left in a collective;
    ``retire_on_error`` (NCCL): any rank's error retires every rank, even when all replied
    (see :func:`fail_after_errors`). Raises as the module docstring says.
    """
    __tracebackhide__ = True
    waiting = set(range(links.world_size) if ranks is None else ranks)
    replies: dict[int, tuple] = {}
    errors: list[tuple[int, Failed]] = []  # in order of arrival

    def take(rank: int, message) -> bool:
        if rank not in waiting:
            return False
        if type(message) is Failed and (call_id is None or message.call_id in (call_id, None)):
            errors.append((rank, message))
        elif type(message) in kinds and (call_id is None or message.call_id == call_id):
            replies[rank] = message
        else:
            return False
        waiting.discard(rank)
        return True

    for r in links.ranks:
        r.pending = [m for m in r.pending if not take(r.rank, m)]
    try:
        _wait(links, waiting, deadline, take, lambda: bool(errors), notice)
        links.drain_output()
        if notice is not None and notice.mismatch and not errors:
            links.kill()
            raise hide_launcher_frames(strict.CollectiveMismatchError(notice.mismatch))
        # A death comes first: the errors of the other ranks are usually its consequence.
        dead = links.dead_ranks(set(range(links.world_size)) - set(replies))
        if dead:
            fail_dead(links, dead, errors, doing)
        if errors:
            fail_after_errors(links, errors, waiting, retire_on_error)
        if waiting:
            fail_timeout(links, sorted(waiting), doing, sorted(replies))
    except KeyboardInterrupt:  # also while reading stacks or killing: never leave ranks running
        stop_on_interrupt(links)
    return replies


def _wait(links: RankLinks, waiting: set, deadline: float, take, failed, notice=None) -> None:
    """Read messages (``take`` them, else keep them pending) until nobody is ``waiting``,
    the deadline passes, or ``FAILURE_GRACE_S`` after the first failure or death; let
    ``notice`` look at the ranks still busy once others have finished."""
    first_failure_at = None
    while waiting:
        now = time.monotonic()
        if first_failure_at is None and failed():
            first_failure_at = now
        if first_failure_at is not None and now - first_failure_at > FAILURE_GRACE_S:
            break
        if now >= deadline:
            break
        limit = deadline - now
        if first_failure_at is not None:
            limit = min(limit, FAILURE_GRACE_S - (now - first_failure_at))
        elif notice is not None and notice.due_at is not None:
            limit = min(limit, notice.due_at - now)
        for key, _ in links.selector.select(max(0.0, limit)):
            for rank, message in links.handle_event(key, waiting):
                if not take(rank, message):
                    links.ranks[rank].pending.append(message)
        if first_failure_at is None and failed():
            first_failure_at = time.monotonic()
        if first_failure_at is None and links.dead_ranks(waiting):
            first_failure_at = time.monotonic()  # let the other ranks' news arrive too
        if first_failure_at is None and notice is not None:
            notice.update(waiting)
            if notice.mismatch:
                break


def stop_on_interrupt(links: RankLinks):
    """Ctrl-C: kill every rank at once, relay what they printed, say what happened."""
    __tracebackhide__ = True
    if links.starter is not None:
        links.starter.kill([r.pid for r in links.ranks if r.pid])  # first: a second Ctrl-C cannot skip it
    links.drain_output()
    links.kill()
    raise KeyboardInterrupt(f"labutils stopped all {links.world_size} ranks; "
                            "the pool starts fresh ranks on its next call") from None


def fail_dead(links: RankLinks, dead: list[int], errors, doing: str) -> None:
    """Raise RankDiedError for the first of ``dead``, naming the others and the first error."""
    __tracebackhide__ = True
    rank = dead[0]
    exitcode, sig = links.exit_status(rank)
    links.await_output_end(dead)
    links.drain_output()
    message = f"rank {rank} died while {doing}: {describe_status(exitcode, sig)}"
    if len(dead) > 1:
        message += f"; {ranks_phrase(dead[1:])} died too"
    explanation = stderr_explanation(links.ranks[rank].stderr_tail)
    if explanation:
        message += ". Its last words on stderr:\n    " + "\n    ".join(explanation) + "\n"
    if errors:
        first_rank, first = min(errors, key=lambda e: e[0])
        message += (f"{'Then' if explanation else '; then'} rank {first_rank} raised "
                    f"{short_type_name(first.type_name).rsplit('.', 1)[-1]}: {shorten(first.message)}")
    links.kill()
    raise hide_launcher_frames(RankDiedError(
        message.rstrip("\n") + ".\nAll ranks were stopped; fresh ranks start on the next call.", rank, exitcode, sig))


def fail_after_errors(links: RankLinks, errors: list[tuple[int, Failed]], still_running,
                      retire: bool = False) -> None:
    """Raise the first error to arrive (the cause; later ones are often its consequence);
    of ranks that raised that same error, name the lowest. Others are listed in notes.

    The ranks are stopped when some are still running or have ended, and always when
    ``retire`` (NCCL): there a rank can raise with a collective it issued still queued on its
    GPU stream, unmatched, and that collective would pair with the next call's first one.
    On gloo a collective blocks until matched, so ranks that all replied are kept."""
    __tracebackhide__ = True
    same_as_first = [e for e in errors if e[1].same_error(errors[0][1])]
    rank, failed = min(same_as_first, key=lambda e: e[0])
    if retire or still_running or any(links.exit_status(r) is not None for r in range(len(links.ranks))):
        links.kill()  # some ranks may be stuck in a collective the failed rank never joined
        restarted = True
    else:
        restarted = failed.call_id is None  # failed while initialising
        if restarted:
            links.kill()
    exc = rebuild_exception(rank, links.world_size, failed)
    same = sorted(r for r, _ in same_as_first if r != rank)
    if hasattr(exc, "add_note"):
        if same:
            who = f"rank{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}"
            exc.add_note(f"[labutils] {who} also raised this error")
        for other, m in sorted((e for e in errors if not e[1].same_error(failed)), key=lambda e: e[0]):
            exc.add_note(f"[labutils] rank {other} then raised {short_type_name(m.type_name)}: {shorten(m.message)}")
        if restarted:
            exc.add_note("[labutils] the other ranks were stopped; the pool starts fresh ranks on its next call")
        if CPU_TENSOR_ON_NCCL in failed.message:
            exc.add_note(CPU_TENSOR_HINT)
    raise hide_launcher_frames(exc)  # the rank's traceback travels as exc.__cause__ (a RemoteTraceback), shown above this frame


def fail_timeout(links: RankLinks, ranks: list[int], doing: str, finished=()) -> None:
    """Raise RankTimeoutError naming ``ranks`` (and the ``finished`` ones) with the stack
    where each was stuck."""
    __tracebackhide__ = True
    stacks = links.stacks(ranks)
    links.kill()
    had_finished = f" ({ranks_phrase(finished)} had finished)" if finished else ""
    lines = [
        f"{ranks_phrase(ranks)} did not finish {doing} before the deadline{had_finished}; "
        "all ranks were stopped (fresh ranks start on the next call)."
    ]
    for r in ranks:
        lines.append(f"--- rank {r} was here (most recent call first):")
        lines.append(stacks.get(r) or "    (no stack could be read)")
    raise hide_launcher_frames(RankTimeoutError("\n".join(lines), ranks, stacks))
