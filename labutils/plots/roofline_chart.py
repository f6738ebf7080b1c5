"""Roofline figures (chapters 2 and 3): attainable FLOP/s against arithmetic intensity
(FLOP/byte), intensities against ridge points, measured time against the roofline's bound,
and where a workload's time goes. Units: FLOP/s (drawn in TFLOP/s or GFLOP/s), FLOP/B, seconds."""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import CourseFigure, _flops_scale, _plain_number, _require

#: line styles that keep overlapping roofs and ridges apart (same peak, same ridge)
_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
#: ridge-line colours that stand out from the blue bars
_RIDGE_COLORS = ("#c44e52", "#dd8452", "#8172b2", "#55a868", "#937860", "#da8bc3")


def roofline(device, dtype: str, points: Sequence = (), *, intensity_range=None) -> Figure:
    """Roofline of ``device`` for ``dtype`` with operations placed on it (Williams et al. 2009).

    ``device`` is a ``labutils.costmodel.roofline.Device`` (peak FLOP/s per dtype, memory bandwidth
    in B/s). ``points`` holds ``OpCost`` objects (drawn on the roof at their arithmetic
    intensity: the best they can reach) and/or ``(label, intensity FLOP/B, measured FLOP/s)``
    tuples (drawn where they were measured). The roof and the ridge point come from
    ``labutils.costmodel.roofline.attainable`` and ``ridge_point``. ``intensity_range`` (FLOP/B,
    FLOP/B) overrides the x range, which by default spans the points and the ridge.
    """
    import numpy as np

    from labutils.costmodel import roofline as rl

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
            label=f"roof: min(P, I x BW), P = {peak / scale:.4g} {unit}, BW = {device.mem_bandwidth / 1e9:.4g} GB/s")
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
    ax.set_xlabel("arithmetic intensity I (FLOP/byte)")
    ax.set_ylabel(f"attainable / measured throughput ({unit})")
    ax.set_title(f"Roofline: {device.name}, {dtype}")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=9, title=f"peaks: {device.source}",
               title_fontsize=8)
    return fig


def _roofline_point(point, device, dtype: str) -> tuple[str, float, float, bool]:
    """(legend label, intensity FLOP/B, FLOP/s, measured?) for an OpCost or a measured tuple."""
    from labutils.costmodel import roofline as rl

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


def intensity_bars(ops: Sequence, ridges: Mapping[str, float]) -> Figure:
    """Arithmetic intensity (FLOP/B) of each op as a horizontal bar, log x, with the ridge
    points of some devices as vertical lines.

    ``ops``: ``labutils.costmodel.roofline.OpCost`` objects; ``ridges``: device label -> ridge point
    (FLOP/B, from ``labutils.costmodel.roofline.ridge_point``). The legend sits below the axes.
    """
    _require(len(ops) > 0, "pass at least one OpCost (labutils.costmodel.roofline.gemm(...), ...)")
    _require(all(getattr(op, "intensity", 0) > 0 for op in ops), "every op needs a positive intensity (FLOP/B)")
    _require(all(ridge > 0 for ridge in ridges.values()), "ridge points must be positive FLOP/B")
    fig = CourseFigure(figsize=(10, 0.42 * len(ops) + 2.5), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(ops)), [op.intensity for op in ops], color="#4c72b0")
    ax.set_yticks(range(len(ops)), [op.name for op in ops], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    for index, (label, ridge) in enumerate(ridges.items()):
        ax.axvline(ridge, color=_RIDGE_COLORS[index % len(_RIDGE_COLORS)], linestyle=_STYLES[index % len(_STYLES)],
                   linewidth=1.8, label=f"ridge of {label}: {ridge:.0f} FLOP/B")
    ax.set_xlabel("arithmetic intensity I (FLOP/byte, ideal traffic)")
    ax.set_title("Left of a ridge: memory bound on that GPU; right: compute bound")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    return fig


def rooflines_compared(devices: Mapping[str, object], dtype: str,
                       intensity_range: tuple[float, float] = (1, 5000)) -> Figure:
    """The rooflines of several ``labutils.costmodel.roofline.Device`` objects for one dtype, log-log,
    each with its ridge point marked; ``devices``: legend label -> Device."""
    import numpy as np

    from labutils.costmodel import roofline as rl

    _require(len(devices) > 0, "pass at least one device")
    _require(0 < intensity_range[0] < intensity_range[1],
             f"intensity_range must be two increasing positive numbers, got {intensity_range}")
    grid = np.geomspace(*intensity_range, 200)
    fig = CourseFigure(figsize=(8.5, 5), layout="constrained")
    ax = fig.add_subplot()
    for index, (label, device) in enumerate(devices.items()):
        ridge = rl.ridge_point(device, dtype)
        ax.plot(grid, [rl.attainable(float(x), device, dtype) / 1e12 for x in grid], color=f"C{index}",
                linestyle=_STYLES[index % len(_STYLES)], linewidth=2, label=f"{label}: ridge {ridge:.0f} FLOP/B")
        ax.plot([ridge], [device.peak(dtype) / 1e12], marker="D", color=f"C{index}", linestyle="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel("arithmetic intensity I (FLOP/byte)")
    ax.set_ylabel(f"attainable TFLOP/s (dense {rl.canonical_dtype(dtype)})")
    ax.set_title("Rooflines compared (diamond: ridge point)")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig


def predicted_vs_measured(timed: Sequence[tuple[str, str, float, float]]) -> Figure:
    """Measured time against the roofline's lower bound, log-log, with the line measured = bound.

    ``timed``: (label, bound "memory" or "compute", predicted seconds, measured seconds).
    """
    _require(len(timed) > 0, "pass at least one (label, bound, predicted s, measured s)")
    _require(all(len(row) == 4 and row[1] in ("memory", "compute") and row[2] > 0 and row[3] > 0 for row in timed),
             "each row is (label, 'memory' or 'compute', predicted s > 0, measured s > 0)")
    fig = CourseFigure(figsize=(7.5, 6.5), layout="constrained")
    ax = fig.add_subplot()
    for kind, color in (("memory", "#4c72b0"), ("compute", "#dd8452")):
        chosen = [row for row in timed if row[1] == kind]
        ax.scatter([row[2] * 1e6 for row in chosen], [row[3] * 1e6 for row in chosen], color=color,
                   label=f"{kind} bound", zorder=3)
        for label, _, predicted, measured in chosen:
            ax.annotate(label, (predicted * 1e6, measured * 1e6), fontsize=7, xytext=(4, -3),
                        textcoords="offset points")
    low = min(min(row[2], row[3]) for row in timed) * 1e6 / 2
    high = max(max(row[2], row[3]) for row in timed) * 1e6 * 2
    ax.plot([low, high], [low, high], color="grey", linestyle="--", label="measured = roofline bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("roofline lower bound max(FLOPs / P, bytes / BW) (microseconds)")
    ax.set_ylabel("measured (microseconds)")
    ax.set_title("Measured time against the roofline's prediction")
    fig.legend(loc="outside lower center", ncols=3, fontsize=8)
    return fig


def time_share_bars(results: Mapping[str, tuple[float, Mapping[str, float]]], peak_flops: float, *,
                    device_label: str) -> Figure:
    """Stacked horizontal bars: each scenario's time split by category (%), labelled with its
    sustained throughput and share of ``peak_flops``.

    ``results``: scenario -> (sustained FLOP/s, {category: seconds}); ``device_label`` says
    where the times come from ("roofline bound on an H100 SXM (BF16, hidden 4096)").
    """
    _require(len(results) > 0 and peak_flops > 0, "pass at least one scenario and a positive peak FLOP/s")
    categories = list(dict.fromkeys(cat for _, seconds in results.values() for cat in seconds))
    for name, (flops, seconds) in results.items():
        _require(flops > 0 and sum(seconds.values()) > 0 and all(s >= 0 for s in seconds.values()),
                 f"{name}: sustained FLOP/s and seconds must be positive")
    scale, unit = _flops_scale(peak_flops)
    fig = CourseFigure(figsize=(10, 0.55 * len(results) + 2.2), layout="constrained")
    ax = fig.add_subplot()
    for row, (flops, seconds) in enumerate(results.values()):
        total, left = sum(seconds.values()), 0.0
        for index, cat in enumerate(categories):
            share = 100 * seconds.get(cat, 0.0) / total
            ax.barh(row, share, left=left, color=f"C{index}", label=cat if row == 0 else None)
            left += share
        ax.annotate(f"{flops / scale:.3g} {unit} ({flops / peak_flops:.1%} of peak)", (101, row), va="center", fontsize=9)
    ax.set_yticks(range(len(results)), list(results))
    ax.invert_yaxis()
    ax.set_xlim(0, 140)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel(f"share of the time (%), {device_label}")
    ax.set_title("Sustained throughput and where the time goes")
    fig.legend(loc="outside lower center", ncols=len(categories), fontsize=8, frameon=False)
    return fig
