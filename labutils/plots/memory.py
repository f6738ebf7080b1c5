"""Memory budgets (chapter 7): bytes per GPU for each ZeRO stage, in GB = 1e9 bytes."""
from __future__ import annotations

from matplotlib.figure import Figure

from labutils.plots.base import GB, CourseFigure, _require

_BAR_COLORS = {"params": "#4c72b0", "grads": "#dd8452", "optimizer_states": "#55a868"}


_ZERO_STAGE_NAMES = {0: "DDP\n(no sharding)", 1: "ZeRO-1\n(optimizer states)",
                     2: "ZeRO-2\n(+ gradients)", 3: "ZeRO-3\n(+ parameters)"}


def zero_memory_bars(table, gpu_memory_bytes: float | None = None, gpu_label: str | None = None,
                     *, title: str | None = None, highlight_stage: int | None = None) -> Figure:
    """Stacked bars of model-state memory per GPU for each ZeRO stage, in GB (1e9 B), or in
    MB (1e6 B) when neither the largest bar nor the GPU line reaches 1 GB (a toy model).

    ``table`` is ``labutils.costmodel.zero_memory_table(num_params, world_size)``: one
    ``ZeroMemory(stage, params, grads, optimizer_states, total)`` per stage, in bytes.
    ``gpu_memory_bytes`` draws the GPU's capacity as a horizontal line labelled with
    ``gpu_label``. ``highlight_stage`` shades one bar's column (the stage a widget selected).
    Activations are not part of these bars (the title says so).
    """
    _require(len(table) > 0, "the ZeRO table is empty: pass costmodel.zero_memory_table(...)")
    _require(gpu_memory_bytes is None or gpu_memory_bytes > 0,
             f"gpu_memory_bytes must be positive bytes, got {gpu_memory_bytes}")
    fig = CourseFigure(figsize=(8.5, 5), layout="constrained")
    ax = fig.add_subplot()
    positions = range(len(table))
    largest_bytes = max([row.total for row in table] + [gpu_memory_bytes or 0])
    unit, unit_name = (GB, "GB") if largest_bytes >= GB else (1e6, "MB")
    highest = max(row.total for row in table) / unit
    bottoms = [0.0] * len(table)
    for part, label in (("params", "parameters"), ("grads", "gradients"),
                        ("optimizer_states", "optimizer states")):
        heights = [getattr(row, part) / unit for row in table]
        bars = ax.bar(positions, heights, bottom=bottoms, color=_BAR_COLORS[part], label=label,
                      width=0.6)
        for bar, height in zip(bars, heights):
            if height > 0.07 * highest:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + height / 2,
                        f"{height:.3g}", ha="center", va="center", fontsize=8, color="white")
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
    for position, row in zip(positions, table):
        ax.text(position, row.total / unit, f"{row.total / unit:.3g} {unit_name}", ha="center", va="bottom",
                fontsize=10, fontweight="bold")
        if row.stage == highlight_stage:
            ax.axvspan(position - 0.45, position + 0.45, color="gold", alpha=0.25, zorder=0)
    top = highest
    if gpu_memory_bytes is not None:
        capacity = gpu_memory_bytes / unit
        ax.axhline(capacity, color="crimson", linestyle="--", linewidth=1.5,
                   label=f"{gpu_label or 'GPU'} memory: {capacity:.4g} {unit_name}")
        top = max(top, capacity)
    ax.set_ylim(0, top * 1.15)
    ax.set_xticks(list(positions), [_ZERO_STAGE_NAMES.get(row.stage, f"stage {row.stage}")
                                    + ("\n(selected)" if row.stage == highlight_stage else "")
                                    for row in table])
    ax.set_ylabel(f"memory per GPU ({unit_name} = {unit:.0e} bytes)".replace("e+0", "e"))
    ax.set_title(title or "Model-state memory per GPU (activations not included)")
    fig.legend(loc="outside lower center", ncols=4, fontsize=9, frameon=False)
    return fig
