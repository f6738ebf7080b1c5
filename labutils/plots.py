"""Figures for the course: matplotlib pictures of what the other labutils modules compute.

Every function returns a :class:`matplotlib.figure.Figure` (a :class:`CourseFigure`) built
without pyplot, so a notebook shows it exactly once (as the cell's value, or with
``display(fig)``) and no global figure state is left behind. Nothing here models or measures anything: the numbers
come from ``labutils.collectives_bench`` and ``labutils.bench`` (measurements) and from
``labutils.costmodel``, ``labutils.roofline`` and ``labutils.schedules`` (models); this
module only draws them.

Units on every axis: bytes (binary prefixes KiB/MiB/GiB for message sizes, as nccl-tests
sizes are powers of two), GB = 1e9 bytes for memory and volume, GB/s = 1e9 B/s for
bandwidth, FLOP/s for throughput.

    from labutils import plots, schedules
    plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("1f1b", 4, 8)))
"""
from __future__ import annotations

import io
import math
from typing import Iterable, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

GB = 1e9  # bytes: memory and volume in decimal gigabytes, as in reference.md

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_BAR_COLORS = {"params": "#4c72b0", "grads": "#dd8452", "optimizer_states": "#55a868"}


# ----------------------------------------------------------------------------- helpers


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure rendered as PNG bytes (for an ``ipywidgets.Image`` or a file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


class CourseFigure(Figure):
    """A Figure that shows itself as a PNG when it is a notebook cell's value.

    Figures made without pyplot are not picked up by the inline backend until pyplot has
    been imported somewhere; ``_repr_png_`` makes them display in every kernel, once.
    """

    def _repr_png_(self) -> bytes:
        return figure_png(self, dpi=100)


def format_bytes_binary(num_bytes: float) -> str:
    """Human label for a byte count with binary prefixes: 8 -> "8 B", 1048576 -> "1 MiB"."""
    value = float(num_bytes)
    unit_index = 0
    while abs(value) >= 1024 and unit_index < len(_BINARY_UNITS) - 1:
        value /= 1024
        unit_index += 1
    return f"{value:.4g} {_BINARY_UNITS[unit_index]}"


def _plain_number(value: float, _pos=None) -> str:
    """Tick label without scientific notation where it stays short (0.001, 1, 250, 1e+05)."""
    return f"{value:g}"


def _set_bytes_axis(axis, sizes: Iterable[float], max_ticks: int = 10) -> None:
    """Log2 byte axis: a labelled tick every few powers of two, unlabelled minors between."""
    exponents = [math.log2(size) for size in sizes if size > 0]
    low, high = math.floor(min(exponents)), math.ceil(max(exponents))
    step = max(1, math.ceil((high - low + 1) / max_ticks))
    axis.set_major_locator(FixedLocator([2.0**k for k in range(low, high + 1, step)]))
    axis.set_minor_locator(FixedLocator([2.0**k for k in range(low, high + 1)]))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: format_bytes_binary(value)))
    axis.set_minor_formatter(NullFormatter())


def _flops_scale(peak_flops: float) -> tuple[float, str]:
    """(divisor, unit) so a device's peak reads as a small number: TFLOP/s or GFLOP/s."""
    return (1e12, "TFLOP/s") if peak_flops >= 1e12 else (1e9, "GFLOP/s")


def _singular(unit: str) -> str:
    """"GPUs" -> "GPU", "ranks" -> "rank"; a unit without a plural s is kept."""
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# ----------------------------------------------------------------------------- bandwidth

#: record fields that tell benchmark series apart, in the order their values enter a label
_SERIES_FIELDS = ("op", "world_size", "backend", "device", "type", "stat")
_MODE_NAMES = {"oop": "out-of-place", "ip": "in-place"}


def bandwidth_vs_size(records: Sequence[dict], link_peak_GBps: float | None = None,
                      link_label: str | None = None, *, mode: str | None = None) -> Figure:
    """algbw and busbw (GB/s = 1e9 B/s) against message size (bytes), log-log.

    ``records`` come from ``labutils.collectives_bench`` (one dict per size with ``size``
    and ``oop_*`` / ``ip_*`` columns); several collectives, world sizes or backends become
    separate series (one colour each: busbw solid, algbw dashed), as do records timed with
    different statistics (``stat``: mean, median, min). ``mode`` "oop" or "ip"
    picks out-of-place or in-place columns; by default each series uses out-of-place
    where it was measured, else in-place. ``link_peak_GBps`` draws the link's bandwidth
    PER DIRECTION, the figure busbw is to be compared with (never a bidirectional one).
    """
    _require(len(records) > 0, "no benchmark records to draw: run collectives_bench.collective_bench(...) first")
    _require(mode in (None, "oop", "ip"), f"mode must be 'oop', 'ip' or None, got {mode!r}")
    _require(link_peak_GBps is None or link_peak_GBps > 0,
             f"link_peak_GBps must be a positive GB/s figure, got {link_peak_GBps!r}")
    missing = {"size", "oop_time_us", "ip_time_us"} - set(records[0])
    _require(not missing, f"records lack {sorted(missing)}: pass collectives_bench.collective_bench(...) records")
    series: dict[tuple, list[dict]] = {}
    for record in records:
        series.setdefault(tuple(record.get(name) for name in _SERIES_FIELDS), []).append(record)
    varying = [index for index, name in enumerate(_SERIES_FIELDS)
               if name == "op" or len({key[index] for key in series}) > 1]
    first_key = next(iter(series))
    shared = [_series_field_text(name, first_key[index]) for index, name in enumerate(_SERIES_FIELDS)
              if index not in varying and first_key[index] is not None]

    fig = CourseFigure(figsize=(10, 5.5), layout="constrained")
    ax = fig.add_subplot()
    colors = [f"C{index % 10}" for index in range(len(series))]
    for color, (key, group) in zip(colors, series.items()):
        series_mode = mode or ("oop" if any(r["oop_time_us"] is not None for r in group) else "ip")
        measured = sorted((r for r in group if r[f"{series_mode}_time_us"] is not None),
                          key=lambda r: r["size"])
        _require(len(measured) > 0, f"{key[0]} has no {_MODE_NAMES[series_mode]} measurements: "
                                    f"use mode={'ip' if series_mode == 'oop' else 'oop'!r}")
        name = ", ".join(_series_field_text(_SERIES_FIELDS[i], key[i]) for i in varying)
        name += f" ({_MODE_NAMES[series_mode]})"
        sizes = [r["size"] for r in measured]
        ax.plot(sizes, [r[f"{series_mode}_busbw"] for r in measured], color=color, marker="o",
                markersize=4, label=f"{name}: busbw")
        ax.plot(sizes, [r[f"{series_mode}_algbw"] for r in measured], color=color, linestyle="--",
                marker=".", markersize=4, alpha=0.8, label=f"{name}: algbw")
    if link_peak_GBps is not None:
        ax.axhline(link_peak_GBps, color="black", linestyle=":", linewidth=1.5,
                   label=f"{link_label or 'link'} peak, per direction: {link_peak_GBps:g} GB/s")

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _set_bytes_axis(ax.xaxis, [r["size"] for r in records])
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=30))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel("message size (bytes; nccl-tests' size column)")
    ax.set_ylabel("bandwidth (GB/s = 1e9 B/s)")
    ax.set_title("Collective bandwidth vs message size (busbw solid, algbw dashed)"
                 + (f"\n{', '.join(shared)}" if shared else ""))
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig


def _series_field_text(name: str, value) -> str:
    """How one record field reads in a legend entry or the title: "4 ranks", "dtype float"."""
    templates = {"world_size": "{} ranks", "device": "on {}", "type": "dtype {}", "stat": "{} time"}
    return templates.get(name, "{}").format(value)


# ----------------------------------------------------------------------------- roofline


def roofline(device, dtype: str, points: Sequence = (), *, intensity_range=None) -> Figure:
    """Roofline of ``device`` for ``dtype`` with operations placed on it (Williams et al. 2009).

    ``device`` is a ``labutils.roofline.Device`` (peak FLOP/s per dtype, memory bandwidth
    in B/s). ``points`` holds ``OpCost`` objects (drawn on the roof at their arithmetic
    intensity: the best they can reach) and/or ``(label, intensity FLOP/B, measured FLOP/s)``
    tuples (drawn where they were measured). The roof and the ridge point come from
    ``labutils.roofline.attainable`` and ``ridge_point``. ``intensity_range`` (FLOP/B,
    FLOP/B) overrides the x range, which by default spans the points and the ridge.
    """
    import numpy as np

    from labutils import roofline as rl

    dtype = rl.canonical_dtype(dtype)
    peak = device.peak(dtype)
    ridge = rl.ridge_point(device, dtype)
    placed = [_roofline_point(point, device, dtype) for point in points]
    if intensity_range is None:
        intensities = [ridge] + [intensity for _, intensity, _, _ in placed]
        intensity_range = (min(intensities) / 8, max(intensities) * 8)
    _require(0 < intensity_range[0] < intensity_range[1],
             f"intensity_range must be two increasing positive numbers, got {intensity_range}")

    scale, unit = _flops_scale(peak)
    fig = CourseFigure(figsize=(9, 5.5 + 0.22 * len(placed)), layout="constrained")
    ax = fig.add_subplot()
    grid = np.geomspace(*intensity_range, 256)
    roof = [rl.attainable(float(x), device, dtype) / scale for x in grid]
    ax.plot(grid, roof, color="black", linewidth=2,
            label=f"roof: min({peak / scale:.4g} {unit}, intensity x {device.mem_bandwidth / 1e9:.4g} GB/s)")
    ax.plot([ridge], [peak / scale], marker="D", color="black", linestyle="none",
            label=f"ridge point: {ridge:.3g} FLOP/B")
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    markers = "osv^<>pPX*h"
    for index, (label, intensity, flops, measured) in enumerate(placed):
        ax.plot([intensity], [flops / scale], marker=markers[index % len(markers)],
                markersize=8, linestyle="none", markerfacecolor="none" if not measured else None,
                label=label)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*intensity_range)
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"attainable / measured throughput ({unit})")
    ax.set_title(f"Roofline: {device.name}, {dtype}")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=9, title=f"peaks: {device.source}",
               title_fontsize=8)
    return fig


def _roofline_point(point, device, dtype: str) -> tuple[str, float, float, bool]:
    """(legend label, intensity FLOP/B, FLOP/s, measured?) for an OpCost or a measured tuple."""
    from labutils import roofline as rl

    if hasattr(point, "intensity"):
        roof = rl.attainable(point.intensity, device, dtype)
        bound = "compute" if point.intensity >= rl.ridge_point(device, dtype) else "memory"
        label = f"{point.name}: {point.intensity:.3g} FLOP/B, {bound}-bound (drawn on the roof)"
        return label, point.intensity, roof, False
    _require(len(point) == 3,
             f"a roofline point is an OpCost or (label, intensity FLOP/B, measured FLOP/s); got {point!r}")
    label, intensity, measured = point
    _require(intensity > 0 and measured > 0,
             f"point {label!r}: intensity and measured FLOP/s must be positive")
    share = measured / rl.attainable(intensity, device, dtype)
    return (f"{label}: {intensity:.3g} FLOP/B, measured {share:.0%} of the roof",
            float(intensity), float(measured), True)


# ----------------------------------------------------------------------------- pipelines


def pipeline_gantt(timeline, *, time_unit: str = "units of t_forward") -> Figure:
    """Gantt chart of a simulated pipeline schedule: one row per stage (rank 0 on top).

    ``timeline`` is a ``labutils.schedules.Timeline``. Forward boxes are blue, backward
    boxes orange (darker shades for later chunks of interleaved schedules), each with its
    microbatch number; hatched grey is idle time, the pipeline bubble. The title gives the
    schedule, p, m (and v), the bubble measured on this timeline (idle rank-time over
    total rank-time) and ``labutils.schedules.bubble_formula`` in both conventions.
    """
    from labutils import schedules

    p, m, v = timeline.num_stages, timeline.num_microbatches, timeline.num_chunks
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


# ----------------------------------------------------------------------------- ZeRO memory

_ZERO_STAGE_NAMES = {0: "DDP\n(no sharding)", 1: "ZeRO-1\n(optimizer states)",
                     2: "ZeRO-2\n(+ gradients)", 3: "ZeRO-3\n(+ parameters)"}


def zero_memory_bars(table, gpu_memory_bytes: float | None = None, gpu_label: str | None = None,
                     *, title: str | None = None, highlight_stage: int | None = None) -> Figure:
    """Stacked bars of model-state memory per GPU for each ZeRO stage, in GB (1e9 B), or in
    MB (1e6 B) when neither the largest bar nor the GPU line reaches 1 GB (a toy model).

    ``table`` is ``labutils.costmodel.zero_memory_table(num_params, world_size)``: one
    ``ZeroMemory(stage, params, grads, optimizer_states, total)`` per stage, in bytes.
    ``gpu_memory_bytes`` draws the GPU's capacity as a horizontal line labelled with
    ``gpu_label``. ``highlight_stage`` shades one bar's column (the stage a widget selected).
    Activations are not part of these bars (the title says so).
    """
    _require(len(table) > 0, "the ZeRO table is empty: pass costmodel.zero_memory_table(...)")
    _require(gpu_memory_bytes is None or gpu_memory_bytes > 0,
             f"gpu_memory_bytes must be positive bytes, got {gpu_memory_bytes}")
    fig = CourseFigure(figsize=(8.5, 5), layout="constrained")
    ax = fig.add_subplot()
    positions = range(len(table))
    largest_bytes = max([row.total for row in table] + [gpu_memory_bytes or 0])
    unit, unit_name = (GB, "GB") if largest_bytes >= GB else (1e6, "MB")
    highest = max(row.total for row in table) / unit
    bottoms = [0.0] * len(table)
    for part, label in (("params", "parameters"), ("grads", "gradients"),
                        ("optimizer_states", "optimizer states")):
        heights = [getattr(row, part) / unit for row in table]
        bars = ax.bar(positions, heights, bottom=bottoms, color=_BAR_COLORS[part], label=label,
                      width=0.6)
        for bar, height in zip(bars, heights):
            if height > 0.07 * highest:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + height / 2,
                        f"{height:.3g}", ha="center", va="center", fontsize=8, color="white")
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
    for position, row in zip(positions, table):
        ax.text(position, row.total / unit, f"{row.total / unit:.3g} {unit_name}", ha="center", va="bottom",
                fontsize=10, fontweight="bold")
        if row.stage == highlight_stage:
            ax.axvspan(position - 0.45, position + 0.45, color="gold", alpha=0.25, zorder=0)
    top = highest
    if gpu_memory_bytes is not None:
        capacity = gpu_memory_bytes / unit
        ax.axhline(capacity, color="crimson", linestyle="--", linewidth=1.5,
                   label=f"{gpu_label or 'GPU'} memory: {capacity:.4g} {unit_name}")
        top = max(top, capacity)
    ax.set_ylim(0, top * 1.15)
    ax.set_xticks(list(positions), [_ZERO_STAGE_NAMES.get(row.stage, f"stage {row.stage}")
                                    + ("\n(selected)" if row.stage == highlight_stage else "")
                                    for row in table])
    ax.set_ylabel(f"memory per GPU ({unit_name} = {unit:.0e} bytes)".replace("e+0", "e"))
    ax.set_title(title or "Model-state memory per GPU (activations not included)")
    fig.legend(loc="outside lower center", ncols=4, fontsize=9, frameon=False)
    return fig


# ----------------------------------------------------------------------------- communication volume


def comm_volume_bars(volumes, labels: Sequence[str] | None = None) -> Figure:
    """Bars of the bytes one device sends per training step, one bar per strategy, in GB.

    ``volumes`` is a list of ``labutils.costmodel.CommVolume`` (strategy, bytes_per_step,
    calls_per_step, formula, assumptions, op). Each bar is annotated with its size and the
    number of communication calls per step; the formulas are listed under the chart.
    A bar's tick label is its strategy name ("DP", "TP"; several volumes of one strategy
    are told apart by their collective) unless ``labels`` gives one label per volume.
    A log scale is used when the largest bar is more than 50 times the smallest.
    """
    _require(len(volumes) > 0, "no volumes to draw: pass a list of costmodel.comm_volume(...) results")
    if labels is None:
        labels = _strategy_labels(volumes)
    _require(len(labels) == len(volumes),
             f"labels has {len(labels)} entries for {len(volumes)} volumes: pass one label per volume")
    fig = CourseFigure(figsize=(max(8.0, 2.2 * len(volumes)), 5.2 + 0.25 * len(volumes)), layout="constrained")
    ax, notes = fig.subplots(2, 1, height_ratios=[5.0, 0.3 + 0.25 * len(volumes)])
    heights = [volume.bytes_per_step / GB for volume in volumes]
    positions = range(len(volumes))
    bars = ax.bar(positions, heights, color="#4c72b0", width=0.6)
    for bar, volume, height in zip(bars, volumes, heights):
        calls = f"{volume.calls_per_step:g} call{'' if volume.calls_per_step == 1 else 's'}"
        ax.annotate(f"{height:.4g} GB\n{calls}", (bar.get_x() + bar.get_width() / 2, height),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=9)
    positive = [height for height in heights if height > 0]
    log_scale = bool(positive) and max(positive) > 50 * min(positive)
    if log_scale:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
        ax.set_ylim(min(positive) / 2, max(positive) * 8)
    else:
        ax.set_ylim(0, max(heights) * 1.25 if max(heights) > 0 else 1)
    ax.set_xticks(list(positions), list(labels))
    ax.set_ylabel("bytes sent per device per step\n(GB = 1e9 bytes" + (", log scale)" if log_scale else ")"))
    ax.set_title("Communication per training step, seen from one device")
    notes.axis("off")
    notes.text(0, 1, "\n".join(f"{label}: {volume.formula}" for label, volume in zip(labels, volumes)),
               transform=notes.transAxes, ha="left", va="top", fontsize=8, family="monospace")
    return fig


def _strategy_labels(volumes) -> list[str]:
    """Tick labels: the strategy name, plus its collective where two volumes share a strategy."""
    names = [volume.strategy.upper() for volume in volumes]
    return [name + (f"\n({volume.op.replace('+', ' + ')})" if names.count(name) > 1 and volume.op else "")
            for name, volume in zip(names, volumes)]


# ----------------------------------------------------------------------------- scaling


def scaling_efficiency(gpu_counts: Sequence[int], throughputs: Sequence[float], *,
                       throughput_unit: str = "samples/s", title: str | None = None,
                       unit: str = "GPUs") -> Figure:
    """Measured throughput against ideal linear scaling (left) and scaling efficiency (right).

    ``unit`` names what is counted on the x axis ("number of {unit}"): "GPUs" by default,
    "ranks" for CPU processes, "nodes", ...

    Ideal scaling is linear from the smallest GPU count: ideal(N) = N x (throughput at
    N0) / N0. Efficiency = actual / ideal, from ``labutils.costmodel.scaling_efficiency``
    (actual / (N x single-GPU throughput); seed 002 has this ratio upside down).
    """
    from labutils import costmodel

    _require(isinstance(unit, str) and unit.strip() != "",
             f"unit must name what is counted, e.g. 'GPUs' or 'ranks'; got {unit!r}")
    _require(len(gpu_counts) == len(throughputs) and len(gpu_counts) >= 2,
             f"pass at least two {unit} counts and one throughput per count")
    _require(all(count > 0 for count in gpu_counts) and all(t > 0 for t in throughputs),
             "GPU counts and throughputs must be positive")
    pairs = sorted(zip(gpu_counts, throughputs))
    counts = [count for count, _ in pairs]
    measured = [throughput for _, throughput in pairs]
    per_gpu_baseline = measured[0] / counts[0]
    ideal = [count * per_gpu_baseline for count in counts]
    efficiency = [costmodel.scaling_efficiency(throughput, count, per_gpu_baseline)
                  for count, throughput in zip(counts, measured)]

    fig = CourseFigure(figsize=(11, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(counts, ideal, linestyle="--", color="grey",
              label=f"ideal: linear from {counts[0]} {_singular(unit) if counts[0] == 1 else unit}")
    left.plot(counts, measured, marker="o", color="#4c72b0", label="measured")
    left.set_xlabel(f"number of {unit}")
    left.set_ylabel(f"throughput ({throughput_unit})")
    left.set_title("Throughput")
    left.legend(loc="upper left")
    left.set_xticks(counts)
    positions = range(len(counts))
    bars = right.bar(positions, [100 * e for e in efficiency], color="#55a868", width=0.6)
    top = max(120.0, 115 * max(efficiency))
    for bar, value in zip(bars, efficiency):
        # inside the bar's top, clear of the 100% line; above a bar too short to hold it
        inside = 100 * value > 0.15 * top
        right.annotate(f"{value:.0%}", (bar.get_x() + bar.get_width() / 2, 100 * value),
                       xytext=(0, -4 if inside else 3), textcoords="offset points", ha="center",
                       va="top" if inside else "bottom", fontsize=9,
                       color="white" if inside else "black", fontweight="bold" if inside else "normal")
    right.axhline(100, color="grey", linestyle="--", linewidth=1)
    right.text(len(counts) - 0.5, 100, "linear scaling = 100%", ha="right", va="bottom", fontsize=8,
               color="grey")
    right.set_xticks(list(positions), [str(count) for count in counts])
    right.set_xlim(-0.5, len(counts) - 0.5)
    right.set_ylim(0, top)
    right.set_xlabel(f"number of {unit}")
    right.set_ylabel("scaling efficiency (%) = actual / ideal")
    right.set_title("Scaling efficiency")
    fig.suptitle(title or "Scaling: measured vs ideal linear")
    return fig

