"""Scaling figures (chapters 1 and 10): throughput and efficiency against the number of ranks."""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from labutils.plots.base import CourseFigure, _require, _singular


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
