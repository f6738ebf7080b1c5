"""Figures of chapter 5: where a collective's data goes, how many bytes each rank sends, how long
collectives take (measured, fitted, modelled) and claims set against what a link allows.

Times in seconds on input, drawn in ms or us as each axis says; sizes in bytes (binary prefixes on
byte axes, as nccl-tests' sizes are powers of two); n ranks take part in a collective.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from labutils.plots.base import CourseFigure, _require, _set_bytes_axis

#: colour of a box holding a sum over all ranks
_SUM_COLOR = "#d9d9d9"
#: the collectives whose result is a sum (grey boxes)
_REDUCING = ("reduce", "all_reduce", "reduce_scatter")
_RANK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _owner(value: float) -> int:
    """The rank a value came from under chapter 5's convention: rank r holds 10(r+1) + k."""
    return int(value) // 10 - 1


def _draw_buffer(ax, x0: float, row: int, values: Sequence[float], reduced: bool) -> None:
    """One rank's buffer as boxes: coloured by the rank each value came from, grey for a sum."""
    for k, value in enumerate(values):
        color = _SUM_COLOR if reduced else _RANK_COLORS[_owner(value) % len(_RANK_COLORS)]
        ax.add_patch(Rectangle((x0 + k, row), 0.92, 0.85, facecolor=color, edgecolor="black", linewidth=0.5))
        ax.text(x0 + k + 0.46, row + 0.43, f"{value:g}", ha="center", va="center", fontsize=8)


def collective_buffers(results: Sequence[Mapping[str, tuple]]) -> Figure:
    """Before and after of each collective, one panel per collective, one row per rank.

    ``results[r][op]`` is rank r's ``(input values, output values)`` for collective ``op``
    (lists or 1-D tensors; output ``None`` where it is undefined, e.g. reduce off the root).
    Values follow chapter 5's convention, rank r holds 10(r+1) + k, so a box takes the
    colour of the rank its value came from (the tens digit), or grey where the collective sums.
    """
    _require(len(results) >= 1, "no ranks' results to draw")
    ops = list(results[0])
    _require(len(ops) >= 1, "the ranks returned no collectives")
    _require(all(list(r) == ops for r in results), "every rank must return the same collectives")
    n = len(results)
    rows = math.ceil((len(ops) + 1) / 2)
    fig = CourseFigure(figsize=(12, rows * (0.55 * n + 1.2)), layout="constrained")
    axes = list(fig.subplots(rows, 2).flat)
    for ax, op in zip(axes, ops):
        width = max(len(_as_list(r[op][0])) for r in results)
        for rank, per_rank in enumerate(results):
            before, after = per_rank[op]
            ax.text(-0.3, rank + 0.43, f"rank {rank}", ha="right", va="center", fontsize=9)
            _draw_buffer(ax, 0, rank, _as_list(before), reduced=False)
            if after is None:
                ax.text(width + 2, rank + 0.43, "(undefined off the root)", va="center", fontsize=8, color="grey")
            else:
                _draw_buffer(ax, width + 2, rank, _as_list(after), reduced=op in _REDUCING)
        ax.annotate("", xy=(width + 1.7, n / 2), xytext=(width + 0.3, n / 2),
                    arrowprops=dict(arrowstyle="->", lw=1.5))
        ax.set_xlim(-2.2, 2 * max(width, n) + 2.5)
        ax.set_ylim(n, -0.3)
        ax.axis("off")
        ax.set_title(f"{op}: before -> after", fontsize=11)
    for ax in axes[len(ops):]:  # the spare panel(s)
        ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, color=_RANK_COLORS[r % len(_RANK_COLORS)], label=f"data from rank {r}")
               for r in range(n)]
    handles.append(Rectangle((0, 0), 1, 1, color=_SUM_COLOR, label="a sum over all ranks"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=10)
    fig.suptitle(f"The collectives on {n} ranks, as measured (values returned by the ranks)")
    return fig


def _as_list(values) -> list[float]:
    """A tensor's or a sequence's values as a list of floats."""
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def busbw_factor_curves(ranks: Sequence[int], factors: Mapping[str, Sequence[float]],
                        world_size: int | None = None) -> Figure:
    """Bytes each rank sends, as a multiple of S, against the number of ranks n (log2 axis).

    ``factors`` maps a legend label (e.g. "all-reduce: 2(n-1)/n") to one factor per entry of
    ``ranks`` (``labutils.measure.collectives_bench.bus_bandwidth_factor``); ``world_size`` marks the
    reader's own n with a vertical line.
    """
    _require(len(ranks) >= 2 and min(ranks) >= 1, "ranks must hold at least two counts >= 1")
    _require(len(factors) >= 1, "no factors to draw")
    for label, values in factors.items():
        _require(len(values) == len(ranks), f"{label!r} has {len(values)} factors for {len(ranks)} rank counts")
    fig = CourseFigure(figsize=(8, 4.3), layout="constrained")
    ax = fig.add_subplot()
    for style, (label, values) in zip(("-", "--", ":", "-."), factors.items()):
        ax.plot(ranks, values, style, linewidth=2, label=label)
    if world_size is not None:
        ax.axvline(world_size, color="grey", linewidth=1, label=f"your WORLD_SIZE = {world_size}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.1 * max(max(values) for values in factors.values()))
    ax.set_xlabel("number of ranks n")
    ax.set_ylabel("bytes each rank sends / S (S = buffer size in bytes)")
    ax.set_title("Per-rank volume of the collectives (bandwidth-optimal algorithms)")
    ax.legend(loc="lower right", fontsize=9)
    return fig


def collective_fits(points: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                    fits: Mapping[str, object] | None = None, title: str = "") -> Figure:
    """Measured time per call (us) against size S (bytes), log-log, with fitted alpha-beta lines.

    ``points[op]`` is ``(sizes in bytes, seconds)`` (``collectives_bench.alpha_beta_points``);
    ``fits[op]``, where given, is an ``AlphaBetaFit`` whose ``predict`` draws the model line over
    the measured sizes (same colour as its points).
    """
    _require(len(points) >= 1, "no measurements to draw")
    fits = fits or {}
    all_sizes = []
    fig = CourseFigure(figsize=(11, 5), layout="constrained")
    ax = fig.add_subplot()
    for index, (op, (sizes, times)) in enumerate(points.items()):
        _require(len(sizes) == len(times) and len(sizes) > 0, f"{op}: sizes and times must be non-empty, equal length")
        _require(min(sizes) > 0 and min(times) > 0, f"{op}: sizes and times must be positive for a log-log plot")
        ax.plot(sizes, [t * 1e6 for t in times], "o", color=f"C{index}", label=f"{op}: measured")
        all_sizes += list(sizes)
        if op in fits:
            grid = [min(sizes) * (max(sizes) / min(sizes)) ** (k / 99) for k in range(100)]
            ax.plot(grid, [fits[op].predict(s) * 1e6 for s in grid], "-", color=f"C{index}", alpha=0.7,
                    label=f"{op}: alpha-beta model")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _set_bytes_axis(ax.xaxis, all_sizes)
    ax.set_xlabel("size S (bytes, nccl-tests' size column)")
    ax.set_ylabel("time per call (us)")
    ax.set_title(title or "Collectives: measured and fitted")
    fig.legend(fontsize=8, loc="outside right upper")
    return fig


def algorithm_times(sizes: Sequence[float], panels: Mapping[str, Mapping[str, Sequence[float]]],
                    title: str = "") -> Figure:
    """Model time (ms) of each algorithm against size S (bytes), log-log, one panel per scale.

    ``panels`` maps a panel title (e.g. "n = 64 ranks") to ``{algorithm label: seconds per
    size}``, computed with ``labutils.costmodel.collective_time``. Every time must be positive
    and finite (a log axis cannot show 0).
    """
    _require(len(sizes) >= 2 and min(sizes) > 0, "sizes must hold at least two positive byte counts")
    _require(1 <= len(panels) <= 4, f"draw 1 to 4 panels, got {len(panels)}")
    for name, curves in panels.items():
        _require(1 <= len(curves) <= 4, f"panel {name!r} needs 1 to 4 curves, has {len(curves)}")
        for label, times in curves.items():
            _require(len(times) == len(sizes), f"{label!r} in {name!r}: {len(times)} times for {len(sizes)} sizes")
            _require(all(0 < t < math.inf for t in times), f"{label!r} in {name!r}: times must be positive and finite")
    fig = CourseFigure(figsize=(5 * len(panels) if len(panels) > 1 else 8, 4.3), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (name, curves) in zip(axes, panels.items()):
        # solid under dashed under dotted: curves that coincide (ring and tree at n = 2) stay visible
        for (label, times), style, width in zip(curves.items(), ("-", "--", ":", "-."), (3.5, 2.5, 2, 2)):
            ax.plot(sizes, [t * 1e3 for t in times], linestyle=style, linewidth=width, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _set_bytes_axis(ax.xaxis, sizes, max_ticks=6)
        ax.set_xlabel("all-reduce size S (bytes)")
        ax.set_title(name)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("model time (ms)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside lower center")  # below the panels, off every curve
    if title:
        fig.suptitle(title)
    return fig


def time_comparison_bars(groups: Sequence[str], series: Mapping[str, Sequence[float]],
                         ylabel: str, title: str) -> Figure:
    """Grouped bars of times (seconds in, ms drawn, log axis): one group per case, one bar per series.

    ``series`` maps a legend label ("claimed", "least possible for a ring", ...) to one time
    per entry of ``groups`` (e.g. the message sizes).
    """
    _require(len(groups) >= 1 and len(series) >= 1, "give at least one group and one series")
    for label, times in series.items():
        _require(len(times) == len(groups), f"{label!r} has {len(times)} times for {len(groups)} groups")
        _require(all(0 < t < math.inf for t in times), f"{label!r}: times must be positive and finite seconds")
    width = 0.8 / len(series)
    fig = CourseFigure(figsize=(8, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for k, (label, times) in enumerate(series.items()):
        offset = (k - (len(series) - 1) / 2) * width
        ax.bar([g + offset for g in range(len(groups))], [t * 1e3 for t in times], width=width, label=label)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.legend(fontsize=8, loc="outside lower center", ncols=1)
    return fig
