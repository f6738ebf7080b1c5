"""A profiled training step (chapter 6): each rank's compute and communication over one step,
as read from its ``torch.profiler`` trace by ``labutils.measure.step_profile``.

Times are seconds in the arguments (intervals since the step started) and milliseconds
(ms = 1e-3 s) on the axes.
"""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from labutils.plots.base import CourseFigure, _require

_MS = 1e3  # milliseconds per second
_COMPUTE, _COMM, _EXPOSED = "#55a868", "#dd8452", "#c44e52"


def _check_intervals(intervals, step_s: float, what: str) -> None:
    for start, end in intervals:
        _require(0 <= start <= end <= step_s * (1 + 1e-9) + 1e-12,
                 f"{what}: every interval needs 0 <= start <= end <= the step's {step_s} s, got ({start}, {end})")


def step_timeline(compute: Sequence[Sequence[tuple[float, float]]],
                  communication: Sequence[Sequence[tuple[float, float]]],
                  step_s: Sequence[float], *, exposed: Sequence[Sequence[tuple[float, float]]] | None = None,
                  title: str = "One profiled step on every rank") -> Figure:
    """Two rows per rank, compute and communication, with a bar for each interval of one step.

    ``compute[r]`` and ``communication[r]`` are rank r's ``(start, end)`` intervals in seconds
    since its step started (``StepProfile.compute`` / ``.communication``), ``step_s[r]`` its
    step's wall time in seconds (a dashed line marks it). ``exposed[r]``, if given, are the
    parts of the communication with no compute beside it, drawn over the communication row.
    """
    ranks = len(step_s)
    _require(ranks > 0, "no ranks to draw: pass one list of intervals per rank")
    _require(len(compute) == ranks and len(communication) == ranks
             and (exposed is None or len(exposed) == ranks),
             f"compute, communication (and exposed) need one list per rank: {ranks} step times, "
             f"{len(compute)} compute, {len(communication)} communication lists")
    _require(all(s > 0 for s in step_s), f"step times must be positive seconds, got {list(step_s)}")
    for rank in range(ranks):
        _check_intervals(compute[rank], step_s[rank], f"rank {rank} compute")
        _check_intervals(communication[rank], step_s[rank], f"rank {rank} communication")
        if exposed is not None:
            _check_intervals(exposed[rank], step_s[rank], f"rank {rank} exposed")
    fig = CourseFigure(figsize=(9, 1.3 + 0.55 * 2 * ranks), layout="constrained")
    ax = fig.add_subplot()
    labels = []
    for rank in range(ranks):
        row = 2 * rank
        ax.broken_barh([(s * _MS, (e - s) * _MS) for s, e in compute[rank]], (row - 0.35, 0.7), color=_COMPUTE)
        ax.broken_barh([(s * _MS, (e - s) * _MS) for s, e in communication[rank]], (row + 1 - 0.35, 0.7),
                       color=_COMM)
        if exposed is not None:
            ax.broken_barh([(s * _MS, (e - s) * _MS) for s, e in exposed[rank]], (row + 1 - 0.15, 0.3),
                           color=_EXPOSED)
        ax.plot([step_s[rank] * _MS] * 2, [row - 0.45, row + 1.45], color="black", linestyle="--", linewidth=1)
        labels += [f"rank {rank} compute", f"rank {rank} communication"]
    ax.set_yticks(range(2 * ranks), labels, fontsize=8)
    ax.set_ylim(2 * ranks - 0.5, -0.5)
    ax.set_xlim(0, max(step_s) * _MS * 1.02)
    ax.set_xlabel("milliseconds since the step started (ProfilerStep#k)")
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=_COMPUTE, label="compute (forward, backward, optimizer)"),
               Patch(color=_COMM, label="communication (collectives running)")]
    if exposed is not None:
        handles.append(Patch(color=_EXPOSED, label="exposed: communication with no compute"))
    handles.append(ax.plot([], [], color="black", linestyle="--", linewidth=1, label="end of the step")[0])
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig
