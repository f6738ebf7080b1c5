"""Checkpoint figures (chapters 7.9 and 7.10): the bytes each rank writes to a distributed checkpoint,
the share of a job's time that checkpoints and restarts waste against the checkpoint interval, and
the loss curve of a job that lost a rank and resumed from its last checkpoint.

Units: bytes in decimal prefixes (kB = 1e3 B, MB = 1e6 B, GB = 1e9 B, as for memory in the rest of the
course), times in seconds on input and minutes on the interval axis, waste in % of wall time.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from labutils.plots.base import CourseFigure, _plain_number, _require

_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def _decimal_scale(largest: float) -> tuple[float, str]:
    """(divisor, unit) so ``largest`` bytes read as a number between 1 and 1000: B, kB, MB or GB."""
    for divisor, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if largest >= divisor:
            return divisor, unit
    return 1.0, "B"


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)


def checkpoint_bytes_per_rank(bytes_per_rank: Sequence[float], model_bytes_per_rank: float, *,
                              metadata_bytes: float = 0.0, title: str | None = None) -> Figure:
    """Bytes each rank wrote to a checkpoint (bars) against the model (dashed line).

    ``bytes_per_rank[r]``: bytes of the data files rank r wrote (for ``torch.distributed.checkpoint``,
    the ``__r_*.distcp`` files), in bytes. ``model_bytes_per_rank``: what the model says one rank
    writes, e.g. (parameter bytes + optimizer-state bytes) / n for a state sharded over n ranks, in
    bytes. ``metadata_bytes``: the checkpoint's ``.metadata`` file (bytes), written once by the
    coordinator, rank 0, and drawn hatched on top of rank 0's bar. The y axis is in kB, MB or GB
    (decimal, 1 MB = 1e6 bytes), whichever keeps the largest bar between 1 and 1000.
    """
    values = list(bytes_per_rank)
    _require(len(values) >= 1, "pass the bytes of at least one rank's checkpoint files")
    _require(all(_is_number(v) and v >= 0 for v in values),
             f"bytes per rank must be finite numbers >= 0, got {values!r}")
    _require(_is_number(model_bytes_per_rank) and model_bytes_per_rank > 0,
             f"model_bytes_per_rank must be a positive number of bytes, got {model_bytes_per_rank!r}")
    _require(_is_number(metadata_bytes) and metadata_bytes >= 0,
             f"metadata_bytes must be a number of bytes >= 0, got {metadata_bytes!r}")
    divisor, unit = _decimal_scale(max(values + [model_bytes_per_rank, values[0] + metadata_bytes]))
    ranks = list(range(len(values)))

    fig = CourseFigure(figsize=(max(5.0, 1.2 * len(values) + 3.0), 4.2), layout="constrained")
    ax = fig.subplots()
    bars = ax.bar(ranks, [v / divisor for v in values], width=0.6, color=_COLORS[0],
                  label="data files (.distcp) of the rank")
    if metadata_bytes:
        ax.bar([0], [metadata_bytes / divisor], bottom=[values[0] / divisor], width=0.6, color="white",
               edgecolor=_COLORS[0], hatch="//",
               label=f".metadata (written by rank 0): {metadata_bytes / divisor:.3g} {unit}")
    for bar, value in zip(bars, values):
        inside = bar.get_height() > 0.15 * max(values + [model_bytes_per_rank]) / divisor
        ax.annotate(f"{value / divisor:.3g} {unit}", (bar.get_x() + bar.get_width() / 2, bar.get_height() / 2),
                    ha="center", va="center" if inside else "bottom", fontsize=9,
                    color="white" if inside else "black", fontweight="bold" if inside else "normal")
    ax.axhline(model_bytes_per_rank / divisor, color="black", linestyle="--", linewidth=1.2,
               label=f"model: {model_bytes_per_rank / divisor:.3g} {unit} per rank")
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_xlim(-0.6, len(values) - 0.4)
    top = max(values[0] + metadata_bytes, max(values), model_bytes_per_rank) / divisor
    ax.set_ylim(0, 1.3 * top)
    ax.set_xlabel(f"rank (of n = {len(values)})")
    exponent = round(math.log10(divisor))
    ax.set_ylabel(f"bytes written ({unit}, 1 {unit} = $10^{{{exponent}}}$ B)" if exponent else "bytes written (B)")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "Bytes each rank writes to the checkpoint")
    return fig


def checkpoint_waste(intervals_s: Sequence[float], waste: Mapping[str, Sequence[float]],
                     optima_s: Mapping[str, float] | None = None, *, title: str | None = None) -> Figure:
    """Share of wall time wasted by checkpoints and restarts against the checkpoint interval.

    ``intervals_s``: checkpoint intervals in seconds (ascending, > 0). ``waste``: label -> the
    fraction of wall time wasted at each interval (0.05 = 5%), e.g. Young's first-order model
    C/T + T/(2M) computed by the caller for a checkpoint cost C and a mean time between
    failures M (seconds). ``optima_s``: label -> the best interval (seconds) to mark on that
    curve, e.g. Young's sqrt(2 C M), drawn as a dotted line and a dot named in the legend. Both
    axes are logarithmic: the interval in minutes, the waste in % of wall time (cut at 100%, where
    a first-order model no longer holds).
    """
    intervals = list(intervals_s)
    _require(len(intervals) >= 2, "pass at least two checkpoint intervals (seconds)")
    _require(all(_is_number(t) and t > 0 for t in intervals), "checkpoint intervals must be positive seconds")
    _require(all(a < b for a, b in zip(intervals, intervals[1:])), "checkpoint intervals must be ascending")
    curves = dict(waste)
    _require(1 <= len(curves) <= len(_COLORS), f"pass between 1 and {len(_COLORS)} waste curves")
    for label, values in curves.items():
        values = list(values)
        _require(len(values) == len(intervals),
                 f"waste curve {label!r} has {len(values)} values for {len(intervals)} intervals")
        _require(all(_is_number(v) and v > 0 for v in values),
                 f"waste curve {label!r} must hold fractions of wall time > 0")
    optima = dict(optima_s or {})
    _require(set(optima) <= set(curves), f"optima name curves that are not drawn: {sorted(set(optima) - set(curves))}")
    for label, best in optima.items():
        _require(_is_number(best) and intervals[0] <= best <= intervals[-1],
                 f"the optimum of {label!r} ({best!r} s) must lie within the intervals drawn")

    minutes = np.asarray(intervals, dtype=float) / 60.0
    fig = CourseFigure(figsize=(7.5, 5.2), layout="constrained")
    ax = fig.subplots()
    highest = 0.0
    for color, (label, values) in zip(_COLORS, curves.items()):
        percent = 100.0 * np.asarray(list(values), dtype=float)
        highest = max(highest, float(percent.max()))
        ax.plot(minutes, percent, color=color, label=label)
        if label in optima:
            best_min = optima[label] / 60.0
            at_best = float(np.exp(np.interp(np.log(best_min), np.log(minutes), np.log(percent))))
            ax.axvline(best_min, color=color, linestyle=":", linewidth=1)
            ax.scatter([best_min], [at_best], color=color, zorder=3, s=40,
                       label=f"    T* = {best_min:.3g} min: waste {at_best:.2g}%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if highest > 100.0:      # more than all the time: the first-order model no longer holds there
        ax.set_ylim(top=100.0)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel("checkpoint interval T (minutes)")
    ax.set_ylabel("time wasted (% of wall time)")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8, frameon=False)
    ax.set_title(title or "Checkpoint cost + lost work against the checkpoint interval")
    return fig


def restart_losses(uninterrupted: Mapping[int, float], attempts: Mapping[int, Mapping[int, float]], *,
                   checkpoints: Sequence[int], killed_at: int, title: str | None = None) -> Figure:
    """Loss against step: a run nobody interrupted (line) and each attempt of one that lost a rank (markers).

    ``uninterrupted``: step -> loss. ``attempts``: attempt number (torchrun's restart count, 0 first)
    -> {step: loss} of the steps that attempt finished. ``checkpoints``: the steps after which a
    checkpoint was complete (dotted lines). ``killed_at``: the step during which a rank died (dashed
    line, before that step). The steps between the last checkpoint before the death and the death were
    done twice: they are shaded. Losses are the caller's (mean over ranks).
    """
    reference = {int(step): loss for step, loss in uninterrupted.items()}
    _require(len(reference) >= 2, "pass the losses of at least two steps of the uninterrupted run")
    _require(all(_is_number(loss) and loss > 0 for loss in reference.values()), "losses must be positive numbers")
    runs = {int(attempt): dict(steps) for attempt, steps in attempts.items()}
    _require(1 <= len(runs) <= len(_COLORS) - 1, f"pass between 1 and {len(_COLORS) - 1} attempts")
    for attempt, steps in runs.items():
        _require(all(_is_number(loss) and loss > 0 for loss in steps.values()),
                 f"attempt {attempt}: losses must be positive numbers")
    marks = sorted(int(step) for step in checkpoints)
    _require(_is_number(killed_at) and min(reference) <= killed_at <= max(reference) + 1,
             f"killed_at ({killed_at!r}) must be a step of the run")
    resumed_from = max((step for step in marks if step <= killed_at), default=0)

    fig = CourseFigure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.subplots()
    steps = sorted(reference)
    ax.plot(steps, [reference[s] for s in steps], color="black", linewidth=1.5, label="run with no failure")
    for (attempt, losses), color, marker in zip(sorted(runs.items()), _COLORS, ("o", "x", "s", "^", "v")):
        done = sorted(losses)
        ax.plot(done, [losses[s] for s in done], linestyle="none", marker=marker, color=color, markersize=7,
                label=f"attempt {attempt}: steps {done[0]}-{done[-1]}" if done else f"attempt {attempt}: no step")
    if killed_at > resumed_from:
        twice = f"step {resumed_from}" if killed_at - resumed_from == 1 else f"steps {resumed_from}-{killed_at - 1}"
        ax.axvspan(resumed_from - 0.5, killed_at - 0.5, color=_COLORS[3], alpha=0.12, label=f"done twice: {twice}")
    for i, step in enumerate(marks):
        ax.axvline(step - 0.5, color="grey", linestyle=":", linewidth=1,
                   label="checkpoint complete" if i == 0 else None)
    ax.axvline(killed_at - 0.5, color=_COLORS[3], linestyle="--", linewidth=1.2,
               label=f"a rank killed: step {killed_at} never finished")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "A rank dies; the job resumes from its last checkpoint")
    return fig
