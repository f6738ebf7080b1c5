"""Figures of chapter 1 (cluster metrics): throughput per precision, training time, MFU,
utilisation, communication efficiency, tail latency, step breakdown, energy, reliability
and the CPU's share.

Every function draws numbers the notebook measured or modelled; none measures or models
anything itself. Units: FLOP/s (drawn in TFLOP/s = 1e12 FLOP/s), seconds (drawn in ms or
us where said), bandwidth in GB/s = 1e9 B/s, fractions in [0, 1] (drawn as %).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from labutils.plots.base import CourseFigure, _require, _set_bytes_axis

_BLUE, _GREEN, _ORANGE, _RED, _GREY = "#4c72b0", "#55a868", "#dd8452", "#c44e52", "#8c8c8c"
_PHASE_COLORS = (_GREY, _BLUE, _GREEN, _RED, _ORANGE, "#8172b3", "#937860")


def _require_positive(values: Sequence[float], what: str) -> None:
    _require(len(values) > 0, f"no {what} to draw")
    _require(all(isinstance(v, (int, float)) and v > 0 and math.isfinite(v) for v in values),
             f"{what} must be positive finite numbers, got {list(values)!r}")


def _require_fractions(values: Sequence[float], what: str) -> None:
    _require(len(values) > 0, f"no {what} to draw")
    _require(all(isinstance(v, (int, float)) and v >= 0 and math.isfinite(v) for v in values),
             f"{what} must be fractions >= 0 (0.4 = 40%), got {list(values)!r}")


def _labelled_bars(ax, labels: Sequence[str], heights: Sequence[float], color: str, text: str) -> None:
    """Bars with their value printed above each (``text`` is a format string for the value)."""
    ax.bar(list(labels), list(heights), color=color)
    for index, height in enumerate(heights):
        ax.annotate(text.format(height), (index, height), ha="center", va="bottom", fontsize=9)


def precision_throughput(measured_flops: Mapping[str, float], datasheet_flops: Mapping[str, float], *,
                         measured_label: str, datasheet_label: str) -> Figure:
    """Matrix-multiply FLOP/s per precision: measured here (left) and a datasheet's dense peaks (right).

    Both mappings go from a precision's name to FLOP/s; both are drawn in TFLOP/s on log axes.
    """
    _require_positive(list(measured_flops.values()), "measured FLOP/s")
    _require_positive(list(datasheet_flops.values()), "datasheet FLOP/s")
    fig = CourseFigure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    _labelled_bars(left, list(measured_flops), [v / 1e12 for v in measured_flops.values()], _BLUE, "{:.3g}")
    left.set_ylabel("TFLOP/s (best of the timed iterations)")
    left.set_title(f"Measured on {measured_label}")
    _labelled_bars(right, list(datasheet_flops), [v / 1e12 for v in datasheet_flops.values()], _GREEN, "{:.4g}")
    right.set_ylabel("TFLOP/s (dense peak)")
    right.set_title(datasheet_label)
    for ax in (left, right):
        ax.set_yscale("log")
        ax.set_xlabel("precision")
        ax.tick_params(axis="x", labelsize=8)
    return fig


def training_time(gpu_counts: Sequence[int], days_by_model: Mapping[str, Sequence[float]], *,
                  reference_days: float = 30, reference_label: str = "one month",
                  title: str = "Training time against the number of GPUs") -> Figure:
    """Days to train each model (one line per entry of ``days_by_model``) against GPUs, log-log."""
    _require_positive(list(gpu_counts), "GPU counts")
    _require(len(days_by_model) > 0, "no model to draw: pass {label: days per GPU count}")
    for label, days in days_by_model.items():
        _require(len(days) == len(gpu_counts), f"{label!r}: one number of days per GPU count")
        _require_positive(list(days), f"days of {label!r}")
    fig = CourseFigure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for label, days in days_by_model.items():
        ax.plot(list(gpu_counts), list(days), marker="o", markersize=3, label=label)
    ax.axhline(reference_days, color="grey", linestyle=":", label=reference_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of GPUs (perfect scaling)")
    ax.set_ylabel("training time (days)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def mfu_bars(labels: Sequence[str], mfu: Sequence[float], *, xlabel: str, title: str) -> Figure:
    """MFU (fractions, drawn in %) of one training step per configuration (e.g. batch size)."""
    _require(len(labels) == len(mfu), "pass one label per MFU value")
    _require_fractions(list(mfu), "MFU values")
    fig = CourseFigure(figsize=(6.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(list(labels), [100 * value for value in mfu], color=_BLUE)
    for index, value in enumerate(mfu):
        ax.annotate(f"{value:.1%}", (index, 100 * value), ha="center", va="bottom")
    ax.set_ylim(0, max(1.0, 115 * max(mfu)))          # room for the labels above the bars
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MFU (% of peak FLOP/s)")
    ax.set_title(title)
    return fig


def busy_vs_useful(workloads: Sequence[str], busy: Sequence[float], peak_share: Sequence[float], *,
                   ceiling: float, ceiling_label: str) -> Figure:
    """Per workload: the share of time the device was busy and the share of peak FLOP/s it reached.

    Fractions (0.4 = 40%), drawn in %; ``ceiling`` (a fraction) is drawn as a dotted line.
    """
    _require(len(workloads) == len(busy) == len(peak_share), "pass one busy and one peak share per workload")
    _require_fractions(list(busy) + list(peak_share) + [ceiling], "busy and peak shares")
    fig = CourseFigure(figsize=(7, 3.8), layout="constrained")
    ax = fig.add_subplot()
    positions = range(len(workloads))
    ax.bar([p - 0.2 for p in positions], [100 * b for b in busy], width=0.4, color=_ORANGE,
           label="busy (utilisation)")
    ax.bar([p + 0.2 for p in positions], [100 * s for s in peak_share], width=0.4, color=_BLUE,
           label="share of peak FLOP/s (MFU-like)")
    ax.axhline(100 * ceiling, color=_BLUE, linestyle=":", label=f"{ceiling_label} ({ceiling:.1%})")
    ax.set_xticks(list(positions), list(workloads))
    ax.set_xlabel("workload")
    ax.set_ylabel("% of time (busy) or of peak FLOP/s")
    ax.set_ylim(0, max(115.0, 110 * max(list(busy) + list(peak_share))))
    ax.set_title("Busy is not the same as useful")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def communication_efficiency(allreduce: Sequence[dict], sendrecv: Sequence[dict],
                             model_busbw_GBps: Sequence[float], *, reference_GBps: float,
                             reference_label: str, title: str) -> Figure:
    """All-reduce busbw (in-place) and its alpha-beta model, send/recv bandwidth (out-of-place),
    and a reference bandwidth, in GB/s = 1e9 B/s, against message size (bytes).

    ``allreduce`` and ``sendrecv`` are ``labutils.measure.collectives_bench`` records;
    ``model_busbw_GBps`` has one value per all-reduce record.
    """
    _require(len(allreduce) > 0 and len(sendrecv) > 0, "pass all-reduce and send/recv records")
    _require(len(model_busbw_GBps) == len(allreduce), "one model busbw per all-reduce record")
    _require_positive(list(model_busbw_GBps) + [reference_GBps], "bandwidths")
    sizes = [r["size"] for r in allreduce]
    fig = CourseFigure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes, [r["ip_busbw"] for r in allreduce], marker="o", label="all_reduce busbw (measured)")
    ax.plot(sizes, list(model_busbw_GBps), linestyle="--", label="alpha-beta model fitted to it")
    ax.plot([r["size"] for r in sendrecv], [r["oop_busbw"] for r in sendrecv], marker="s",
            label="send/recv bandwidth (measured)")
    ax.axhline(reference_GBps, color="grey", linestyle=":",
               label=f"reference: {reference_label}, {reference_GBps:.3g} GB/s")
    ax.set_xscale("log", base=2)
    _set_bytes_axis(ax.xaxis, sizes + [r["size"] for r in sendrecv])
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bandwidth (GB/s = 1e9 B/s)")
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)     # below: never over the data
    return fig


def latency_histogram(samples_s: Sequence[float], *, p50_s: float, p99_s: float,
                      title: str = "Latency distribution of one collective") -> Figure:
    """Histogram of latencies (seconds, drawn in microseconds on a log axis) with P50 and P99 lines."""
    _require(len(samples_s) >= 2, "pass at least two latency samples (seconds)")
    _require_positive(list(samples_s) + [p50_s, p99_s], "latencies")
    low, high = min(samples_s) * 1e6, max(samples_s) * 1e6
    bins = [low * 1.05**k for k in range(int(math.log(high / low, 1.05)) + 2)]   # 5% wide, log-spaced
    fig = CourseFigure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax.hist([t * 1e6 for t in samples_s], bins=bins, color=_BLUE)
    ax.axvline(p50_s * 1e6, color="black", label=f"P50 {p50_s * 1e6:.0f} us")
    ax.axvline(p99_s * 1e6, color="crimson", linestyle="--", label=f"P99 {p99_s * 1e6:.0f} us")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))     # 100, 200, 500, 1000 ... us
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time of one operation, slowest rank (microseconds)")
    ax.set_ylabel("count (operations)")
    ax.set_title(title)
    ax.legend(loc="upper right")
    return fig


def step_breakdown(rows: Mapping[str, Mapping[str, float]], *, hatched: Sequence[str] = (),
                   title: str = "Where the time of one step goes") -> Figure:
    """Stacked horizontal bars, one row per entry of ``rows`` (label -> {phase: seconds}),
    drawn in milliseconds; every row must list the same phases in the same order. Rows whose
    label is in ``hatched`` are drawn hatched (a model rather than a measurement)."""
    _require(len(rows) > 0, "no rows to draw: pass {row label: {phase: seconds}}")
    phases = list(next(iter(rows.values())))
    _require(0 < len(phases) <= len(_PHASE_COLORS), f"between 1 and {len(_PHASE_COLORS)} phases per row")
    for label, row in rows.items():
        _require(list(row) == phases, f"row {label!r} must have the phases {phases}, got {list(row)}")
        _require(all(v >= 0 and math.isfinite(v) for v in row.values()), f"row {label!r}: seconds must be >= 0")
    fig = CourseFigure(figsize=(8, 1.6 + 0.6 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    for index, (label, row) in enumerate(rows.items()):
        left = 0.0
        for (phase, seconds), color in zip(row.items(), _PHASE_COLORS):
            ax.barh(index, seconds * 1e3, left=left, color=color, edgecolor="white",
                    hatch="//" if label in hatched else None, label=phase if index == 0 else None)
            left += seconds * 1e3
    ax.set_yticks(range(len(rows)), list(rows))
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step")
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig


def energy_efficiency(devices: Sequence[str], peak_per_watt: Sequence[float], delivered_per_watt: Sequence[float],
                      *, delivered_label: str, measured_per_watt: float | None = None,
                      title: str = "Energy efficiency by generation") -> Figure:
    """FLOP/s per watt (drawn in TFLOP/s per W) of each device at peak and as delivered
    (e.g. at an assumed MFU), with an optional measured value as a dashed line."""
    _require(len(devices) == len(peak_per_watt) == len(delivered_per_watt), "one value of each kind per device")
    _require_positive(list(peak_per_watt) + list(delivered_per_watt), "FLOP/s per watt")
    _require(measured_per_watt is None or measured_per_watt > 0, "measured_per_watt must be positive or None")
    fig = CourseFigure(figsize=(7, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(list(devices), [v / 1e12 for v in peak_per_watt], color=_GREEN, label="datasheet peak / max power")
    ax.bar(list(devices), [v / 1e12 for v in delivered_per_watt], color=_BLUE, label=delivered_label)
    if measured_per_watt is not None:
        ax.axhline(measured_per_watt / 1e12, color="crimson", linestyle="--", label="measured on this GPU")
    ax.set_xlabel("GPU")
    ax.set_ylabel("TFLOP/s per watt")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def reliability(gpu_counts: Sequence[int], interruptions_per_day: Sequence[float],
                goodput_by_label: Mapping[str, Sequence[float]], *, goodput_title: str,
                failures_title: str = "Failures grow with the job") -> Figure:
    """Job interruptions per day (left, log-log) and goodput (fractions, drawn in %) per
    recovery time (right, one line per entry of ``goodput_by_label``) against GPUs in the job."""
    _require_positive(list(gpu_counts), "GPU counts")
    _require(len(interruptions_per_day) == len(gpu_counts), "one interruption rate per GPU count")
    _require_positive(list(interruptions_per_day), "interruptions per day")
    for label, goodput in goodput_by_label.items():
        _require(len(goodput) == len(gpu_counts), f"{label!r}: one goodput per GPU count")
        _require_fractions(list(goodput), f"goodput of {label!r}")
    fig = CourseFigure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(list(gpu_counts), list(interruptions_per_day), marker="o", markersize=3)
    left.set_yscale("log")
    left.set_ylabel("interruptions per day")
    left.set_title(failures_title)
    for label, goodput in goodput_by_label.items():
        right.plot(list(gpu_counts), [100 * g for g in goodput], label=label)
    right.set_ylabel("goodput (% of wall time)")
    right.set_title(goodput_title)
    right.legend()
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs in the job")
    return fig


def cores_per_gpu(models: Sequence[str], cores: Sequence[float], *,
                  title: str = "Small models eat data fastest") -> Figure:
    """CPU cores each GPU needs for its input pipeline, per model (log axis), with a one-core line."""
    _require(len(models) == len(cores), "one number of cores per model")
    _require_positive(list(cores), "cores per GPU")
    fig = CourseFigure(figsize=(6.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    _labelled_bars(ax, list(models), list(cores), _BLUE, "{:.3g}")
    ax.axhline(1, color="grey", linestyle=":", label="one core")
    ax.set_yscale("log")
    ax.set_xlabel("model parameters")
    ax.set_ylabel("CPU cores per GPU (tokenizing only)")
    ax.set_title(title)
    ax.legend()
    return fig
