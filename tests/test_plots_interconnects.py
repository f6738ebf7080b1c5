"""labutils.plots (chapter 4): link bars, copy and ping-pong curves, topology grids; units and bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.text  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import costmodel, plots  # noqa: E402
from labutils.machine import interconnects, topology
from figure_text import bar_widths, legend_texts, texts  # noqa: E402


def test_link_ladder_bars_are_per_direction_with_measurements_last():
    links = [interconnects.link(name) for name in ("pcie5", "nvlink4", "ib_ndr")]
    fig = plots.link_ladder(links, {"measured here: gloo": 2.5}, scale=("H100 memory", 3350.0))
    ax = fig.axes[0]
    assert bar_widths(ax) == pytest.approx([63.0154, 450.0, 50.0, 2.5], rel=1e-4)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["PCIe Gen5 x16, per x16 slot", "NVLink4 (H100), per GPU, all its NVLinks",
                      "InfiniBand NDR, per port", "measured here: gloo"]
    assert "450 GB/s" in texts(fig) and "2.5 GB/s" in texts(fig)
    assert legend_texts(fig) == ["for scale: H100 memory, 3,350 GB/s"]
    assert ax.get_xscale() == "log" and "per direction" in ax.get_xlabel() and "1e9" in ax.get_xlabel()
    colors = [patch.get_facecolor()[:3] for patch in ax.patches]
    assert colors[0] != colors[1] and colors[3] == matplotlib.colors.to_rgb(plots.interconnects.KIND_COLORS["measured"])


def test_link_ladder_bad_input():
    with pytest.raises(ValueError, match="no links"):
        plots.link_ladder([])
    with pytest.raises(ValueError, match="positive, finite"):
        plots.link_ladder([], {"broken": 0.0})


def test_copy_bandwidth_series_and_link_line():
    sizes = [2**20, 2**24]
    fig = plots.copy_bandwidth(sizes, {"pinned": [20.0, 25.0]}, 31.5, "PCIe Gen4 x16")
    ax = fig.axes[0]
    measured, link = ax.get_lines()
    assert list(measured.get_ydata()) == [20.0, 25.0] and list(measured.get_xdata()) == sizes
    assert link.get_ydata()[0] == 31.5
    assert legend_texts(fig) == ["pinned", "PCIe Gen4 x16: 31.5 GB/s"]
    fig.canvas.draw()
    assert {"1 MiB", "16 MiB"} <= {t.get_text() for t in ax.get_xticklabels()}
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()
    with pytest.raises(ValueError, match="1 values for 2 sizes"):
        plots.copy_bandwidth(sizes, {"pinned": [20.0]})


def test_topology_matrices_colour_each_cell_by_link_class():
    hgx = topology.example("02").topology
    pcie = topology.example("07").topology
    fig = plots.topology_matrices({"HGX": hgx, "PCIe": pcie, "only HGX again": hgx})
    first, second = fig.axes[:2]
    assert first.get_title() == "HGX" and second.get_title() == "PCIe"
    assert len(second.patches) == len(pcie.devices) ** 2
    cell_texts = [t.get_text() for t in second.texts]
    assert cell_texts[:8] == list(pcie.links[0])
    colors = plots.interconnects.LINK_CLASS_COLORS
    sys_cells = [p for p, link in zip(second.patches, (link for row in pcie.links for link in row)) if link == "SYS"]
    assert sys_cells and all(p.get_facecolor()[:3] == matplotlib.colors.to_rgb(colors["SYS"]) for p in sys_cells)
    nv = [p for p, link in zip(first.patches, (link for row in hgx.links for link in row)) if link == "NV18"]
    assert all(p.get_facecolor()[:3] == matplotlib.colors.to_rgb(colors["NV#"]) for p in nv)
    assert not fig.axes[3].axison  # three matrices on a 2 x 2 grid
    assert legend_texts(fig) == list(colors)
    with pytest.raises(ValueError, match="not a labutils.machine.topology.Topology"):
        plots.topology_matrices({"text": "GPU0 X"})


def test_numa_layout_groups_gpus_by_node():
    pcie = topology.example("07").topology
    fig = plots.numa_layout(pcie, title="two sockets")
    drawn = texts(fig)
    assert any(t.startswith("NUMA node 0: CPUs ") for t in drawn) and any(t.startswith("NUMA node 1") for t in drawn)
    assert [t for t in drawn if t.startswith("GPU")] == list(pcie.gpus)
    assert "SYS" in drawn
    no_affinity = topology.parse_topology("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV1\t X \n")
    with pytest.raises(ValueError, match="no NUMA Affinity"):
        plots.numa_layout(no_affinity)


def test_ping_pong_draws_times_bandwidth_and_fit():
    sizes = [8 * 4**k for k in range(8)]
    times = [2e-5 + s / 5e9 for s in sizes]
    fit = costmodel.fit_alpha_beta(sizes, times, "broadcast", "ring", world_size=2, weighting="relative")
    fig = plots.ping_pong(sizes, times, {"relative fit": fit})
    left, right = fig.axes
    assert list(left.get_lines()[0].get_ydata()) == pytest.approx([t * 1e6 for t in times])
    assert list(right.get_lines()[0].get_ydata()) == pytest.approx([s / t / 1e9 for s, t in zip(sizes, times)])
    assert "1/beta = 5.00 GB/s" in legend_texts(fig) and "S_1/2 = alpha/beta" in legend_texts(fig)
    assert left.get_ylabel() == "time per message (us)" and "GB/s" in right.get_ylabel()
    assert all("bytes" in ax.get_xlabel() for ax in fig.axes)
    with pytest.raises(ValueError, match="at least two sizes"):
        plots.ping_pong([8], [1e-5], {"fit": fit})


def test_ring_time_by_link_in_ms():
    links = [interconnects.link("nvlink4"), interconnects.link("100gbe")]
    times = [7.8e-3, 0.28]
    fig = plots.ring_time_by_link(links, times, title="2 GB over 8 GPUs")
    ax = fig.axes[0]
    assert bar_widths(ax) == pytest.approx([7.8, 280.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["NVLink4 (H100): 450 GB/s",
                                                             "100 Gigabit Ethernet: 12.5 GB/s"]
    assert "280.0 ms" in texts(fig) and "ms" in ax.get_xlabel()
    with pytest.raises(ValueError, match="one time per link"):
        plots.ring_time_by_link(links, [1.0], title="t")
