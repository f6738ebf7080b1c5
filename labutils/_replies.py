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

from labutils._ranklinks import RankLinks
from labutils._render import describe_status, rebuild_exception, short_type_name
from labutils.errors import RankDiedError, RankTimeoutError
from labutils.messages import Failed

#: Seconds to wait for the other ranks' answers after one rank has failed.
FAILURE_GRACE_S = 0.5


def collect(links: RankLinks, kinds: tuple, deadline: float, doing: str, call_id=None, ranks=None) -> dict:
    """Wait for one message of a type in ``kinds`` from each rank in ``ranks`` (all by default),
    of call ``call_id`` when given; relay output meanwhile. Return {rank: message}.

    ``deadline`` is a ``time.monotonic()`` time; ``doing`` names the phase in error messages
    ("running", "starting"). Raises as the module docstring says.
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
        _wait(links, waiting, deadline, take, lambda: bool(errors))
        links.drain_output()
        # A death comes first: the errors of the other ranks are usually its consequence.
        dead = links.dead_ranks(set(range(links.world_size)) - set(replies))
        if dead:
            fail_dead(links, dead, errors, doing)
        if errors:
            fail_after_errors(links, errors, waiting)
        if waiting:
            fail_timeout(links, sorted(waiting), doing)
    except KeyboardInterrupt:  # also while reading stacks or killing: never leave ranks running
        stop_on_interrupt(links)
    return replies


def _wait(links: RankLinks, waiting: set, deadline: float, take, failed) -> None:
    """Read messages (``take`` them, else keep them pending) until nobody is ``waiting``,
    the deadline passes, or ``FAILURE_GRACE_S`` after the first failure or death."""
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
        for key, _ in links.selector.select(max(0.0, limit)):
            for rank, message in links.handle_event(key, waiting):
                if not take(rank, message):
                    links.ranks[rank].pending.append(message)
        if first_failure_at is None and failed():
            first_failure_at = time.monotonic()
        if first_failure_at is None and links.dead_ranks(waiting):
            first_failure_at = time.monotonic()  # let the other ranks' news arrive too


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
    message = f"rank {rank} died while {doing}: {describe_status(exitcode, sig)}"
    if len(dead) > 1:
        message += f"; rank{'s' if len(dead) > 2 else ''} {', '.join(map(str, dead[1:]))} died too"
    if errors:
        first_rank, first = min(errors, key=lambda e: e[0])
        message += f"; then rank {first_rank} raised {first.type_name.rsplit('.', 1)[-1]}: {first.message[:200]}"
    links.kill()
    raise RankDiedError(message + ". All ranks were stopped; fresh ranks start on the next call.",
                        rank, exitcode, sig)


def fail_after_errors(links: RankLinks, errors: list[tuple[int, Failed]], still_running) -> None:
    """Raise the first error to arrive (the cause; later ones are often its consequence);
    of ranks that raised that same error, name the lowest. Others are listed in notes."""
    __tracebackhide__ = True
    same_as_first = [e for e in errors if e[1].same_error(errors[0][1])]
    rank, failed = min(same_as_first, key=lambda e: e[0])
    if still_running or any(links.exit_status(r) is not None for r in range(len(links.ranks))):
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
            exc.add_note(f"[labutils] rank {other} then raised {short_type_name(m.type_name)}: {m.message[:200]}")
        if restarted:
            exc.add_note("[labutils] the other ranks were stopped; the pool starts fresh ranks on its next call")
    raise exc  # the rank's traceback travels as exc.__cause__ (a RemoteTraceback), shown above this frame


def fail_timeout(links: RankLinks, ranks: list[int], doing: str) -> None:
    """Raise RankTimeoutError naming ``ranks`` with the stack where each was stuck."""
    __tracebackhide__ = True
    stacks = links.stacks(ranks)
    links.kill()
    lines = [
        f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} did not finish "
        f"{doing} before the deadline; all ranks were stopped (fresh ranks start on the next call)."
    ]
    for r in ranks:
        lines.append(f"--- rank {r} was here (most recent call first):")
        lines.append(stacks.get(r) or "    (no stack could be read)")
    raise RankTimeoutError("\n".join(lines), ranks, stacks)
