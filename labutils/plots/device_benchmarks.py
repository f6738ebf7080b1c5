"""Figures of what chapter 2 measures on the student's device: matrix units against vector
lanes, copy bandwidth across the cache hierarchy, and the fixed cost of one matmul call.

Units: FLOP/s, bytes (binary prefixes on byte axes), GB/s = 1e9 B/s, seconds shown in
microseconds.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import CourseFigure, _plain_number, _require, _set_bytes_axis, format_bytes_binary


def matrix_unit_speedup(throughput: Mapping[str, float], baseline: str, *, device_label: str,
                        datasheet: tuple[str, float] | None = None) -> Figure:
    """Bars of matmul throughput relative to ``baseline`` (one of the keys), each labelled "N.Nx".

    ``throughput``: label -> measured FLOP/s (e.g. "float32", "bfloat16"); ``datasheet``:
    (label, ratio) drawn as one more bar in another colour, e.g. a datasheet's BF16 tensor
    peak over its FP32 peak. ``device_label`` says what was measured ("this CPU (one core)").
    """
    _require(baseline in throughput, f"baseline {baseline!r} is not one of the measured {list(throughput)}")
    _require(all(value > 0 for value in throughput.values()), "throughputs must be positive FLOP/s")
    _require(datasheet is None or datasheet[1] > 0, f"the datasheet ratio must be positive, got {datasheet!r}")
    labels = list(throughput)
    ratios = [throughput[label] / throughput[baseline] for label in labels]
    colors = ["#4c72b0"] * len(labels)
    if datasheet is not None:
        labels.append(datasheet[0])
        ratios.append(datasheet[1])
        colors.append("#55a868")

    fig = CourseFigure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(labels, ratios, color=colors)
    for index, ratio in enumerate(ratios):
        ax.annotate(f"{ratio:.1f}x", (index, ratio), ha="center", va="bottom")
    ax.set_ylim(0, max(ratios) * 1.15)
    ax.set_ylabel(f"matmul throughput relative to {baseline} (x)")
    ax.set_title(f"Matrix units vs vector lanes on {device_label} (blue: measured, green: datasheet)")
    return fig


def cache_bandwidth_sweep(working_set_bandwidth: Mapping[int, float],
                          caches: Sequence[tuple[str, int]] = (), *,
                          datasheet: tuple[str, float] | None = None) -> Figure:
    """Copy bandwidth (GB/s, read + write counted) against working-set size (bytes), with the
    cache sizes as vertical lines.

    ``working_set_bandwidth``: working set in bytes (source + destination) -> B/s;
    ``caches``: (label, bytes) such as ("L2", 1048576); ``datasheet``: (label, B/s) drawn as
    a horizontal line (a GPU's HBM bandwidth).
    """
    _require(len(working_set_bandwidth) >= 2, "pass at least two working-set sizes and their bandwidths")
    _require(all(size > 0 and value > 0 for size, value in working_set_bandwidth.items()),
             "working-set sizes (bytes) and bandwidths (B/s) must be positive")
    _require(all(size > 0 for _, size in caches), f"cache sizes must be positive bytes, got {list(caches)}")
    sizes = sorted(working_set_bandwidth)

    fig = CourseFigure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes, [working_set_bandwidth[size] / 1e9 for size in sizes], marker="o",
            label="copy, read + write (measured)")
    for (label, size), style in zip(caches, (":", "-.", "--", "-", ":")):
        ax.axvline(size, color="grey", linestyle=style, label=f"{label} size: {format_bytes_binary(size)}")
    if datasheet is not None:
        _require(datasheet[1] > 0, f"the datasheet bandwidth must be positive B/s, got {datasheet!r}")
        ax.axhline(datasheet[1] / 1e9, color="crimson", linestyle="--",
                   label=f"{datasheet[0]}: {datasheet[1] / 1e9:,.0f} GB/s")
    ax.set_xscale("log", base=2)
    _set_bytes_axis(ax.xaxis, sizes + [size for _, size in caches])
    ax.set_xlabel("working set: source + destination (bytes)")
    ax.set_ylabel("bandwidth (GB/s = 1e9 B/s)")
    ax.set_title("Copy bandwidth across the memory hierarchy")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    return fig


def call_time_vs_size(measured_s: Mapping[int, float], model_s: Mapping[int, float], *,
                      model_label: str, dtype: str = "float32") -> Figure:
    """Time of one N x N matmul call (microseconds) against N, measured and modelled, log-log.

    ``measured_s`` and ``model_s``: N -> seconds per call, for the same N; ``model_label``
    names the model drawn dashed (e.g. "t0 + 2N^3/P").
    """
    _require(len(measured_s) >= 2, "pass at least two sizes N and their measured seconds")
    _require(set(measured_s) == set(model_s), "measured_s and model_s must have the same sizes N")
    _require(all(n > 0 and measured_s[n] > 0 and model_s[n] > 0 for n in measured_s),
             "sizes and seconds must be positive")
    sizes = sorted(measured_s)
    fig = CourseFigure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes, [measured_s[n] * 1e6 for n in sizes], marker="o", label="measured torch.matmul")
    ax.plot(sizes, [model_s[n] * 1e6 for n in sizes], linestyle="--", label=model_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel(f"N (N x N times N x N, {dtype})")
    ax.set_ylabel("time per call (microseconds)")
    ax.set_title("Below some size, every call costs the same")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize=9)
    return fig
