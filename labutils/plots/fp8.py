"""Chapter 2's FP8 figure: what a cast to E4M3 or E5M2 and back does, against the scale.

The errors come from ``labutils.kernels.fp8.quantization_error`` (one ``QuantError`` per scale);
this module only draws them.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

from labutils.plots.base import CourseFigure, _require


def fp8_scale_sweep(sweeps: Mapping[str, Sequence], amax_scales: Mapping[str, float] | None = None,
                    title: str = "") -> Figure:
    """Round-trip error (left) and clipped / flushed shares (right) against the per-tensor scale.

    ``sweeps``: format label -> ``labutils.kernels.fp8.QuantError`` objects, one per scale (any
    order); ``amax_scales``: format label -> the scale max_normal / amax, marked with a
    dotted line. Left: relative RMS error (solid) and the median element's relative error
    (dashed), log-log; right: the share of elements saturated (clipped at max_normal) and
    flushed to zero.
    """
    _require(len(sweeps) > 0, "pass at least one format's sweep")
    _require(all(len(errors) >= 2 for errors in sweeps.values()), "every sweep needs at least two scales")
    amax_scales = dict(amax_scales or {})
    fig = CourseFigure(figsize=(11.5, 5.2), layout="constrained")
    error_ax, share_ax = fig.subplots(1, 2)
    for index, (label, errors) in enumerate(sweeps.items()):
        errors = sorted(errors, key=lambda e: e.scale)
        scales = [e.scale for e in errors]
        color = f"C{index}"
        error_ax.plot(scales, [e.relative_rmse for e in errors], color=color, linewidth=2,
                      label=f"{label}: relative RMS error")
        error_ax.plot(scales, [e.median_relative for e in errors], color=color, linestyle="--",
                      label=f"{label}: median element's relative error")
        share_ax.plot(scales, [e.saturated for e in errors], color=color, linewidth=2, label=f"{label}: saturated")
        share_ax.plot(scales, [e.flushed for e in errors], color=color, linestyle="--", label=f"{label}: flushed to 0")
        if label in amax_scales:
            for ax in (error_ax, share_ax):
                ax.axvline(amax_scales[label], color=color, linestyle=":", linewidth=1.2)
    error_ax.set_yscale("log")
    error_ax.set_ylabel("relative error after FP8 and back")
    share_ax.set_ylabel("share of the elements")
    for ax in (error_ax, share_ax):
        ax.set_xscale("log")
        ax.set_xlabel("per-tensor scale (dotted: max_normal / amax)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    if title:
        fig.suptitle(title)
    return fig
