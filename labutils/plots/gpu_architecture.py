"""Figures of chapter 2's architecture pictures: hardware growth across generations, NVLink
domains, side-by-side comparisons, a CUDA launch's thread blocks, warp divergence, a
systolic array's wavefront and the hop counts of a torus.

Nothing here models anything: the notebook computes the numbers (from
``labutils.costmodel.roofline.DEVICES`` or its own small simulations) and passes them in.
Units: B/s drawn as TB/s = 1e12 B/s, fractions drawn as percentages.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import CourseFigure, _plain_number, _require


def generation_growth(years: Mapping[str, float], metrics: Mapping[str, Sequence[float]]) -> Figure:
    """Each metric relative to its first GPU's value (x), against the year announced, log y.

    ``years``: GPU name -> year, in the order of the values; ``metrics``: metric name ->
    one value per GPU in any positive unit (FLOP/s, B/s), divided by the first.
    """
    names = list(years)
    _require(len(names) >= 2, "pass at least two GPUs with the year each was announced")
    _require(len(metrics) > 0, "pass at least one metric")
    for metric, values in metrics.items():
        _require(len(values) == len(names), f"{metric}: {len(values)} values for {len(names)} GPUs")
        _require(all(value > 0 for value in values), f"{metric}: values must be positive")
    fig = CourseFigure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot(title="Compute grows faster than the bandwidth that feeds it", xlabel="year announced",
                         ylabel=f"relative to {names[0]} (x)", yscale="log")
    for metric, values in metrics.items():
        ax.plot([years[name] for name in names], [value / values[0] for value in values], marker="o", label=metric)
    first_metric = next(iter(metrics.values()))
    for name, value in zip(names, first_metric):
        ax.annotate(name, (years[name], value / first_metric[0]), xytext=(0, 6), textcoords="offset points",
                    ha="center", fontsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig


def nvlink_domains(domain_bandwidth: Mapping[str, float]) -> Figure:
    """Horizontal bars: NVLink bandwidth of one NVLink domain, all GPUs and both directions
    added (B/s, drawn in TB/s), each bar labelled with its value."""
    _require(len(domain_bandwidth) > 0, "pass at least one NVLink domain")
    _require(all(value > 0 for value in domain_bandwidth.values()), "bandwidths must be positive B/s")
    values = [value / 1e12 for value in domain_bandwidth.values()]
    fig = CourseFigure(figsize=(8, 0.6 * len(values) + 1.5), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(list(domain_bandwidth), values, color="#4c72b0")
    for index, value in enumerate(values):
        ax.annotate(f"{value:.1f} TB/s", (value, index), xytext=(4, 0), textcoords="offset points", va="center")
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlim(min(values) / 2, max(values) * 8)
    ax.set_xlabel("NVLink bandwidth of one NVLink domain, all GPUs, both directions (TB/s = 1e12 B/s)")
    ax.set_title("How far one NVLink domain reaches")
    return fig


def grouped_bars(categories: Sequence[str], bars: Mapping[str, Sequence[float]], *, ylabel: str,
                 title: str, lines: Mapping[str, Sequence[float]] | None = None) -> Figure:
    """Bars grouped by category (one colour per series), optional lines over the same categories.

    ``bars`` and ``lines``: series label -> one value per category, in the unit ``ylabel``
    names. The legend sits below the axes, where it hides no bar.
    """
    _require(len(categories) > 0 and len(bars) > 0, "pass at least one category and one series of bars")
    for label, values in {**bars, **(lines or {})}.items():
        _require(len(values) == len(categories), f"{label}: {len(values)} values for {len(categories)} categories")
    width = 0.8 / len(bars)
    fig = CourseFigure(figsize=(max(6.5, 1.8 * len(categories)), 4.5), layout="constrained")
    ax = fig.add_subplot()
    for index, (label, values) in enumerate(bars.items()):
        offset = width * (index - (len(bars) - 1) / 2)
        ax.bar([position + offset for position in range(len(categories))], values, width=width, label=label)
    for index, (label, values) in enumerate((lines or {}).items()):
        ax.plot(range(len(categories)), values, marker="^os*"[index % 4], linestyle="--",
                color=f"C{(len(bars) + index) % 10}", label=label)
    ax.set_xticks(range(len(categories)), list(categories))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    return fig


def thread_block_map(owner, block: int) -> Figure:
    """Which thread block computes each element of a matrix, for a (block x block) 2-D launch.

    ``owner``: 2-D integer array, element -> linear block index (blockIdx.y * gridDim.x +
    blockIdx.x); colours repeat every 20 blocks.
    """
    import numpy as np

    owner = np.asarray(owner)
    _require(owner.ndim == 2 and owner.size > 0, f"owner must be a non-empty 2-D array, got shape {owner.shape}")
    _require(block >= 1, f"block must be >= 1 thread, got {block!r}")
    fig = CourseFigure(figsize=(7, 5), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(owner % 20, cmap="tab20", interpolation="nearest", vmin=0, vmax=19)
    ax.set_title(f"Which {block}x{block} block computes each element (colour = blockIdx.y * gridDim.x + blockIdx.x)",
                 fontsize=10)
    ax.set_xlabel("column (element) = blockIdx.x * blockDim.x + threadIdx.x")
    ax.set_ylabel("row (element) = blockIdx.y * blockDim.y + threadIdx.y")
    return fig


def simt_efficiency_bars(efficiency: Mapping[str, Mapping[str, float]]) -> Figure:
    """Horizontal bars of SIMT efficiency (useful / issued lane-slots, drawn in %) per branch
    pattern; ``efficiency``: pattern -> {series label such as "warp of 32": fraction 0..1}."""
    _require(len(efficiency) > 0, "pass at least one branch pattern")
    series = list(next(iter(efficiency.values())))
    for pattern, values in efficiency.items():
        _require(list(values) == series, f"{pattern}: series {list(values)} differ from {series}")
        _require(all(0 <= value <= 1 for value in values.values()), f"{pattern}: efficiencies are fractions 0..1")
    height = 0.8 / len(series)
    fig = CourseFigure(figsize=(9, 0.5 * len(efficiency) + 2), layout="constrained")
    ax = fig.add_subplot()
    for index, label in enumerate(series):
        offset = height * (index - (len(series) - 1) / 2)
        ax.barh([row + offset for row in range(len(efficiency))],
                [100 * values[label] for values in efficiency.values()], height=height, label=label)
    ax.set_yticks(range(len(efficiency)), list(efficiency))
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("SIMT efficiency: useful / issued lane-slots (%)")
    ax.set_title("Branch divergence costs lanes, not correctness")
    fig.legend(loc="outside lower center", ncols=len(series), fontsize=9)
    return fig


def systolic_wavefront(active: Sequence, snapshots: Sequence[int]) -> Figure:
    """Busy cells of a systolic array at a few cycles, and the share of busy cells per cycle.

    ``active``: one 2-D boolean array per cycle (True = the cell multiplies that cycle);
    ``snapshots``: the cycles to draw as pictures (e.g. filling, full, draining).
    """
    import numpy as np

    frames = [np.asarray(frame, dtype=bool) for frame in active]
    _require(len(frames) > 0 and frames[0].ndim == 2, "active must hold one 2-D array per cycle")
    _require(len(snapshots) > 0 and all(0 <= t < len(frames) for t in snapshots),
             f"snapshots must be cycles in 0..{len(frames) - 1}, got {list(snapshots)}")
    cells = frames[0].size
    fig = CourseFigure(figsize=(3 * (len(snapshots) + 1), 3.4), layout="constrained")
    axes = fig.subplots(1, len(snapshots) + 1)
    for ax, cycle in zip(axes, snapshots):
        ax.imshow(frames[cycle], cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"cycle {cycle}: {int(frames[cycle].sum())} of {cells} cells busy", fontsize=9)
        ax.set_xlabel("column of the array")
        ax.set_ylabel("row of the array")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[-1].plot([100 * frame.mean() for frame in frames])
    axes[-1].set_xlabel("cycle")
    axes[-1].set_ylabel("cells busy (%)")
    axes[-1].set_title("fill, steady state, drain", fontsize=9)
    return fig


def torus_hop_distribution(hop_counts: Mapping[str, Sequence[int]], chips: int) -> Figure:
    """Share of destinations (%) at each hop count from one chip, one line per topology.

    ``hop_counts``: topology name -> number of chips at 0, 1, 2, ... hops (each sums to
    ``chips``); the legend gives each topology's mean and largest hop count.
    """
    import numpy as np

    _require(len(hop_counts) > 0, "pass at least one topology's hop counts")
    fig = CourseFigure(figsize=(8, 4.3), layout="constrained")
    ax = fig.add_subplot()
    for name, counts in hop_counts.items():
        counts = np.asarray(counts, dtype=float)
        _require(counts.ndim == 1 and counts.sum() == chips and (counts >= 0).all(),
                 f"{name}: hop counts must be non-negative and add up to {chips} chips")
        hops = np.arange(len(counts))
        mean = (hops * counts).sum() / chips
        ax.plot(hops, 100 * counts / chips, label=f"{name}: mean {mean:.1f} hops, max {len(counts) - 1}")
    ax.set_xlabel("hops from one chip to another")
    ax.set_ylabel("share of destinations (%)")
    ax.set_title(f"{chips:,} chips: a third dimension shortens every path")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=9)
    return fig
