"""Data-parallel figures (chapter 6): sampler shards, DDP against one process, gradient buckets
and their overlap with backward, the compute/communication split of a step, weak scaling.

Times are seconds in the arguments and milliseconds (ms = 1e-3 s) on the axes; bucket sizes
are bytes in the arguments and MiB (2**20 bytes, as DDP's ``bucket_cap_mb``) on the axes.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from labutils.plots.base import CourseFigure, _require
from labutils.plots.scaling import scaling_efficiency

MIB = 2**20  # bytes: DDP's bucket_cap_mb counts MiB
_MS = 1e3    # milliseconds per second
_FLOAT32_EPSILON = 2.0**-23  # IEEE 754 binary32: spacing of floats just above 1.0


def sampler_orders(panels: Mapping[str, Sequence[Sequence[Sequence[int]]]]) -> Figure:
    """The dataset indices each rank's ``DistributedSampler`` yields, epoch by epoch.

    ``panels`` maps a panel title to ``orders[rank][epoch]`` (a list of indices), e.g. the
    return values of a sampler function run on every rank. One row per (epoch, rank), one box
    per index, coloured by index; a red outline marks an index already handed out in that
    epoch (the sampler's padding). Every panel needs the same number of ranks and epochs.
    """
    _require(len(panels) > 0, "no sampler orders to draw: pass {title: orders[rank][epoch]}")
    shapes = {(len(orders), len(orders[0]) if orders else 0) for orders in panels.values()}
    _require(len(shapes) == 1 and min(next(iter(shapes))) > 0,
             "every panel needs orders[rank][epoch] with the same (non-zero) ranks and epochs")
    ranks, epochs = next(iter(shapes))
    width = max(len(order) for orders in panels.values() for per_rank in orders for order in per_rank)
    fig = CourseFigure(figsize=(6 * len(panels), 0.45 * ranks * epochs + 1.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, orders) in zip(axes, panels.items()):
        _draw_orders(ax, orders, ranks, epochs)
        ax.set_xlim(0, width)
        ax.set_title(title, fontsize=10)
    fig.supxlabel("position in the rank's epoch (box = dataset index; red outline = repeated to pad)",
                  fontsize=9)
    return fig


def _draw_orders(ax, orders, ranks: int, epochs: int) -> None:
    from matplotlib import colormaps

    colors = colormaps["tab20"]
    labels = []
    for row, (epoch, rank) in enumerate((e, r) for e in range(epochs) for r in range(ranks)):
        seen = {index for earlier in range(rank) for index in orders[earlier][epoch]}
        for position, index in enumerate(orders[rank][epoch]):
            repeat = index in seen
            seen.add(index)
            ax.add_patch(Rectangle((position, row), 0.92, 0.85, facecolor=colors(index % 20),
                                   edgecolor="red" if repeat else "none", linewidth=2.5))
            ax.text(position + 0.46, row + 0.43, str(index), ha="center", va="center", fontsize=9)
        labels.append(f"epoch {epoch}, rank {rank}")
    ax.set_ylim(len(labels), 0)
    ax.set_yticks([i + 0.43 for i in range(len(labels))], labels, fontsize=8)
    ax.set_xticks([])


def loss_agreement(reference_losses: Sequence[float], ddp_losses: Sequence[float], *,
                   reference_label: str, ddp_label: str,
                   epsilon: float = _FLOAT32_EPSILON) -> Figure:
    """Two training-loss curves (left) and their absolute difference per step (right, log).

    The right panel draws ``epsilon`` (float32's machine epsilon by default) for scale; a
    difference of exactly zero is drawn at 1e-12 so the log axis can show it.
    """
    _require(len(reference_losses) > 0 and len(reference_losses) == len(ddp_losses),
             f"pass two loss lists of the same non-zero length, got {len(reference_losses)} "
             f"and {len(ddp_losses)}")
    _require(epsilon > 0, f"epsilon must be positive, got {epsilon}")
    fig = CourseFigure(figsize=(11, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(reference_losses, color="grey", linewidth=4, alpha=0.5, label=reference_label)
    left.plot(ddp_losses, "o", markersize=4, color="#4c72b0", label=ddp_label)
    left.set_xlabel("training step")
    left.set_ylabel("loss of the global batch")
    left.set_title("Training loss")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize=8, frameon=False)
    difference = [max(abs(a - b), 1e-12) for a, b in zip(ddp_losses, reference_losses)]
    right.semilogy(difference, "o-", markersize=3, color="#dd8452", label="|DDP - one process|")
    right.axhline(epsilon, color="grey", linestyle="--", label=f"float32 machine epsilon ({epsilon:.1e})")
    right.set_xlabel("training step")
    right.set_ylabel("absolute loss difference (log scale)")
    right.set_title("Difference (zero is drawn at 1e-12)")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize=8, frameon=False)
    return fig


def bucket_counts(caps_mib: Sequence[float], measured: Sequence[int], modelled: Sequence[int],
                  grad_bytes: float) -> Figure:
    """All-reduce calls per step against DDP's ``bucket_cap_mb`` (MiB): measured and modelled.

    ``measured`` are the buckets DDP used (after its first iteration), ``modelled`` the buckets
    ``costmodel.ddp_bucket_sizes`` forms from the parameters' sizes at each cap; ``grad_bytes`` is
    the model's gradient size in bytes (for the title and the ceil(G/C) line drawn beside them).
    """
    _require(len(caps_mib) > 0 and len(caps_mib) == len(measured) == len(modelled),
             "pass one measured and one modelled count per bucket cap")
    _require(all(cap > 0 for cap in caps_mib), f"bucket caps must be positive MiB, got {list(caps_mib)}")
    _require(grad_bytes > 0, f"grad_bytes must be positive bytes, got {grad_bytes}")
    fig = CourseFigure(figsize=(6, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ceil_counts = [math.ceil(grad_bytes / (cap * MIB)) for cap in caps_mib]
    ax.plot(caps_mib, ceil_counts, ":", color="grey", label="ceil(gradient bytes / cap)")
    ax.plot(caps_mib, measured, "o-", color="#4c72b0", label="measured: buckets DDP used")
    ax.plot(caps_mib, modelled, "s--", color="#dd8452", markersize=11, fillstyle="none", zorder=3,
            label="model: whole parameters, a bucket closes at or above its cap")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(caps_mib), [f"{cap:g}" for cap in caps_mib])
    ax.set_xlabel("bucket_cap_mb (MiB = 2^20 bytes)")
    ax.set_ylabel("all-reduce calls per step")
    ax.set_title(f"Buckets for {grad_bytes / MIB:.2f} MiB of gradients")
    ax.legend()
    return fig


def bucket_timeline(buckets: Sequence[Mapping[str, float]], compute_only_s: float,
                    ddp_backward_s: float, cap_mib: float) -> Figure:
    """One DDP backward pass: each bucket's all-reduce against the backward pass alone.

    ``buckets`` hold ``bytes``, ``ready`` (when DDP handed the bucket to its all-reduce) and
    ``done`` (when the all-reduce finished), in seconds since ``loss.backward()`` was called.
    ``compute_only_s`` is the same backward under ``ddp.no_sync()`` (no communication),
    ``ddp_backward_s`` the backward with DDP's all-reduces, both in seconds.
    """
    _require(len(buckets) > 0, "no buckets to draw: record them with a DDP communication hook")
    _require(compute_only_s > 0 and ddp_backward_s > 0,
             f"backward times must be positive seconds, got {compute_only_s} and {ddp_backward_s}")
    _require(all(0 <= bucket["ready"] <= bucket["done"] for bucket in buckets),
             "every bucket needs 0 <= ready <= done (seconds since backward started)")
    fig = CourseFigure(figsize=(9, 1.9 + 0.32 * len(buckets)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(0, compute_only_s * _MS, color="#bbbbbb", label="backward alone (no_sync)")
    ax.barh(1, ddp_backward_s * _MS, color="#8fbc8f",
            label="DDP backward (returns when the last all-reduce is done)")
    for row, bucket in enumerate(buckets, start=2):
        ax.barh(row, (bucket["done"] - bucket["ready"]) * _MS, left=bucket["ready"] * _MS, color="#dd8452",
                label="bucket all-reduce: handed over -> finished" if row == 2 else None)
    ax.set_yticks(range(len(buckets) + 2), ["backward", "DDP backward"]
                  + [f"bucket {i} ({bucket['bytes'] / MIB:.2f} MiB)" for i, bucket in enumerate(buckets)],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the start of backward")
    ax.set_title(f"One step at bucket_cap_mb = {cap_mib:g}: when each bucket's all-reduce ran")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


def step_time_breakdown(compute_s: float, comm_s: float, exposed_s: float, *, title: str) -> Figure:
    """Three bars in ms: a step's compute, its gradient all-reduce, and the part not hidden."""
    _require(min(compute_s, comm_s, exposed_s) >= 0, "times must be non-negative seconds")
    _require(exposed_s <= comm_s * (1 + 1e-9), "the exposed time cannot exceed the all-reduce time")
    fig = CourseFigure(figsize=(7.5, 2.4), layout="constrained")
    ax = fig.add_subplot()
    values = [compute_s * _MS, comm_s * _MS, exposed_s * _MS]
    bars = ax.barh(["compute", "all-reduce", "exposed\ncommunication"], values,
                   color=["#55a868", "#dd8452", "#c44e52"])
    for bar, value in zip(bars, values):
        ax.annotate(f" {value:,.4g} ms", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.25 if max(values) > 0 else 1)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per training step")
    ax.set_title(title, fontsize=10)
    return fig


def scaling_with_model(rank_counts: Sequence[int], throughputs: Sequence[float],
                       model_efficiency: Sequence[float], *, model_label: str,
                       throughput_unit: str = "samples/s", unit: str = "ranks",
                       title: str | None = None) -> Figure:
    """:func:`labutils.plots.scaling_efficiency` with a model's efficiency (a fraction per
    count, in the order of ``rank_counts``) drawn as black diamonds beside the measured bars."""
    _require(len(model_efficiency) == len(rank_counts),
             f"pass one model efficiency per count: {len(model_efficiency)} for {len(rank_counts)}")
    _require(all(value >= 0 for value in model_efficiency), "model efficiencies must be non-negative fractions")
    fig = scaling_efficiency(rank_counts, throughputs, throughput_unit=throughput_unit, unit=unit, title=title)
    ordered = [value for _, value in sorted(zip(rank_counts, model_efficiency))]
    efficiency_axes = fig.axes[1]
    efficiency_axes.plot([position + 0.2 for position in range(len(ordered))], [100 * value for value in ordered],
                         "kD", markersize=7, label=model_label)
    efficiency_axes.set_ylim(0, max(efficiency_axes.get_ylim()[1], 115 * max(ordered)))
    fig.legend(*efficiency_axes.get_legend_handles_labels(), loc="outside lower right", fontsize=8,
               frameon=False)
    return fig
