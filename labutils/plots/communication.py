"""Communication volume per strategy (chapters 6, 8 and 10), from ``labutils.costmodel``, in GB."""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import GB, CourseFigure, _plain_number, _require


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
