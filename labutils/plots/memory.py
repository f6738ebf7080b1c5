"""Memory figures (chapter 7): model-state bytes per parameter, per GPU for each ZeRO stage
(GB = 1e9 bytes, or MB = 1e6 bytes for a toy model), optimizer state per rank, CPU offload."""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

from labutils.plots.base import GB, CourseFigure, _require

_BAR_COLORS = {"params": "#4c72b0", "grads": "#dd8452", "optimizer_states": "#55a868"}


_ZERO_STAGE_NAMES = {0: "DDP\n(no sharding)", 1: "ZeRO-1\n(optimizer states)",
                     2: "ZeRO-2\n(+ gradients)", 3: "ZeRO-3\n(+ parameters)"}


def zero_memory_bars(table, gpu_memory_bytes: float | None = None, gpu_label: str | None = None,
                     *, title: str | None = None, highlight_stage: int | None = None,
                     measured: Mapping[int, float] | None = None) -> Figure:
    """Stacked bars of model-state memory per GPU for each ZeRO stage, in GB (1e9 B), or in
    MB (1e6 B) when neither the largest bar nor the GPU line reaches 1 GB (a toy model).

    ``table`` is ``labutils.costmodel.zero_memory_table(num_params, world_size)``: one
    ``ZeroMemory(stage, params, grads, optimizer_states, total)`` per stage, in bytes.
    ``gpu_memory_bytes`` draws the GPU's capacity as a horizontal line labelled with
    ``gpu_label``. ``highlight_stage`` shades one bar's column (the stage a widget selected).
    ``measured`` maps a stage to the model-state bytes a run actually held on one rank: each
    is drawn as a black diamond on its stage's bar. Activations are not part of these bars
    (the title says so).
    """
    _require(len(table) > 0, "the ZeRO table is empty: pass costmodel.zero_memory_table(...)")
    _require(gpu_memory_bytes is None or gpu_memory_bytes > 0,
             f"gpu_memory_bytes must be positive bytes, got {gpu_memory_bytes}")
    stages = [row.stage for row in table]
    _require(measured is None or set(measured) <= set(stages),
             f"measured names stages {sorted(measured or {})} but the table has stages {stages}")
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
    top = max([highest] + _draw_measured(ax, stages, measured or {}, unit))
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


def _draw_measured(ax, stages: list[int], measured: Mapping[int, float], unit: float) -> list[float]:
    """Black diamonds beside the bars of the stages in ``measured`` (clear of the bars' total
    labels); returns their heights in ``unit``."""
    heights = []
    for index, (stage, measured_bytes) in enumerate(measured.items()):
        ax.plot([stages.index(stage) + 0.36], [measured_bytes / unit], "kD", markersize=9,
                label="measured (diamond beside its bar)" if index == 0 else None)
        heights.append(measured_bytes / unit)
    return heights


_PART_LABELS = {"params": "parameters", "grads": "gradients", "optimizer_states": "optimizer states"}


def bytes_per_parameter_bars(bars: Sequence[tuple[str, Mapping[str, float]]], num_params: float, *,
                             title: str) -> Figure:
    """Stacked bars of a training state in bytes per parameter, one bar per (label, parts).

    ``parts`` maps "params", "grads" and "optimizer_states" to bytes (a measurement, or
    ``vars(costmodel.zero_memory(...))`` for the model); each is divided by ``num_params``.
    """
    _require(len(bars) > 0, "no bars to draw: pass [(label, {part: bytes}), ...]")
    _require(num_params > 0, f"num_params must be positive, got {num_params}")
    for label, parts in bars:
        missing = set(_PART_LABELS) - set(parts)
        _require(not missing, f"bar {label!r} lacks {sorted(missing)} (bytes)")
    fig = CourseFigure(figsize=(8.5, 4.4), layout="constrained")
    ax = fig.add_subplot()
    for position, (label, parts) in enumerate(bars):
        bottom = 0.0
        for part, part_label in _PART_LABELS.items():
            height = parts[part] / num_params
            ax.bar(position, height, bottom=bottom, color=_BAR_COLORS[part], width=0.6,
                   label=part_label if position == 0 else None)
            if height > 0:
                ax.text(position, bottom + height / 2, f"{height:.3g}", ha="center", va="center", color="white")
            bottom += height
        ax.text(position, bottom, f"{bottom:.3g}", ha="center", va="bottom", fontweight="bold")
    ax.set_xticks(range(len(bars)), [label for label, _ in bars])
    ax.set_ylabel("bytes per parameter")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig


def optimizer_state_per_rank(state_bytes: Sequence[float], sharded_bytes: float, unsharded_bytes: float, *,
                             title: str) -> Figure:
    """Bars of the optimizer-state bytes each rank holds (MB = 1e6 bytes), with the model's
    even share ``sharded_bytes`` and the unsharded optimizer's ``unsharded_bytes`` as lines."""
    _require(len(state_bytes) > 0, "no ranks to draw: pass one byte count per rank")
    _require(min(state_bytes) >= 0 and sharded_bytes > 0 and unsharded_bytes > 0,
             "byte counts must be non-negative and the two model lines positive")
    fig = CourseFigure(figsize=(8.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    bars = ax.bar(range(len(state_bytes)), [value / 1e6 for value in state_bytes], color=_BAR_COLORS["optimizer_states"],
                  width=0.6, label="measured: optimizer state on this rank")
    for bar, value in zip(bars, state_bytes):
        ax.text(bar.get_x() + bar.get_width() / 2, value / 2e6, f"{value / 1e6:.3g} MB", ha="center", va="center",
                fontsize=9, color="white")
    ax.axhline(sharded_bytes / 1e6, color="black", linestyle="--",
               label=f"model, an even share: {sharded_bytes / 1e6:.3g} MB")
    ax.axhline(unsharded_bytes / 1e6, color="#c44e52", linestyle=":",
               label=f"unsharded optimizer: {unsharded_bytes / 1e6:.3g} MB")
    ax.set_xticks(range(len(state_bytes)), [f"rank {rank}" for rank in range(len(state_bytes))])
    ax.set_ylim(0, 1.15 * max(max(state_bytes), unsharded_bytes) / 1e6)
    ax.set_ylabel("optimizer state (MB = 1e6 bytes)")
    ax.set_title(title, fontsize=10)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig


def offload_costs(gpu_bytes: Mapping[str, float], host_bytes: float, step_seconds: Mapping[str, float], *,
                  gpu_memory_bytes: float, gpu_label: str, title: str) -> Figure:
    """What CPU offload saves and what it costs. Left: model-state bytes on the GPU (GB = 1e9
    bytes) for each set-up in ``gpu_bytes`` (the last one is the offloaded one and is labelled
    with the ``host_bytes`` it moved to CPU memory), with the GPU's capacity as a line.
    Right: the seconds per step each item of ``step_seconds`` adds (log scale)."""
    _require(len(gpu_bytes) > 0 and len(step_seconds) > 0, "pass at least one memory bar and one cost")
    _require(min(gpu_bytes.values()) >= 0 and host_bytes >= 0, "byte counts must be non-negative")
    _require(min(step_seconds.values()) > 0, "step costs must be positive seconds (the axis is logarithmic)")
    _require(gpu_memory_bytes > 0, f"gpu_memory_bytes must be positive, got {gpu_memory_bytes}")
    fig = CourseFigure(figsize=(11.5, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    labels, values = list(gpu_bytes), [value / GB for value in gpu_bytes.values()]
    left.bar(labels, values, color=["#c44e52"] * (len(values) - 1) + ["#4c72b0"], width=0.5)
    for position, value in enumerate(values):
        left.annotate(f"{value:.3g} GB", (position, value), xytext=(0, 2), textcoords="offset points",
                      ha="center", va="bottom", fontsize=9)
    left.annotate(f"+ {host_bytes / GB:.3g} GB in CPU memory", (len(values) - 1, values[-1]), xytext=(0, 16),
                  textcoords="offset points", ha="center", va="bottom", fontsize=9)
    left.axhline(gpu_memory_bytes / GB, color="black", linestyle="--",
                 label=f"{gpu_label}: {gpu_memory_bytes / GB:.3g} GB")
    left.set_ylim(0, 1.2 * max(values + [gpu_memory_bytes / GB]))
    left.set_ylabel("GPU memory for model states (GB = 1e9 bytes)")
    left.set_title("Model states on the GPU")
    left.legend(loc="upper right", fontsize=8)
    costs = list(step_seconds.items())
    right.barh([label for label, _ in costs], [seconds for _, seconds in costs],
               color=["#8172b2"] * (len(costs) - 1) + ["#55a868"])
    for row, (_, seconds) in enumerate(costs):
        right.annotate(f" {seconds:.3g} s", (seconds, row), va="center", fontsize=9)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlim(min(step_seconds.values()) / 3, max(step_seconds.values()) * 8)
    right.set_xlabel("seconds added to every training step (log scale)")
    right.set_title("What offload adds to every step")
    fig.suptitle(title)
    return fig
