"""Tensor-parallel figures (chapter 8): who holds which block of W, the all-reduces a split
layer makes, their time against the alpha-beta model, per-layer time and activation memory
against the TP degree, and the step time of multi-node layouts.

Every function takes numbers measured on the ranks or computed by ``labutils.costmodel`` /
``labutils.costmodel.strategy`` and only draws them: seconds are shown in ms or us as the axis says,
bytes in GB = 1e9 B.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from labutils.plots.base import GB, CourseFigure, _plain_number, _require, _set_bytes_axis

_FORWARD, _BACKWARD = "#4c72b0", "#dd8452"
#: colours of the stacked parts of a step, in the order they are usually listed
_PART_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def tp_sharding(tp_size: int) -> Figure:
    """Which rank holds which block of W (out x in) when a linear layer is split over
    ``tp_size`` ranks: column-parallel (left, bands of output rows) and row-parallel (right,
    bands of input columns)."""
    _require(isinstance(tp_size, int) and tp_size >= 1, f"tp_size must be a whole number >= 1, got {tp_size!r}")
    from matplotlib import colormaps

    colors = colormaps["tab10"].colors
    fig = CourseFigure(figsize=(9, 4.4), layout="constrained")
    titles = {"column": f"column-parallel: rank r holds out/{tp_size} rows of W\n"
                        "(and of b); output split, no communication",
              "row": f"row-parallel: rank r holds in/{tp_size} columns of W;\n"
                     "partial sums all-reduced, b added once"}
    for ax, layout in zip(fig.subplots(1, 2), ("column", "row")):
        for rank in range(tp_size):
            if layout == "column":
                xy, width, height = (0, 1 - (rank + 1) / tp_size), 1, 1 / tp_size
            else:
                xy, width, height = (rank / tp_size, 0), 1 / tp_size, 1
            ax.add_patch(Rectangle(xy, width, height, facecolor=colors[rank % 10], alpha=0.55,
                                   edgecolor="black"))
            ax.text(xy[0] + width / 2, xy[1] + height / 2, f"rank {rank}", ha="center", va="center",
                    fontsize=10 if tp_size <= 8 else 7)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("in features (columns of W)")
        ax.set_ylabel("out features (rows of W)")
        ax.set_title(titles[layout], fontsize=10)
    fig.suptitle(f"Who holds which block of W (out x in) on t = {tp_size} ranks")
    return fig


def allreduce_counts(labels: Sequence[str], measured: Sequence[tuple[int, int]],
                     modelled: Sequence[tuple[int, int]], *, world_size: int) -> Figure:
    """All-reduces per step, forward and backward, counted on the ranks next to the f/g model.

    ``measured`` and ``modelled`` hold one (forward, backward) pair per label, e.g. from
    ``CommDebugMode.get_total_counts()`` and from ``costmodel.comm_volume("tp", ...)``.
    """
    _require(len(labels) > 0, "no cases to draw: pass at least one label")
    _require(len(measured) == len(labels) == len(modelled),
             f"pass one (forward, backward) pair per label: {len(labels)} labels, "
             f"{len(measured)} measured, {len(modelled)} modelled")
    pairs = list(measured) + list(modelled)
    _require(all(len(pair) == 2 and min(pair) >= 0 for pair in pairs),
             "each entry must be a (forward, backward) pair of counts >= 0")
    fig = CourseFigure(figsize=(9.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.2
    bars = (("forward, measured", 0, measured, -1.5, {}),
            ("forward, f/g model", 0, modelled, -0.5, {"alpha": 0.4, "hatch": "//"}),
            ("backward, measured", 1, measured, 0.5, {}),
            ("backward, f/g model", 1, modelled, 1.5, {"alpha": 0.4, "hatch": "//"}))
    for label, direction, counts, offset, style in bars:
        ax.bar([i + offset * width for i in range(len(labels))], [pair[direction] for pair in counts],
               width, color=(_FORWARD, _BACKWARD)[direction], label=label, **style)
    ax.set_xticks(range(len(labels)), list(labels))
    ax.set_ylabel("all-reduces per step (count)")
    ax.set_ylim(0, max(max(pair) for pair in pairs) + 1)
    ax.set_title(f"All-reduces counted on {world_size} ranks vs the f/g model")
    fig.legend(loc="outside right upper", fontsize=8)
    return fig


def collective_time_fit(sizes_bytes: Sequence[float], times_s: Sequence[float],
                        fitted_s: Sequence[float], *, title: str) -> Figure:
    """Measured seconds per collective against its buffer size (log-log, bytes with binary
    prefixes, time in microseconds), with the alpha-beta model's seconds at the same sizes."""
    _require(len(sizes_bytes) >= 2, "pass at least two message sizes")
    _require(len(sizes_bytes) == len(times_s) == len(fitted_s),
             "sizes_bytes, times_s and fitted_s must have one entry per size")
    _require(min(sizes_bytes) > 0 and min(times_s) > 0 and min(fitted_s) > 0,
             "sizes and times must be > 0 (log axes)")
    fig = CourseFigure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.loglog(sizes_bytes, [t * 1e6 for t in times_s], "o", label="measured")
    ax.loglog(sizes_bytes, [t * 1e6 for t in fitted_s], "-", label="alpha-beta model, fitted")
    ax.set_xscale("log", base=2)
    _set_bytes_axis(ax.xaxis, sizes_bytes, max_ticks=8)
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    decades = math.log10(max(max(times_s), max(fitted_s)) / min(min(times_s), min(fitted_s)))
    ax.yaxis.set_minor_formatter(FuncFormatter(_two_and_five) if decades < 2.5 else NullFormatter())
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel("time per call (microseconds)")
    ax.set_title(title, fontsize=10)
    ax.legend()
    return fig


def _two_and_five(value: float, _pos=None) -> str:
    """Minor log-tick label only at 2 and 5 times a power of ten (2, 50, 500, ...), else none."""
    leading = value / 10 ** math.floor(math.log10(value)) if value > 0 else 0
    return _plain_number(value) if round(leading, 6) in (2.0, 5.0) else ""


def tp_layer_times(degrees: Sequence[int], times_by_link: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                   *, domain_size: int, title: str) -> Figure:
    """Per-layer compute and all-reduce time (ms) against the TP degree, one panel per link.

    ``times_by_link`` maps a link's label to (compute seconds, communication seconds), one
    value per degree. Each stacked bar is labelled with its communication share; degrees
    above ``domain_size`` (GPUs in one NVLink domain) are starred as hypothetical there.
    """
    _require(len(degrees) > 0 and all(t >= 1 for t in degrees), "pass TP degrees >= 1")
    _require(len(times_by_link) > 0, "pass at least one link")
    fig = CourseFigure(figsize=(5.5 * len(times_by_link), 4.6), layout="constrained")
    axes = fig.subplots(1, len(times_by_link), sharey=True, squeeze=False)[0]
    for ax, (link, (compute_s, comm_s)) in zip(axes, times_by_link.items()):
        _require(len(compute_s) == len(comm_s) == len(degrees),
                 f"{link}: pass one compute and one communication time per degree")
        compute = [c * 1e3 for c in compute_s]
        comm = [m * 1e3 for m in comm_s]
        positions = range(len(degrees))
        ax.bar(positions, compute, color=_FORWARD, label="compute (falls as 1/t)")
        ax.bar(positions, comm, bottom=compute, color=_BACKWARD, label="4 all-reduces")
        for i, (c, m) in enumerate(zip(compute, comm)):
            ax.text(i, c + m, f"{m / (c + m):.0%}", ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(positions), [f"t={t}" + ("*" if t > domain_size else "") for t in degrees])
        ax.set_title(link, fontsize=10)
        ax.set_xlabel("tensor-parallel degree t (label: communication share)")
    axes[0].set_ylabel("ms per layer, forward + backward")
    axes[0].set_ylim(0, axes[0].get_ylim()[1] * 1.12)
    axes[0].legend(loc="upper right")
    note = (f"\n* t > {domain_size} does not fit in one {domain_size}-GPU NVLink domain"
            if max(degrees) > domain_size else "")
    fig.suptitle(title + note, fontsize=10)
    return fig


def activation_memory_vs_tp(degrees: Sequence[int], tp_bytes: Sequence[float],
                            tp_sp_bytes: Sequence[float], *, title: str) -> Figure:
    """Activation bytes one layer keeps for backward against the TP degree (GB = 1e9 B), with
    tensor parallelism alone and with sequence parallelism added (arXiv:2205.05198)."""
    _require(len(degrees) >= 1 and len(degrees) == len(tp_bytes) == len(tp_sp_bytes),
             "pass one TP and one TP+SP byte count per degree")
    _require(min(degrees) >= 1 and min(tp_bytes) >= 0 and min(tp_sp_bytes) >= 0,
             "degrees must be >= 1 and byte counts >= 0")
    fig = CourseFigure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(degrees, [v / GB for v in tp_bytes], "o-", label=r"TP: $sbh\,(10 + 24/t + 5as/(ht))$")
    ax.plot(degrees, [v / GB for v in tp_sp_bytes], "s-",
            label=r"TP + sequence parallel: $sbh\,(34 + 5as/h)/t$")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(degrees), [str(t) for t in degrees])
    ax.set_xlabel("tensor-parallel degree t")
    ax.set_ylabel("activation GB per layer (GB = 1e9 B)")
    ax.set_ylim(0, max(max(tp_bytes), max(tp_sp_bytes)) / GB * 1.1)
    ax.set_title(title, fontsize=10)
    ax.legend()
    return fig


def step_time_parts(labels: Sequence[str], parts: Mapping[str, Sequence[float]], *, title: str) -> Figure:
    """Stacked bars of seconds per training step, one bar per layout, one colour per part
    (compute, TP all-reduces, ...), with each bar's total written on top (nothing overlaps)."""
    _require(len(labels) > 0, "pass at least one layout label")
    _require(0 < len(parts) <= len(_PART_COLORS), f"pass 1 to {len(_PART_COLORS)} parts of the step")
    _require(all(len(values) == len(labels) for values in parts.values()),
             "each part needs one value (seconds) per layout")
    _require(all(v >= 0 for values in parts.values() for v in values), "times must be >= 0 seconds")
    fig = CourseFigure(figsize=(10, 4.4), layout="constrained")
    ax = fig.add_subplot()
    bottoms = [0.0] * len(labels)
    for color, (part, values) in zip(_PART_COLORS, parts.items()):
        ax.bar(range(len(labels)), values, bottom=bottoms, color=color, label=part, width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    for i, total in enumerate(bottoms):
        ax.text(i, total, f"{total:.3g} s", ha="center", va="bottom")
    ax.set_xticks(range(len(labels)), list(labels))
    ax.set_ylabel("seconds per step (no overlap)")
    ax.set_ylim(0, max(bottoms) * 1.18 if max(bottoms) > 0 else 1)
    ax.set_title(title, fontsize=10)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig
