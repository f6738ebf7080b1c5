"""Pipeline figures (chapter 9): schedules drawn as Gantt charts from ``labutils.costmodel.schedules``
timelines, the bubble against the number of microbatches, and the activations in flight."""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from labutils.plots.base import CourseFigure, _require


def pipeline_gantt(timeline, *, time_unit: str = "units of t_forward") -> Figure:
    """Gantt chart of a simulated pipeline schedule: one row per stage (rank 0 on top).

    ``timeline`` is a ``labutils.costmodel.schedules.Timeline``. Forward boxes are blue, backward
    boxes orange (darker shades for later chunks of interleaved schedules), each with its
    microbatch number; hatched grey is idle time, the pipeline bubble. The title gives the
    schedule, p, m (and v), the bubble measured on this timeline (idle rank-time over
    total rank-time) and ``labutils.costmodel.schedules.bubble_formula`` in both conventions.
    """
    from labutils.costmodel import schedules

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


def bubble_vs_microbatches(num_stages: int, curve_microbatches, of_total, relative_to_ideal,
                           measured: dict, *, schedule: str = "GPipe") -> Figure:
    """The pipeline bubble (%) against the number of microbatches m (log2 axis).

    ``of_total`` and ``relative_to_ideal`` are ``schedules.bubble_formula(...)`` values at each
    m of ``curve_microbatches``: (p-1)/(m+p-1) of the total time and (p-1)/m of the ideal time
    (clipped at 150% so the small-m end stays readable). ``measured`` maps m to the bubble
    measured on the ranks (idle rank-time over total rank-time, a fraction).
    """
    _require(isinstance(num_stages, int) and num_stages >= 1, f"num_stages must be >= 1, got {num_stages!r}")
    ms = list(curve_microbatches)
    _require(len(ms) >= 2 and min(ms) >= 1, "pass at least two microbatch counts >= 1 for the curves")
    _require(len(of_total) == len(ms) == len(relative_to_ideal), "pass one formula value per m of the curve")
    _require(all(0 <= f <= 1 for f in measured.values()), "measured bubbles are fractions between 0 and 1")
    fig = CourseFigure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(ms, [100 * f for f in of_total], "-", label="(p-1)/(m+p-1): share of the total time")
    ax.plot(ms, [100 * min(f, 1.5) for f in relative_to_ideal], ":", label="(p-1)/m: relative to the ideal time")
    if measured:
        ax.plot(list(measured), [100 * f for f in measured.values()], "o", markersize=8,
                label="measured on the ranks (share of the total time)")
    ax.set_xscale("log", base=2)
    ticks = [2**k for k in range(max(ms).bit_length()) if min(ms) <= 2**k <= max(ms)]
    ax.set_xticks(ticks, [str(m) for m in ticks])
    ax.set_xlabel("microbatches per step m")
    ax.set_ylabel("bubble (%)")
    ax.set_ylim(0, None)
    ax.set_title(f"{schedule} on p = {num_stages} stages: the bubble shrinks as microbatches are added")
    ax.legend()
    return fig


def in_flight_bars(measured: dict, simulated: dict, *, num_microbatches: int) -> Figure:
    """Microbatches whose activations each stage held at its peak, per schedule.

    ``measured`` and ``simulated`` map a schedule's name to one count per stage
    (``Timeline.peak_in_flight()`` of the ranks' timeline and of ``schedules.simulate``):
    bars are measured, black ticks simulated.
    """
    _require(len(measured) > 0 and set(measured) == set(simulated),
             "pass the same schedules in measured and simulated")
    stages = {len(counts) for counts in list(measured.values()) + list(simulated.values())}
    _require(len(stages) == 1 and min(stages) >= 1, "every schedule needs one count per stage, all the same p")
    p = stages.pop()
    fig = CourseFigure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(measured)
    colors = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")
    for i, name in enumerate(measured):
        xs = [rank + (i - (len(measured) - 1) / 2) * width for rank in range(p)]
        ax.bar(xs, measured[name], width, color=colors[i % len(colors)], label=f"{name}, measured")
        ax.plot(xs, simulated[name], "k_", markersize=22, mew=2, label="simulated schedule" if i == 0 else None)
    ax.set_xticks(range(p), [f"stage {rank}" for rank in range(p)])
    ax.set_ylabel("microbatches held at the peak")
    ax.set_ylim(0, max(num_microbatches, *[max(c) for c in measured.values()]) * 1.4)
    ax.set_title(f"Activations in flight, p = {p}, m = {num_microbatches}")
    ax.legend(loc="upper center", ncols=3, fontsize=9)
    return fig
