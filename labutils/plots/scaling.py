"""Scaling figures (chapters 1 and 10): throughput and efficiency against the number of ranks."""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

from labutils.plots.base import CourseFigure, _require, _singular

_REFERENCE_MARKERS = ("D", "s", "^", "v", "P", "X")
_REFERENCE_COLORS = ("black", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#ccb974")


def scaling_efficiency(gpu_counts: Sequence[int], throughputs: Sequence[float], *,
                       throughput_unit: str = "samples/s", title: str | None = None,
                       unit: str = "GPUs", references: Mapping[str, float] | None = None) -> Figure:
    """Measured throughput against ideal linear scaling (left) and scaling efficiency (right).

    ``unit`` names what is counted on the x axis ("number of {unit}"): "GPUs" by default,
    "ranks" for CPU processes, "nodes", ...

    Ideal scaling is linear from the smallest GPU count: ideal(n) = n x (throughput at
    n0) / n0. Efficiency = actual / ideal, from ``labutils.costmodel.scaling_efficiency``
    (actual / (n x single-GPU throughput), never the reverse).

    ``references`` (label -> efficiency as a fraction, 0.9 = 90%): other efficiencies at the
    largest count, e.g. a model's prediction or a strong-scaling run, drawn as markers beside
    its bar and named in a legend under the figure.
    """
    from labutils import costmodel

    _require(isinstance(unit, str) and unit.strip() != "",
             f"unit must name what is counted, e.g. 'GPUs' or 'ranks'; got {unit!r}")
    _require(len(gpu_counts) == len(throughputs) and len(gpu_counts) >= 2,
             f"pass at least two {unit} counts and one throughput per count")
    _require(all(count > 0 for count in gpu_counts) and all(t > 0 for t in throughputs),
             "GPU counts and throughputs must be positive")
    references = dict(references or {})
    _require(len(references) <= len(_REFERENCE_MARKERS), f"at most {len(_REFERENCE_MARKERS)} references")
    _require(all(isinstance(v, (int, float)) and v >= 0 for v in references.values()),
             f"references must be efficiencies as fractions >= 0, got {references!r}")
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
    _efficiency_bars(right, counts, efficiency, unit, max(list(references.values()) + efficiency))
    for index, (label, value) in enumerate(references.items()):
        right.scatter([len(counts) - 1 + 0.4], [100 * value], marker=_REFERENCE_MARKERS[index], s=60,
                      color=_REFERENCE_COLORS[index], zorder=3, label=f"{label} ({value:.0%})")
    if references:
        right.set_xlim(-0.5, len(counts) - 0.1)       # room for the markers beside the last bar
        fig.legend(*right.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8,
                   frameon=False)
    fig.suptitle(title or "Scaling: measured vs ideal linear")
    return fig


def _efficiency_bars(ax, counts: list[int], efficiency: list[float], unit: str, highest: float) -> None:
    """Efficiency bars (in %) with their values, the 100% line and axis labels."""
    positions = range(len(counts))
    bars = ax.bar(positions, [100 * e for e in efficiency], color="#55a868", width=0.6)
    top = max(120.0, 115 * highest)
    for bar, value in zip(bars, efficiency):
        # inside the bar's top, clear of the 100% line; above a bar too short to hold it
        inside = 100 * value > 0.15 * top
        ax.annotate(f"{value:.0%}", (bar.get_x() + bar.get_width() / 2, 100 * value),
                    xytext=(0, -4 if inside else 3), textcoords="offset points", ha="center",
                    va="top" if inside else "bottom", fontsize=9,
                    color="white" if inside else "black", fontweight="bold" if inside else "normal")
    ax.axhline(100, color="grey", linestyle="--", linewidth=1)
    ax.text(len(counts) - 0.5, 100, "linear scaling = 100%", ha="right", va="bottom", fontsize=8,
            color="grey")
    ax.set_xticks(list(positions), [str(count) for count in counts])
    ax.set_xlim(-0.5, len(counts) - 0.5)
    ax.set_ylim(0, top)
    ax.set_xlabel(f"number of {unit}")
    ax.set_ylabel("scaling efficiency (%) = actual / ideal")
    ax.set_title("Scaling efficiency")
