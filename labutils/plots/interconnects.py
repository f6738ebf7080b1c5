"""Figures of chapter 4: links side by side, copies and messages measured against them, and
``nvidia-smi topo -m`` matrices drawn as coloured grids.

Bandwidth in GB/s = 1e9 B/s per direction, sizes in bytes, times in seconds on input (drawn
in us or ms as each axis says). Links are ``labutils.machine.interconnects.Link`` records; matrices are
``labutils.machine.topology.Topology`` objects.
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from labutils.plots.base import CourseFigure, _require, _set_bytes_axis

#: bar colour per kind of link (``Link.kind``), and for measurements
KIND_COLORS = {"pcie": "#4c72b0", "nvlink": "#55a868", "infiniband": "#8172b3", "ethernet": "#937860",
               "measured": "#dd8452"}
#: matrix cell colour per link class, fastest first: any NV# is green, then the PCIe paths
LINK_CLASS_COLORS = {"NV#": "#55a868", "PIX": "#a6cee3", "PXB": "#1f78b4", "PHB": "#fdbf6f",
                     "NODE": "#ff7f00", "SYS": "#e31a1c"}


def link_ladder(links: Sequence, measured: Mapping[str, float] | None = None,
                scale: tuple[str, float] | None = None,
                title: str = "Links, GB/s per direction (log scale)") -> Figure:
    """Horizontal bars of GB/s per direction, one per link (colour by kind), measurements in orange.

    ``links``: ``labutils.machine.interconnects.Link`` records (``interconnects.table()``), labelled
    with what one figure covers ("PCIe Gen5 x16, x16 slot"). ``measured``: label -> GB/s
    measured on this machine. ``scale``: (label, GB/s) of a dotted reference line, e.g. a
    GPU's memory bandwidth.
    """
    bars = [(f"{link.label}, per {re.sub(r' [(].*?[)]', '', link.per)}", link.per_direction_GBps,
             KIND_COLORS.get(link.kind, "grey")) for link in links]  # "NVLink4 (H100), per GPU, all its NVLinks"
    bars += [(label, value, KIND_COLORS["measured"]) for label, value in (measured or {}).items()]
    _require(len(bars) > 0, "no links to draw")
    _require(all(0 < value < math.inf for _, value, _ in bars), "every bandwidth must be a positive, finite GB/s")
    _require(scale is None or 0 < scale[1] < math.inf, "the scale line needs a positive, finite GB/s")
    fig = CourseFigure(figsize=(10, 0.38 * len(bars) + 1.4), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(bars)), [value for _, value, _ in bars], color=[color for _, _, color in bars])
    for row, (_, value, _) in enumerate(bars):
        ax.text(value * 1.05, row, f"{value:,.3g} GB/s", va="center", fontsize=9)
    top = max(value for _, value, _ in bars)
    if scale is not None:
        ax.axvline(scale[1], color="grey", linestyle=":", label=f"for scale: {scale[0]}, {scale[1]:,.0f} GB/s")
        ax.legend(loc="lower right", fontsize=9)
        top = max(top, scale[1])
    ax.set_yticks(range(len(bars)), [label for label, _, _ in bars])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(value for _, value, _ in bars) / 2, top * 3)
    ax.set_xlabel("GB/s per direction (1 GB/s = 1e9 bytes/s)")
    ax.set_title(title)
    return fig


def copy_bandwidth(sizes: Sequence[int], series: Mapping[str, Sequence[float]],
                   link_GBps: float | None = None, link_label: str | None = None,
                   title: str = "Copy bandwidth against copy size") -> Figure:
    """Measured GB/s (1e9 B/s) against bytes per copy (log2 axis), with a link's line.

    ``series`` maps a label ("host -> device, pinned") to one GB/s per size.
    """
    _require(len(sizes) >= 1 and min(sizes) > 0, "sizes must be positive byte counts")
    _require(len(series) >= 1, "no measurements to draw")
    for label, values in series.items():
        _require(len(values) == len(sizes), f"{label!r} has {len(values)} values for {len(sizes)} sizes")
    _require(link_GBps is None or link_GBps > 0, f"link_GBps must be positive, got {link_GBps!r}")
    fig = CourseFigure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for label, values in series.items():
        ax.plot(sizes, values, marker="o", label=label)
    if link_GBps is not None:
        ax.axhline(link_GBps, color="black", linestyle="--", label=f"{link_label or 'link'}: {link_GBps:.1f} GB/s")
    ax.set_xscale("log", base=2)
    _set_bytes_axis(ax.xaxis, sizes)
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s (1e9 bytes/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=9)
    return fig


def _link_class(link: str) -> str:
    """'NV#' for any NVLink count ("NV12"), else the path type itself ("X" on the diagonal)."""
    return "NV#" if link.startswith("NV") and link[2:].isdigit() else link


def _draw_matrix(ax, topo, title: str) -> None:
    """The matrix as coloured cells, one colour per link class (green NVLink ... red SYS)."""
    count = len(topo.devices)
    fontsize = 9 if count <= 8 else 6.5
    for i, row in enumerate(topo.links):
        for j, link in enumerate(row):
            color = LINK_CLASS_COLORS.get(_link_class(link), "white")
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=color, edgecolor="white"))
            ax.text(j, i, link, ha="center", va="center", fontsize=fontsize)
    ax.set_xlim(-0.5, count - 0.5)
    ax.set_ylim(count - 0.5, -0.5)
    ax.set_xticks(range(count), topo.devices, rotation=90, fontsize=fontsize + 1)
    ax.set_yticks(range(count), topo.devices, fontsize=fontsize + 1)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)


def topology_matrices(topologies: Mapping[str, object]) -> Figure:
    """One coloured grid per ``nvidia-smi topo -m`` matrix (``labutils.machine.topology.Topology``), two per row.

    ``topologies`` maps a title to a parsed matrix; cells carry the link as printed ("NV18",
    "PIX", "SYS") on the colour of its class, fastest (green) to slowest (red).
    """
    _require(len(topologies) >= 1, "no topology to draw")
    for name, topo in topologies.items():
        _require(hasattr(topo, "devices") and hasattr(topo, "links"),
                 f"{name!r} is not a labutils.machine.topology.Topology (parse it with topology.parse_topology)")
    columns = 1 if len(topologies) == 1 else 2
    rows = math.ceil(len(topologies) / columns)
    fig = CourseFigure(figsize=(6.5 * columns, 6 * rows + 0.6), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    for ax, (name, topo) in zip(axes, topologies.items()):
        _draw_matrix(ax, topo, name)
    for ax in axes[len(topologies):]:
        ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, color=color, label=name) for name, color in LINK_CLASS_COLORS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
               title="path between two devices, fastest (left) to slowest (right)")
    return fig


def numa_layout(topo, title: str = "Which GPUs belong to which socket (from topo -m)") -> Figure:
    """One box per NUMA node of a ``Topology`` with its CPUs and the GPUs whose affinity points to it.

    Needs the matrix's NUMA Affinity column; neighbouring nodes are joined by a red arrow
    marked SYS (the inter-socket link).
    """
    node_of_gpu = {gpu: topo.affinity[gpu].numa_affinity for gpu in topo.gpus
                   if gpu in topo.affinity and topo.affinity[gpu].numa_affinity}
    _require(len(node_of_gpu) > 0, "this matrix has no NUMA Affinity column to draw")
    nodes = sorted(set(node_of_gpu.values()))
    widest = max(sum(1 for n in node_of_gpu.values() if n == node) for node in nodes)
    box = max(4.6, 1.1 * widest + 0.4)
    fig = CourseFigure(figsize=(max(9, 2.2 * box * len(nodes) / 2), 3.2), layout="constrained")
    ax = fig.add_subplot()
    for column, node in enumerate(nodes):
        left = column * (box + 0.4)
        ax.add_patch(Rectangle((left, 0), box, 3, facecolor="#f2f2f2", edgecolor="black"))
        members = [gpu for gpu, n in node_of_gpu.items() if n == node]
        cpus = topo.affinity[members[0]].cpu_affinity or "not printed"
        ax.text(left + box / 2, 2.55, f"NUMA node {node}: CPUs {cpus}", ha="center", fontsize=10)
        for k, gpu in enumerate(members):
            ax.add_patch(Rectangle((left + 0.2 + 1.1 * k, 0.4), 0.95, 1.2, facecolor="#55a868"))
            ax.text(left + 0.675 + 1.1 * k, 1.0, gpu, ha="center", va="center", fontsize=9, color="white")
        if column > 0:
            ax.annotate("", xy=(left, 1.5), xytext=(left - 0.4, 1.5),
                        arrowprops=dict(arrowstyle="<->", lw=2, color="#e31a1c"))
            ax.text(left - 0.2, 1.85, "SYS", color="#e31a1c", ha="center", fontsize=10)
    ax.set_xlim(-0.2, len(nodes) * (box + 0.4))
    ax.set_ylim(-0.1, 3.2)
    ax.axis("off")
    ax.set_title(title)
    return fig


def ping_pong(sizes: Sequence[int], times: Sequence[float], fits: Mapping[str, object],
              title: str = "Ping-pong between rank 0 and rank 1") -> Figure:
    """Two panels: time per message (us) against size (bytes), and bandwidth reached (GB/s).

    ``times``: measured seconds per message. ``fits`` maps a label to an alpha-beta fit
    (``labutils.costmodel.AlphaBetaFit``, alpha in s, beta in s/B) drawn on the left; the
    first one is also drawn on the right with its 1/beta and S_1/2 = alpha/beta.
    """
    _require(len(sizes) >= 2 and len(sizes) == len(times), "give at least two sizes and one time per size")
    _require(min(sizes) > 0 and min(times) > 0, "sizes and times must be positive for log axes")
    _require(len(fits) >= 1, "give at least one fit")
    grid = [min(sizes) * (max(sizes) / min(sizes)) ** (k / 99) for k in range(100)]
    fig = CourseFigure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(sizes, [t * 1e6 for t in times], "o", label="measured")
    for style, (label, fit) in zip(("-", ":", "--"), fits.items()):
        left.plot(grid, [fit.predict(size) * 1e6 for size in grid], style, label=label)
    main_label, main = next(iter(fits.items()))
    right.plot(sizes, [size / t / 1e9 for size, t in zip(sizes, times)], "o", label="measured: S / T")
    right.plot(grid, [size / main.predict(size) / 1e9 for size in grid], "-",
               label=f"model: S / T, T = {main_label}")
    if main.beta > 0:
        right.axhline(1 / main.beta / 1e9, color="grey", linestyle="--", label=f"1/beta = {1 / main.beta / 1e9:.2f} GB/s")
        if main.alpha > 0:
            right.axvline(main.alpha / main.beta, color="grey", linestyle=":", label="S_1/2 = alpha/beta")
    for ax, ylabel, panel_title in ((left, "time per message (us)", "Time per message"),
                                    (right, "GB/s (1e9 bytes/s)", "Bandwidth reached")):
        ax.set_xscale("log", base=2)
        _set_bytes_axis(ax.xaxis, sizes, max_ticks=7)
        ax.set_xlabel("message size S (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title)
    left.legend(fontsize=8, loc="upper left")  # the points lie low on the left: room above them
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2)  # below: off the data
    left.set_yscale("log")
    fig.suptitle(title)
    return fig


def ring_time_by_link(links: Sequence, times_s: Sequence[float], title: str) -> Figure:
    """Horizontal bars (ms, log axis) of one collective's time when its slowest hop is each link.

    ``links``: ``labutils.machine.interconnects.Link`` records; ``times_s``: seconds for each, e.g.
    from ``labutils.costmodel.collective_time`` with beta = 1 / the link's bytes per second.
    """
    _require(len(links) >= 1 and len(links) == len(times_s), "give one time per link")
    _require(all(0 < t < math.inf for t in times_s), "times must be positive, finite seconds")
    fig = CourseFigure(figsize=(9, 0.5 * len(links) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(links)), [t * 1e3 for t in times_s],
            color=[KIND_COLORS.get(link.kind, "grey") for link in links])
    for row, t in enumerate(times_s):
        ax.text(t * 1e3 * 1.05, row, f"{t * 1e3:,.1f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(links)), [f"{link.label}: {link.per_direction_GBps:.3g} GB/s" for link in links])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(times_s) * 1e3 / 2, max(times_s) * 1e3 * 4)
    ax.set_xlabel("time (ms, log scale)")
    ax.set_title(title)
    return fig
