"""Pipeline-parallel schedules as per-rank action lists, and their simulated timelines.

p = num_stages (one stage per rank), m = num_microbatches, v = num_chunks (model chunks per
rank, interleaved 1F1B only). An action is F (forward) or B (backward) of one microbatch
through one chunk. Each rank runs its list in order; :func:`simulate` starts every action
as soon as its rank is free and its inputs have arrived, and reports the timeline.

    from labutils.costmodel import schedules as ps
    timeline = ps.simulate(ps.build_schedule("1f1b", 4, 16))
    timeline.bubble_fraction()   # 3/19: idle rank-time over total rank-time
    timeline.peak_in_flight()    # [4, 3, 2, 1]: activations each rank holds at most

Rank 0 of a 1F1B schedule with p = 4, m = 6 (warm-up p-1 = 3 forwards, then one forward
one backward, then the cool-down backwards)::

    F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5

Sources: GPipe arXiv:1811.06965; 1F1B (PipeDream-Flush) and interleaved 1F1B
arXiv:2104.04473 and Megatron-LM ``pipeline_parallel/schedules.py`` (same warm-up counts
and ordering); zero-bubble arXiv:2401.10241.

Zero-bubble schedules (not built here): the backward is split into B (gradient of the
input, needed by the previous stage now) and W (gradient of the weights, needed only at
the optimizer step). Deferring the W's fills the bubbles: ZB-H1 brings the bubble to about
(p-1)/(3m) of the ideal time with 1F1B's memory, ZB-H2 to about zero with more memory
(both when T_F = T_B = T_W). PyTorch has it as ``ScheduleInterleavedZeroBubble``.

GPipe and 1F1B flush the pipeline every step: the gradients are exact, there is no
weight staleness (that belongs to asynchronous PipeDream with weight stashing).
"""
from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved_1f1b")


@dataclass(frozen=True)
class Action:
    """One step of a rank's list: ``kind`` "F" or "B" of ``microbatch`` through model ``chunk``."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __post_init__(self):
        if self.kind not in ("F", "B"):
            raise ValueError(f"Action kind must be 'F' or 'B', got {self.kind!r}")
        if self.microbatch < 0 or self.chunk < 0:
            raise ValueError(f"microbatch and chunk must be >= 0, got {self.microbatch}, {self.chunk}")

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


class Schedule(list):
    """Per-rank action lists (a plain list of lists) that also carries the schedule's ``name``."""

    def __init__(self, per_rank: list[list[Action]], name: str):
        super().__init__(per_rank)
        self.name = name


def _check_sizes(num_stages: int, num_microbatches: int, num_chunks: int) -> None:
    for name, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches),
                        ("num_chunks", num_chunks)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def build_schedule(name: str, num_stages: int, num_microbatches: int, num_chunks: int = 1) -> Schedule:
    """Per-rank action lists of schedule ``name`` in ("naive", "gpipe", "1f1b", "interleaved_1f1b").

    The result is a list (one list of :class:`Action` per rank) whose ``name`` attribute
    :func:`simulate` passes on to the :class:`Timeline`.

    * naive: one microbatch at a time through the whole pipeline, forward then backward,
      no overlap (m = 1 is the whole batch; larger m is gradient accumulation).
    * gpipe: all m forwards, then all m backwards (every microbatch's activations live).
    * 1f1b: warm-up of min(p - rank - 1, m) forwards, then alternate one forward and one
      backward, then the remaining backwards (at most p - rank microbatches in flight).
    * interleaved_1f1b: v chunks per rank, virtual stage = chunk x p + rank; microbatches
      in groups of p per chunk; warm-up (p - rank - 1) x 2 + (v - 1) x p actions (all of
      them when m = p), as Megatron-LM. Needs m a multiple of p.

    Only interleaved_1f1b takes ``num_chunks`` > 1.
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")
    _check_sizes(num_stages, num_microbatches, num_chunks)
    p, m, v = int(num_stages), int(num_microbatches), int(num_chunks)
    if name != "interleaved_1f1b" and v != 1:
        raise ValueError(f"{name} has one chunk per rank; num_chunks > 1 needs 'interleaved_1f1b'")
    if name == "naive":
        return Schedule([[Action(kind, i) for i in range(m) for kind in ("F", "B")] for _ in range(p)], name)
    if name == "gpipe":
        return Schedule([[Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)]
                         for _ in range(p)], name)
    if name == "1f1b":
        return Schedule([_one_f_one_b([Action("F", i) for i in range(m)], [Action("B", i) for i in range(m)],
                                      min(p - rank - 1, m)) for rank in range(p)], name)
    if m % p:
        raise ValueError(f"interleaved_1f1b needs num_microbatches ({m}) a multiple of num_stages ({p})")
    forwards = [Action("F", *_interleaved_slot(k, p, v, forward=True)) for k in range(m * v)]
    backwards = [Action("B", *_interleaved_slot(k, p, v, forward=False)) for k in range(m * v)]
    per_rank = []
    for rank in range(p):
        warmup = m * v if m == p else min((p - rank - 1) * 2 + (v - 1) * p, m * v)
        per_rank.append(_one_f_one_b(forwards, backwards, warmup))
    return Schedule(per_rank, name)


def _one_f_one_b(forwards: list[Action], backwards: list[Action], warmup: int) -> list[Action]:
    """``warmup`` forwards, then forward/backward pairs, then the remaining backwards."""
    steady = len(forwards) - warmup
    actions = forwards[:warmup]
    for i in range(steady):
        actions += [forwards[warmup + i], backwards[i]]
    return actions + backwards[steady:]


def _interleaved_slot(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(microbatch, chunk) of a rank's k-th forward (or backward) in the interleaved schedule.

    Megatron-LM: k runs through groups of p x v; within a group, chunk = (k mod p v) // p
    (reversed for backward) and the microbatch is group x p + k mod p.
    """
    group, in_group = divmod(k, p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - 1 - chunk
    return group * p + k % p, chunk


# --------------------------------------------------------------------------------------
# Simulation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One action as it ran: ``start`` and ``end`` in the unit of the simulated costs."""

    rank: int
    kind: str
    microbatch: int
    chunk: int
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """The outcome of :func:`simulate`: every event, and what to read off them."""

    events: list[Event]
    num_stages: int
    num_microbatches: int
    num_chunks: int
    name: str | None = None

    @property
    def makespan(self) -> float:
        """Time from the first start to the last end."""
        return max(e.end for e in self.events) - min(e.start for e in self.events)

    def busy_time(self) -> list[float]:
        """Per rank, the time spent running actions."""
        busy = [0.0] * self.num_stages
        for e in self.events:
            busy[e.rank] += e.end - e.start
        return busy

    def bubble_fraction(self) -> float:
        """Idle rank-time over total rank-time: 1 - sum(busy) / (p x makespan)."""
        return 1.0 - sum(self.busy_time()) / (self.num_stages * self.makespan)

    def peak_in_flight(self) -> list[int]:
        """Per rank, the most (microbatch, chunk) activations held at once: F done, B not yet.

        This is what sets a stage's activation memory: m for GPipe, at most p for 1F1B.
        """
        peaks = []
        for rank in range(self.num_stages):
            held = peak = 0
            for e in sorted((e for e in self.events if e.rank == rank), key=lambda e: e.start):
                held += 1 if e.kind == "F" else -1
                peak = max(peak, held)
            peaks.append(peak)
        return peaks


def simulate(
    schedule: list[list[Action]],
    t_forward: float = 1.0,
    t_backward: float = 2.0,
    t_transfer: float = 0.0,
    name: str | None = None,
) -> Timeline:
    """Run ``schedule`` (per-rank action lists) in simulated time.

    ``t_forward`` / ``t_backward``: time of one F / B action (one microbatch through one
    chunk; for interleaved schedules pass the stage's time / v to compare fairly).
    ``t_transfer``: time to send an activation or a gradient to another rank.
    ``name`` labels the timeline; by default the name :func:`build_schedule` gave the schedule.
    F of a microbatch on virtual stage k starts after its F on stage k-1 has ended and been
    transferred; its B after its B on stage k+1 (after its own F on the last stage). Each
    rank runs its list in order, one action at a time.

    ValueError if a rank's list is not exactly one F and one B per (microbatch, chunk), or
    if the schedule deadlocks (the message names the stuck ranks and what they wait for).
    """
    for label, value in (("t_forward", t_forward), ("t_backward", t_backward), ("t_transfer", t_transfer)):
        if not value >= 0:
            raise ValueError(f"{label} must be >= 0, got {value!r}")
    p = len(schedule)
    if p == 0:
        raise ValueError("schedule is empty: give one action list per rank")
    m, v = _check_complete(schedule)
    if name is None:
        name = getattr(schedule, "name", None)
    events = _play(schedule, v, {"F": t_forward, "B": t_backward}, t_transfer)
    return Timeline(events, p, m, v, name)


def _upstream(action: Action, rank: int, p: int, v: int):
    """(kind, microbatch, virtual stage) ``action`` on ``rank`` waits for, or None.

    Virtual stage ``chunk * p + rank``: F waits for F on the stage before, B for B on the
    stage after (on the last stage, for its own F).
    """
    virtual = action.chunk * p + rank
    if action.kind == "F":
        return None if virtual == 0 else ("F", action.microbatch, virtual - 1)
    if virtual == p * v - 1:
        return ("F", action.microbatch, virtual)
    return ("B", action.microbatch, virtual + 1)


def _play(schedule: list[list[Action]], v: int, duration: dict[str, float], t_transfer: float) -> list[Event]:
    """Every action's start and end: each rank runs its list in order, an action as soon as its
    rank is free and its input has arrived (``t_transfer`` later when it comes from another rank)."""
    p = len(schedule)
    done: dict[tuple[str, int, int], float] = {}  # (kind, microbatch, virtual stage) -> end time
    next_index = [0] * p
    free_at = [0.0] * p
    events: list[Event] = []
    remaining = sum(len(actions) for actions in schedule)
    while remaining:
        progressed = False
        for rank in range(p):
            while next_index[rank] < len(schedule[rank]):
                action = schedule[rank][next_index[rank]]
                dep = _upstream(action, rank, p, v)
                if dep is not None and dep not in done:
                    break
                ready = 0.0
                if dep is not None:
                    ready = done[dep] + (t_transfer if dep[2] % p != rank else 0.0)
                start = max(free_at[rank], ready)
                end = start + duration[action.kind]
                done[(action.kind, action.microbatch, action.chunk * p + rank)] = end
                events.append(Event(rank, action.kind, action.microbatch, action.chunk, start, end))
                free_at[rank] = end
                next_index[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [f"rank {r} at {schedule[r][next_index[r]]} "
                     f"(waits for {_describe(_upstream(schedule[r][next_index[r]], r, p, v), p)})"
                     for r in range(p) if next_index[r] < len(schedule[r])]
            raise ValueError("schedule deadlocks: " + "; ".join(stuck))
    return events


def _describe(dep, p: int) -> str:
    kind, microbatch, virtual = dep
    chunk, rank = divmod(virtual, p)
    return f"{kind}{microbatch}" + (f".{chunk}" if chunk else "") + f" on rank {rank}"


def _check_complete(schedule: list[list[Action]]) -> tuple[int, int]:
    """(m, v) read off the schedule; ValueError unless every rank has each F and B exactly once."""
    actions = [a for rank_actions in schedule for a in rank_actions]
    if not actions:
        raise ValueError("schedule has no actions")
    m = 1 + max(a.microbatch for a in actions)
    v = 1 + max(a.chunk for a in actions)
    expected = {(kind, i, c) for kind in ("F", "B") for i in range(m) for c in range(v)}
    for rank, rank_actions in enumerate(schedule):
        seen = [(a.kind, a.microbatch, a.chunk) for a in rank_actions]
        if len(seen) != len(set(seen)):
            raise ValueError(f"rank {rank} runs an action twice")
        missing = sorted(expected - set(seen))
        if missing:
            kind, i, c = missing[0]
            raise ValueError(f"rank {rank} is missing {Action(kind, i, c)} ({len(missing)} action(s) missing)")
    return m, v


# --------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------


def bubble_formula(name: str, p: int, m: int, v: int = 1) -> dict[str, float]:
    """The bubble of schedule ``name`` with equal stage costs, in both conventions.

    ``of_total``: idle time as a share of the whole step (what :meth:`Timeline.bubble_fraction`
    measures); ``relative_to_ideal``: idle time over the ideal (bubble-free) time.

    ================  ==================  =================  ======================
    schedule          of_total            relative_to_ideal  source
    ================  ==================  =================  ======================
    naive             (p-1)/p             p-1                (one stage busy at a time)
    gpipe, 1f1b       (p-1)/(m+p-1)       (p-1)/m            arXiv:1811.06965, 2104.04473
    interleaved_1f1b  (p-1)/(v m+p-1)     (p-1)/(v m)        arXiv:2104.04473
    ================  ==================  =================  ======================

    p = 4, m = 16: 3/19 = 15.8% of the total, 3/16 = 18.75% relative to the ideal time;
    the same bubble against different denominators. 1F1B does not shrink the bubble, it
    caps the activations held (p instead of m).
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")
    _check_sizes(p, m, v)
    if name != "interleaved_1f1b" and v != 1:
        raise ValueError(f"{name} has one chunk per rank; v > 1 needs 'interleaved_1f1b'")
    if name == "naive":
        return {"of_total": (p - 1) / p, "relative_to_ideal": float(p - 1)}
    work = v * m  # ideal time in units of the fill/drain step
    return {"of_total": (p - 1) / (work + p - 1), "relative_to_ideal": (p - 1) / work}
