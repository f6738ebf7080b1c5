"""Figures of the techniques a large-scale trainer adds (chapters 7 and 8): activation
recomputation's memory against its time, and an FSDP step's compute and communication
timeline with and without prefetching.

The numbers come from ``labutils.kernels.recompute`` (measured bytes and seconds, the paper's
formula) and ``labutils.costmodel.fsdp_overlap`` (the alpha-beta timeline); this module only draws
them. Bytes in MB = 1e6 B, seconds in ms.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

from labutils.plots.base import CourseFigure, _require

_COMPUTE, _COMM = "#4c72b0", "#dd8452"
_VARIANT_COLORS = ("#4c72b0", "#55a868", "#c44e52", "#8172b3")


def recompute_tradeoff(labels: Sequence[str], saved_bytes: Sequence[float], step_s: Sequence[float],
                       formula_bytes: Sequence[float], *, title: str) -> Figure:
    """Activation bytes kept for backward (MB) against seconds per step (ms), one point per
    variant: filled the measured bytes, hollow the formula's bytes at the same time.

    ``labels``, ``saved_bytes`` (measured), ``step_s`` (measured) and ``formula_bytes`` hold
    one entry per variant (no recomputation, selective, full).
    """
    _require(len(labels) > 0, "pass at least one variant")
    _require(len(labels) == len(saved_bytes) == len(step_s) == len(formula_bytes),
             "pass one saved_bytes, step_s and formula_bytes per label")
    _require(min(step_s) > 0 and min(saved_bytes) >= 0, "times must be > 0 and bytes >= 0")
    fig = CourseFigure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    for index, (label, measured, seconds, formula) in enumerate(zip(labels, saved_bytes, step_s, formula_bytes)):
        color = _VARIANT_COLORS[index % len(_VARIANT_COLORS)]
        ax.plot(seconds * 1e3, measured / 1e6, "o", markersize=10, color=color, label="measured (saved-tensor bytes)" if index == 0 else None)
        ax.plot(seconds * 1e3, formula / 1e6, "o", markersize=16, markerfacecolor="none",
                markeredgecolor=color,
                label="formula, arXiv:2205.05198" if index == 0 else None)
        ax.annotate(label, (seconds * 1e3, measured / 1e6), textcoords="offset points", xytext=(10, 6), fontsize=9)
    ax.set_xlabel("forward + backward time per step (ms, measured)")
    ax.set_ylabel("activations kept for backward (MB)")
    ax.set_ylim(0, max(max(saved_bytes), max(formula_bytes)) / 1e6 * 1.2)
    ax.set_xlim(left=0, right=max(step_s) * 1e3 * 1.25)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def overlap_timeline(timelines: Mapping[str, object], *, title: str) -> Figure:
    """One panel per timeline (``fsdp_overlap.StepTimeline``): compute and link rows over
    time (ms, each panel on its own scale), forward/backward ops and all-gathers/reduce-scatters
    as bars, the exposed communication in each panel's title."""
    _require(len(timelines) > 0, "pass at least one timeline")
    fig = CourseFigure(figsize=(10, 1.9 * len(timelines) + 0.8), layout="constrained")
    axes = fig.subplots(len(timelines), 1, squeeze=False)[:, 0]
    for ax, (label, timeline) in zip(axes, timelines.items()):
        for interval in timeline.intervals:
            row = 1 if interval.resource == "compute" else 0
            color = _COMPUTE if row else (_COMM if interval.name.startswith("AG") else "#55a868")
            ax.barh(row, (interval.end_s - interval.start_s) * 1e3, left=interval.start_s * 1e3,
                    color=color, linewidth=0)
        ax.set_yticks([0, 1], ["link: all-gather (orange),\nreduce-scatter (green)", "compute: forward,\nbackward"])
        ax.set_title(f"{label}: step {timeline.total_s * 1e3:.1f} ms, compute {timeline.compute_s * 1e3:.1f} ms, "
                     f"communication exposed {timeline.exposed_comm_s * 1e3:.1f} ms", fontsize=9)
        ax.set_xlim(0, timeline.total_s * 1e3)
        ax.set_xlabel("time (ms)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
