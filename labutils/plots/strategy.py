"""Figures of chapter 10: experts' load against their capacity, the load-balancing loss, the
rows an all-to-all moves between ranks, a TP x DP x PP layout on a cluster, and measured
scaling efficiency next to a model's.

Each function draws numbers computed in the chapter (router counts, ``costmodel`` values,
measured throughputs); none models anything itself.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from labutils.plots.base import CourseFigure, _require

_CAPACITY_COLORS = ("crimson", "darkorange", "seagreen", "purple", "grey")


def expert_load(assignments: Sequence[int], capacities: Sequence[tuple[float, int, int]], *, title: str) -> Figure:
    """Token assignments routed to each expert, with each capacity factor's capacity C.

    ``assignments`` holds one count per expert (their sum is B k, B tokens routed top-k); ``capacities`` holds
    (capacity factor, C, assignments dropped at that C). The dotted line is the even share
    B k / E; the legend gives each C and the share of the B k assignments it drops.
    """
    _require(len(assignments) > 0 and min(assignments) >= 0, "pass one assignment count >= 0 per expert")
    _require(0 < len(capacities) <= len(_CAPACITY_COLORS),
             f"pass 1 to {len(_CAPACITY_COLORS)} (factor, capacity, dropped) triples")
    total = sum(assignments)
    _require(total > 0, "no assignments to draw")
    fig = CourseFigure(figsize=(8.5, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(range(len(assignments)), list(assignments), color="#4c72b0", label="assignments routed to the expert")
    ax.axhline(total / len(assignments), color="black", linestyle=":", label="Bk/E (perfect balance)")
    for color, (factor, capacity, dropped) in zip(_CAPACITY_COLORS, capacities):
        _require(capacity > 0 and 0 <= dropped <= total, f"capacity {capacity!r} / dropped {dropped!r} out of range")
        ax.axhline(capacity, color=color, linestyle="--",
                   label=f"capacity, factor {factor:g}: C = {capacity}, drops {dropped} ({dropped / total:.1%})")
    ax.set_xticks(range(len(assignments)))
    ax.set_xlabel("expert")
    ax.set_ylabel("token assignments (count)")
    ax.set_ylim(0, max(assignments) * 1.6)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def aux_loss_vs_skew(skews: Sequence[float], aux_losses: Sequence[float], dropped_fractions: Sequence[float],
                     *, coefficient: float, capacity_factor: float) -> Figure:
    """The load-balancing loss (left axis) and the share of assignments dropped at one
    capacity factor (right axis, %) as a router favours a few experts more and more.
    ``coefficient`` is the loss's weight (lambda; the Switch paper's alpha), the value of
    the loss under uniform routing, drawn as a dotted line."""
    _require(len(skews) >= 2 and len(skews) == len(aux_losses) == len(dropped_fractions),
             "pass at least two skews and one loss and one dropped fraction per skew")
    _require(all(0 <= d <= 1 for d in dropped_fractions), "dropped fractions lie between 0 and 1")
    fig = CourseFigure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(skews, aux_losses, "o-", color="#4c72b0", label="load-balancing loss")
    ax.axhline(coefficient, color="#4c72b0", linestyle=":",
               label=f"λ = {coefficient:g}: the loss of uniform routing")
    ax.set_xlabel("router skew (how strongly low-numbered experts are favoured)")
    ax.set_ylabel("auxiliary loss (dimensionless)")
    right = ax.twinx()
    right.plot(skews, [100 * d for d in dropped_fractions], "s--", color="crimson",
               label=f"dropped at capacity factor {capacity_factor:g}")
    right.set_ylabel("assignments dropped (%)", color="crimson")
    right.set_ylim(0, max(5.0, 110 * max(dropped_fractions)))
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=9)
    ax.set_title("Imbalance raises the auxiliary loss and the drops together")
    return fig


def all_to_all_matrix(rows_sent: Sequence[Sequence[int]], *, unit: str = "rows") -> Figure:
    """What an all-to-all moved: entry (i, j) is what rank i sent to rank j (the diagonal stays
    on its rank), one square matrix of counts in ``unit``."""
    n = len(rows_sent)
    _require(n >= 1 and all(len(row) == n for row in rows_sent), "pass a square matrix: one row of n counts per rank")
    _require(all(v >= 0 for row in rows_sent for v in row), "counts must be >= 0")
    largest = max(max(row) for row in rows_sent)
    fig = CourseFigure(figsize=(4.5 + 0.4 * n, 3.5 + 0.3 * n), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow([list(row) for row in rows_sent], cmap="Blues", vmin=0)
    for i, row in enumerate(rows_sent):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:g}", ha="center", va="center", fontsize=10,
                    color="white" if value > largest / 2 else "black")
    ax.set_xticks(range(n), [f"rank {j}" for j in range(n)])
    ax.set_yticks(range(n), [f"rank {i}" for i in range(n)])
    ax.set_xlabel("to (holds the expert)")
    ax.set_ylabel("from (holds the token)")
    ax.set_title(f"Token {unit} dispatched by all-to-all\n(diagonal: stays on its rank)", fontsize=10)
    fig.colorbar(image, ax=ax, label=unit)
    return fig


def parallel_layout(coordinates: Sequence[tuple[int, int, int]], *, gpus_per_node: int = 8) -> Figure:
    """Every GPU of a TP x DP x PP job on its node: colour = pipeline stage, hatching = odd
    data-parallel replica, number = global rank. ``coordinates[rank]`` is that rank's
    (tp_rank, dp_rank, pp_rank), e.g. in Megatron-LM's order (TP fastest, then DP, then PP)."""
    world = len(coordinates)
    _require(world >= 1 and gpus_per_node >= 1 and world % gpus_per_node == 0,
             f"{world} GPUs do not fill whole nodes of {gpus_per_node}")
    tp, dp, pp = (max(c[i] for c in coordinates) + 1 for i in range(3))
    _require(tp * dp * pp == world and len(set(map(tuple, coordinates))) == world,
             "coordinates must give every rank a distinct (tp_rank, dp_rank, pp_rank) of one tp x dp x pp grid")
    from matplotlib import colormaps

    colors = colormaps["tab10"].colors
    nodes = world // gpus_per_node
    fig = CourseFigure(figsize=(9, 0.45 * nodes + 1.8), layout="constrained")
    ax = fig.add_subplot()
    for rank, (_tp_rank, dp_rank, pp_rank) in enumerate(coordinates):
        node, slot = divmod(rank, gpus_per_node)
        ax.add_patch(Rectangle((slot, node), 0.95, 0.9, facecolor=colors[pp_rank % 10], alpha=0.6,
                               hatch="//" if dp_rank % 2 else None, edgecolor="black", linewidth=0.5))
        ax.text(slot + 0.47, node + 0.45, str(rank), ha="center", va="center", fontsize=7)
    ax.set_xlim(0, gpus_per_node)
    ax.set_ylim(nodes, 0)
    ax.set_xticks([s + 0.47 for s in range(gpus_per_node)], [f"GPU {s}" for s in range(gpus_per_node)], fontsize=8)
    ax.set_yticks([n + 0.45 for n in range(nodes)], [f"node {n}" for n in range(nodes)], fontsize=8)
    handles = [Patch(facecolor=colors[s % 10], alpha=0.6, label=f"stage {s}") for s in range(pp)]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="odd DP replica"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(pp + 1, 9), fontsize=8, frameon=False)
    ax.set_title(f"TP {tp} x DP {dp} x PP {pp} = {world} GPUs (number = global rank)", fontsize=10)
    return fig


def scaling_against_model(counts: Sequence[int], throughputs: Sequence[float],
                          model_efficiencies: Mapping[str, float], *, throughput_unit: str = "samples/s",
                          unit: str = "ranks", title: str | None = None) -> Figure:
    """``plots.scaling_efficiency`` with a model's efficiency at the largest count marked
    beside its bar: ``model_efficiencies`` maps a label ("model: T_1/n + T_all-reduce") to a
    fraction (1.0 = linear), one marker each."""
    from labutils.plots.scaling import scaling_efficiency

    _require(0 < len(model_efficiencies) <= 3, "pass one to three model efficiencies")
    _require(all(e >= 0 for e in model_efficiencies.values()), "efficiencies are fractions >= 0")
    fig = scaling_efficiency(counts, throughputs, throughput_unit=throughput_unit, unit=unit, title=title)
    efficiency_axes = fig.axes[1]
    last = len(counts) - 1
    for marker, (label, efficiency) in zip(("kD", "k^", "ks"), model_efficiencies.items()):
        efficiency_axes.plot([last + 0.38], [100 * efficiency], marker, ms=7, label=label)
    top = max(efficiency_axes.get_ylim()[1], 115 * max(model_efficiencies.values()))
    efficiency_axes.set_ylim(0, top)
    handles, labels = efficiency_axes.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower right", fontsize=8, ncols=len(handles), frameon=False)
    return fig
