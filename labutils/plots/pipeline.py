"""Pipeline schedules drawn as Gantt charts (chapter 9), from ``labutils.schedules`` timelines."""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from labutils.plots.base import CourseFigure, _require


def pipeline_gantt(timeline, *, time_unit: str = "units of t_forward") -> Figure:
    """Gantt chart of a simulated pipeline schedule: one row per stage (rank 0 on top).

    ``timeline`` is a ``labutils.schedules.Timeline``. Forward boxes are blue, backward
    boxes orange (darker shades for later chunks of interleaved schedules), each with its
    microbatch number; hatched grey is idle time, the pipeline bubble. The title gives the
    schedule, p, m (and v), the bubble measured on this timeline (idle rank-time over
    total rank-time) and ``labutils.schedules.bubble_formula`` in both conventions.
    """
    from labutils import schedules

    p, v = timeline.num_stages, timeline.num_chunks
    makespan = timeline.makespan
    _require(makespan > 0 and timeline.events, "the timeline has no events to draw")
    events_per_rank = len(timeline.events) / p
    fig = CourseFigure(figsize=(min(16.0, max(9.5, 4 + 0.3 * events_per_rank)), 1.6 + 0.55 * p),
                 layout="constrained")
    ax = fig.add_subplot()
    axes_width_points = fig.get_figwidth() * 72 * 0.85

    for rank in range(p):
        ax.add_patch(Rectangle((0, rank - 0.4), makespan, 0.8, facecolor="#eeeeee",
                               edgecolor="#bbbbbb", hatch="///", linewidth=0))
    for event in timeline.events:
        color = _event_color(event.kind, event.chunk, v)
        duration = event.end - event.start
        ax.add_patch(Rectangle((event.start, event.rank - 0.4), duration, 0.8,
                               facecolor=color, edgecolor="white", linewidth=0.8))
        label = str(event.microbatch)
        box_points = axes_width_points * duration / makespan
        fontsize = min(9.0, box_points / (0.7 * len(label) + 0.6))
        if fontsize >= 6:
            ax.text(event.start + duration / 2, event.rank, label, ha="center", va="center",
                    fontsize=fontsize, color="black")

    ax.set_xlim(0, makespan)
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p), [f"stage {rank}\n(rank {rank})" for rank in range(p)])
    ax.set_xlabel(f"time ({time_unit})")
    ax.set_title(_gantt_title(timeline, schedules), fontsize=11)
    handles = [Patch(facecolor=_event_color(kind, chunk, v),
                     label=f"{'forward' if kind == 'F' else 'backward'}"
                           + (f", chunk {chunk}" if v > 1 else ""))
               for kind in "FB" for chunk in range(v)]
    handles.append(Patch(facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="///",
                         label="idle (bubble)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5),
               fontsize=9, frameon=False, title="the number in a box is its microbatch",
               title_fontsize=9)
    return fig


def _event_color(kind: str, chunk: int, num_chunks: int) -> str:
    """Blue shades for forward, orange shades for backward; later chunks darker."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    shade = 0.45 if num_chunks == 1 else 0.3 + 0.35 * chunk / (num_chunks - 1)
    return to_hex(colormaps["Blues" if kind == "F" else "Oranges"](shade))


def _gantt_title(timeline, schedules) -> str:
    p, m, v = timeline.num_stages, timeline.num_microbatches, timeline.num_chunks
    shape = (f"p = {p} stage{'s' * (p != 1)}, m = {m} microbatch{'es' * (m != 1)}"
             + (f", v = {v} chunks per rank" if v > 1 else ""))
    measured = timeline.bubble_fraction()
    lines = [f"{timeline.name or 'pipeline'}: {shape}",
             f"bubble measured on this timeline: {measured:.1%} of total rank-time"]
    if timeline.name in schedules.SCHEDULES:
        formula = schedules.bubble_formula(timeline.name, p, m, v)
        lines.append(f"formula (equal costs, no transfer): {formula['of_total']:.1%} of total time"
                     f" = {formula['relative_to_ideal']:.1%} of the ideal (bubble-free) time")
    return "\n".join(lines)
