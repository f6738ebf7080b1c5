"""Communication figures (chapters 6, 7, 8 and 10): volume per strategy from ``labutils.costmodel``
in GB, measured bus bandwidth against a fitted model, all-reduce times, ZeRO traffic measured
against the ZeRO paper's model."""
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


def busbw_with_model(records, model_sizes: Sequence[float], model_busbw_GBps: Sequence[float], *,
                     model_label: str) -> Figure:
    """:func:`labutils.plots.bandwidth_vs_size` of measured ``records`` with a model's busbw
    (GB/s = 1e9 B/s, one value per size in ``model_sizes``, bytes) drawn as a black line."""
    from labutils.plots.bandwidth import bandwidth_vs_size

    _require(len(model_sizes) > 0 and len(model_sizes) == len(model_busbw_GBps),
             "pass one model busbw (GB/s) per model size (bytes)")
    _require(all(value > 0 for value in model_busbw_GBps), "model busbw values must be positive GB/s")
    fig = bandwidth_vs_size(records)
    fig.axes[0].plot(model_sizes, model_busbw_GBps, color="black", linewidth=1, label=model_label)
    for legend in list(fig.legends):
        legend.remove()
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=9)
    return fig


_SERIES_COLORS = ("#c44e52", "#4c72b0", "#8172b2", "#55a868", "#dd8452")


def allreduce_time_comparison(group_labels: Sequence[str], series_seconds: dict[str, Sequence[float]], *,
                              ylabel: str, title: str) -> Figure:
    """Grouped bars, log scale, in ms: one group per model size, one bar per source of a time.

    ``series_seconds`` maps a legend label (a claimed table, a model at some bandwidth, ...)
    to one time in seconds per group. Each bar is annotated with its value.
    """
    _require(len(group_labels) > 0 and len(series_seconds) > 0, "pass at least one group and one series")
    _require(all(len(values) == len(group_labels) for values in series_seconds.values()),
             "every series needs one time per group")
    _require(all(value > 0 for values in series_seconds.values() for value in values),
             "times must be positive seconds (the axis is logarithmic)")
    fig = CourseFigure(figsize=(9, 4.6), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(series_seconds)
    for index, (label, values) in enumerate(series_seconds.items()):
        offsets = [group + (index - (len(series_seconds) - 1) / 2) * width for group in range(len(group_labels))]
        bars = ax.bar(offsets, [value * 1e3 for value in values], width, label=label,
                      color=_SERIES_COLORS[index % len(_SERIES_COLORS)])
        for bar, value in zip(bars, values):
            ax.annotate(_milliseconds_text(value), (bar.get_x() + bar.get_width() / 2, value * 1e3),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xticks(range(len(group_labels)), list(group_labels))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=1, fontsize=8, frameon=False)
    return fig


def zero_comm_measured(labels: Sequence[str], modelled_bytes: Sequence[float],
                       measured_bytes: Sequence[float], parameter_bytes: float, *, world_size: int,
                       extra_model: tuple[int, float, str] | None = None) -> Figure:
    """Bytes through one rank's link per step, as a multiple of the parameter bytes:
    a model bar and a measured bar per configuration (DDP, ZeRO stages, FSDP ...).

    ``modelled_bytes`` and ``measured_bytes`` are bytes per rank per step, one per label;
    ``parameter_bytes`` is N x bytes per value (the unit of the y axis). ``extra_model``
    (index, bytes, label) draws one more model value as a black diamond on that configuration.
    """
    _require(len(labels) > 0 and len(labels) == len(modelled_bytes) == len(measured_bytes),
             "pass one modelled and one measured byte count per label")
    _require(parameter_bytes > 0, f"parameter_bytes must be positive, got {parameter_bytes}")
    _require(min(list(modelled_bytes) + list(measured_bytes)) >= 0, "byte counts must be non-negative")
    fig = CourseFigure(figsize=(10, 4.8), layout="constrained")
    ax = fig.add_subplot()
    positions = range(len(labels))
    model_units = [value / parameter_bytes for value in modelled_bytes]
    measured_units = [value / parameter_bytes for value in measured_bytes]
    ax.bar([p - 0.2 for p in positions], model_units, 0.4, color="#bbbbbb",
           label="ZeRO paper's model: 2(d-1)/d N, or 3(d-1)/d N for stage 3")
    bars = ax.bar([p + 0.2 for p in positions], measured_units, 0.4, color="#4c72b0",
                  label="measured on the ranks (one step)")
    for bar, value in zip(bars, measured_units):
        ax.text(bar.get_x() + bar.get_width() / 2, value / 2, f"{value:.2f}", ha="center", va="center",
                fontsize=9, color="white")
    highest = max(model_units + measured_units)
    if extra_model is not None:
        index, value, label = extra_model
        _require(0 <= index < len(labels), f"extra_model index {index} is not one of the {len(labels)} bars")
        ax.plot([index + 0.2], [value / parameter_bytes], "kD", markersize=8, label=label)
        highest = max(highest, value / parameter_bytes)
    ax.set_xticks(list(positions), list(labels))
    ax.set_ylabel("bytes through each rank's link per step\n/ parameter bytes")
    ax.set_ylim(0, 1.2 * highest if highest > 0 else 1)
    ax.set_title(f"Communication per training step on d = {world_size} ranks")
    fig.legend(loc="outside lower center", ncols=1, fontsize=8, frameon=False)
    return fig


def _milliseconds_text(seconds: float) -> str:
    """A bar label in ms without scientific notation: 0.00412 -> "4.12", 4.9 -> "4,900"."""
    milliseconds = seconds * 1e3
    return f"{milliseconds:,.0f}" if milliseconds >= 1000 else f"{milliseconds:.3g}"
