"""Chapter 10: compute time against communication time per strategy, crossovers marked.

The curves come from ``labutils.costmodel.crossover_curve`` (one per strategy); this module
only draws them.
"""
from __future__ import annotations

import math
from typing import Sequence

from matplotlib.figure import Figure

from labutils.plots.base import CourseFigure, _require

_LINK_STYLES = ("-", "--", "-.", ":")


def _crossover_text(tokens: float) -> str:
    """How a crossover reads in a legend: a token count, or never / always comm-bound."""
    if tokens == 0:
        return "never comm-bound"
    if math.isinf(tokens):
        return "always comm-bound"
    return f"D_GPU* = {tokens:,.0f} tokens" if tokens >= 100 else f"D_GPU* = {tokens:.2g} tokens"


def _draw_curve(ax, curve) -> None:
    tokens = list(curve.tokens)
    ax.plot(tokens, list(curve.compute_s), color="black", linewidth=2.2, label=curve.compute_label)
    for index, (label, seconds) in enumerate(curve.comm_s.items()):
        color = f"C{index}"
        crossover = curve.crossover[label]
        ax.plot(tokens, list(seconds), color=color, linestyle=_LINK_STYLES[index % len(_LINK_STYLES)],
                linewidth=1.8, label=f"comm, {label}: {_crossover_text(crossover)}")
        if 0 < crossover < math.inf and tokens[0] <= crossover <= tokens[-1]:
            ax.axvline(crossover, color=color, linestyle=":", linewidth=1.2)
            ax.plot([crossover], [curve.compute_s[0] * crossover / tokens[0]], marker="o", color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"{curve.strategy}: comm-bound when {curve.condition}", fontsize=9)
    ax.set_xlabel("tokens D_GPU on one GPU per step")
    ax.set_ylabel("seconds per step")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def comm_vs_compute(curves: Sequence, title: str = "", columns: int = 3) -> Figure:
    """One panel per strategy: compute seconds and, per link, communication seconds against tokens.

    ``curves``: ``labutils.costmodel.CrossoverCurve`` objects (tokens on one GPU per step, the
    seconds of the compute the communication runs beside and of the communication, crossover
    D_GPU* per link). Log-log axes; a dot and a dotted
    vertical line mark each crossover inside the range; the legend gives D*, or says the
    strategy is never / always communication-bound at that link (the tokens cancel).
    """
    _require(len(curves) > 0, "pass at least one CrossoverCurve")
    _require(all(len(c.tokens) >= 2 and all(t > 0 for t in c.tokens) for c in curves),
             "every curve needs at least two token counts > 0 (log axis)")
    _require(isinstance(columns, int) and columns >= 1, f"columns must be a whole number >= 1, got {columns!r}")
    columns = min(columns, len(curves))
    rows = math.ceil(len(curves) / columns)
    fig = CourseFigure(figsize=(4.2 * columns, 3.4 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for index, curve in enumerate(curves):
        _draw_curve(axes[index // columns][index % columns], curve)
    for index in range(len(curves), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    if title:
        fig.suptitle(title)
    return fig
