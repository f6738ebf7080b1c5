"""A training step read from a ``torch.profiler`` trace: compute, communication, overlap.

``torch.profiler.profile(..., schedule=schedule(wait=, warmup=, active=))`` with
``prof.step()`` after every training step marks each recorded step with a ``ProfilerStep#k``
annotation, and ``prof.export_chrome_trace(path)`` writes the Chrome trace JSON that
Perfetto (ui.perfetto.dev) and chrome://tracing open. :func:`step_profiles` reads one rank's
trace and returns, per recorded step, the intervals of communication and of compute and how
much of the communication no compute hides: the *exposed communication* (the term of
Holistic Trace Analysis's "Comm Comp Overlap" and of the Ultra-Scale Playbook's profiling
chapter). Times in the trace are microseconds (``ts``, ``dur``); every result is in seconds.

What counts as what (torch 2.13):

- **GPU trace** (it holds ``kernel`` events): communication = NCCL kernels
  (``ncclDevKernel_*``, ``ncclKernel_*``) on their CUDA stream, compute = every other kernel.
  A kernel belongs to the step during which the CPU launched it (``args.correlation``).
- **CPU trace** (gloo): communication = gloo's own events (``gloo:all_reduce`` ...) on its
  ``pt_gloo_runloop`` threads, and on the training thread the collective calls themselves
  (``c10d::allreduce_`` ..., ``record_param_comms``, ``nccl:*``); compute = every other
  ``cpu_op`` and ``user_annotation`` event (forward, autograd, optimizer), minus the time its
  thread spends inside a communication call nested in it (DDP starts its all-reduces from
  inside ``AccumulateGrad``). Nested events are merged into interval unions: nothing is counted twice.

    from labutils.measure import step_profile
    for step in step_profile.step_profiles("trace_rank0.json"):
        print(step.step, step.wall_s, step.comm_s, step.exposed_fraction)
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

Intervals = list[tuple[float, float]]

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_?([A-Za-z]*)")
_CPU_COMM = re.compile(r"^(?:gloo:|nccl:|c10d::)|^record_param_comms$")
_GLOO = re.compile(r"^gloo:(\w+)")
_US = 1e-6  # seconds per microsecond of the trace


# ----------------------------------------------------------------------------- intervals

def merge(intervals) -> Intervals:
    """The union of ``(start, end)`` intervals as sorted, disjoint intervals (same units)."""
    merged: Intervals = []
    for start, end in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total(intervals) -> float:
    """Length of the union of ``intervals`` (nested or overlapping parts counted once)."""
    return sum(end - start for start, end in merge(intervals))


def intersect(a, b) -> Intervals:
    """The parts of union ``a`` that also lie in union ``b``."""
    a, b, out, j = merge(a), merge(b), [], 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            out.append((max(start, b[k][0]), min(end, b[k][1])))
            k += 1
    return merge(out)


def subtract(a, b) -> Intervals:
    """The parts of union ``a`` that lie outside union ``b``."""
    out: Intervals = []
    for start, end in merge(a):
        for cut_start, cut_end in intersect([(start, end)], b):
            if cut_start > start:
                out.append((start, cut_start))
            start = cut_end
        if end > start:
            out.append((start, end))
    return out


def clip(intervals, start: float, end: float) -> Intervals:
    """``intervals`` cut to the window ``[start, end]``."""
    return intersect(intervals, [(start, end)])


# ----------------------------------------------------------------------------- the trace

@dataclass(frozen=True)
class StepProfile:
    """One recorded training step of one rank. Times in seconds; intervals are ``(start, end)``
    in seconds since the step started (its ``ProfilerStep#k`` annotation), as merged unions.

    ``wall_s``: the step, from its start on the host to the end of its last event (on a GPU, of
    its last kernel). ``comm_s``: time with any communication running, ``compute_s``: with any
    compute, ``overlapped_s``: with both, ``exposed_s``: communication and no compute
    (``overlapped_s + exposed_s == comm_s``). ``calls``: outermost communication events by
    name; ``collectives``: collectives as they ran (gloo events or NCCL kernels) by kind,
    ``{"all_reduce": 8}``. ``device``: "cuda" (kernels were read) or "cpu".
    """

    step: int
    device: str
    wall_s: float
    comm_s: float
    compute_s: float
    overlapped_s: float
    exposed_s: float
    compute: Intervals = field(repr=False)
    communication: Intervals = field(repr=False)
    exposed: Intervals = field(repr=False)
    calls: dict = field(repr=False)
    collectives: dict = field(repr=False)

    @property
    def exposed_fraction(self) -> float:
        """Exposed communication as a fraction of the step (0..1)."""
        return self.exposed_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def overlapped_fraction_of_comm(self) -> float:
        """The share of the communication time that compute hides (0..1; 1 when there is none)."""
        return self.overlapped_s / self.comm_s if self.comm_s > 0 else 1.0


def load_trace(trace) -> list[dict]:
    """The events of a Chrome trace: a path to ``export_chrome_trace``'s JSON, or its loaded dict."""
    if isinstance(trace, (str, Path)):
        path = Path(trace)
        if not path.is_file():
            raise FileNotFoundError(f"no trace at {path}: export one with prof.export_chrome_trace(path)")
        try:
            trace = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON ({error}); was the export cut short?") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: expected a JSON object with a 'traceEvents' list")
    return events


def _durations(events: list[dict]) -> list[dict]:
    """The complete events (``ph == "X"``) with a numeric start and a non-negative duration (us)."""
    spans = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            raise ValueError(f"event {event.get('name')!r} needs a number 'ts' and a 'dur' >= 0 "
                             f"(microseconds), got ts={ts!r}, dur={dur!r}")
        spans.append(event)
    return spans


def _span(event: dict) -> tuple[float, float]:
    return float(event["ts"]), float(event["ts"]) + float(event["dur"])


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _collective(event: dict) -> str | None:
    """The collective a gloo event or NCCL kernel ran ("all_reduce"), else None."""
    name = event.get("name", "")
    match = _GLOO.match(name) if event.get("cat") != "kernel" else _NCCL_KERNEL.match(name)
    return (_snake(match.group(1)) or "unknown") if match else None


def _outermost(events: list[dict]) -> list[dict]:
    """The events no other event of the same thread (or stream) encloses."""
    out, by_thread = [], {}
    for event in events:
        by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    for group in by_thread.values():
        end = float("-inf")
        for event in sorted(group, key=lambda e: (e["ts"], -e["dur"])):
            if _span(event)[1] > end:
                out.append(event)
                end = _span(event)[1]
    return out


def _cpu_compute_and_comm(spans: list[dict]) -> tuple[Intervals, list[dict]]:
    """CPU trace: compute intervals (each thread's ops minus its communication calls) and the
    communication events (us)."""
    compute, comm = [], []
    by_thread = {}
    for event in spans:
        if event.get("cat") not in ("cpu_op", "user_annotation") or _STEP.match(event.get("name", "")):
            continue
        by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    for events in by_thread.values():
        thread_comm = [e for e in events if _CPU_COMM.match(e.get("name", ""))]
        thread_work = [_span(e) for e in events if not _CPU_COMM.match(e.get("name", ""))]
        compute += subtract(thread_work, [_span(e) for e in thread_comm])
        comm += thread_comm
    return merge(compute), comm


def step_profiles(trace) -> list[StepProfile]:
    """Every recorded step of one rank's trace (a path or the loaded JSON), in step order.

    Raises ``ValueError`` for a file that is not a Chrome trace, for events without a start or
    with a negative duration, and for a trace without ``ProfilerStep#k`` annotations (profile
    with a ``schedule`` and call ``prof.step()`` after each step).
    """
    spans = _durations(load_trace(trace))
    steps = sorted((int(m.group(1)), _span(e)) for e in spans
                   if e.get("cat") != "gpu_user_annotation" and (m := _STEP.match(e.get("name", ""))))
    if not steps:
        raise ValueError("no ProfilerStep#<k> events in the trace: profile with schedule=... and call "
                         "prof.step() after every training step")
    kernels = [e for e in spans if e.get("cat") == "kernel"]
    device = "cuda" if kernels else "cpu"
    if kernels:
        launched = {e.get("args", {}).get("correlation"): float(e["ts"]) for e in spans
                    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        comm_events = [e for e in kernels if _NCCL_KERNEL.match(e.get("name", ""))]
        host_comm = [e for e in spans if e.get("cat") in ("cpu_op", "user_annotation")
                     and _CPU_COMM.match(e.get("name", ""))]
    else:
        compute_all, comm_events = _cpu_compute_and_comm(spans)
        launched = {}
        host_comm = []
    counted = _outermost(comm_events + host_comm)

    def origin(event: dict) -> float:  # when the host issued the event: a kernel's launch, else its start (us)
        return launched.get(event.get("args", {}).get("correlation"), float(event["ts"]))

    profiles = []
    for number, (start, host_end) in steps:
        mine = [e for e in comm_events if start <= origin(e) < host_end]
        if kernels:
            own_kernels = [e for e in kernels if start <= origin(e) < host_end]
            end = max([host_end] + [_span(e)[1] for e in own_kernels])
            compute = clip(merge(_span(e) for e in own_kernels if not _NCCL_KERNEL.match(e["name"])), start, end)
        else:
            end = host_end
            compute = clip(compute_all, start, end)
        comm = clip(merge(_span(e) for e in (mine if kernels else comm_events)), start, end)
        hidden = intersect(comm, compute)
        exposed = subtract(comm, compute)
        in_step = [e for e in counted if start <= origin(e) < host_end]
        profiles.append(StepProfile(
            step=number, device=device, wall_s=(end - start) * _US,
            comm_s=total(comm) * _US, compute_s=total(compute) * _US,
            overlapped_s=total(hidden) * _US, exposed_s=total(exposed) * _US,
            compute=_relative(compute, start), communication=_relative(comm, start),
            exposed=_relative(exposed, start),
            calls=dict(Counter(e["name"] for e in in_step)),
            collectives=dict(Counter(c for e in mine if (c := _collective(e))))))
    return profiles


def _relative(intervals: Intervals, start_us: float) -> Intervals:
    """Intervals in microseconds of the trace -> seconds since ``start_us``."""
    return [((s - start_us) * _US, (e - start_us) * _US) for s, e in intervals]
