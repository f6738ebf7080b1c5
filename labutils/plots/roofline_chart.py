"""The roofline figure (chapter 3): attainable FLOP/s against arithmetic intensity (FLOP/byte)."""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import CourseFigure, _flops_scale, _plain_number, _require


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
