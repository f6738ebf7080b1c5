"""Chapter 3's figures in labutils.plots.roofline_chart beyond the roofline itself (which
tests/test_plots.py covers): intensities against ridges, rooflines compared, measured time
against the bound, where a workload's time goes."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.costmodel import roofline as rl  # noqa: E402
from figure_text import legend_texts, texts  # noqa: E402


def test_roofline_legend_uses_the_course_notation():
    fig = plots.roofline(rl.DEVICES["h100"], "bf16")
    assert legend_texts(fig)[0] == "roof: min(P, I x BW), P = 989 TFLOP/s, BW = 3350 GB/s"


def test_intensity_bars_draw_each_op_and_every_ridge_below_the_axes():
    ops = [rl.elementwise(2**20), rl.gemm(1024, 1024, 1024)]
    ridges = {name: rl.ridge_point(rl.DEVICES[key], "bf16") for key, name in (("h100", "H100"), ("h200", "H200"))}
    fig = plots.intensity_bars(ops, ridges)
    ax = fig.axes[0]
    widths = [patch.get_width() for patch in ax.patches if isinstance(patch, Rectangle)]
    assert widths == pytest.approx([1 / 6, 1024 / 3])
    assert [line.get_xdata()[0] for line in ax.get_lines()] == pytest.approx([989e12 / 3.35e12, 989e12 / 4.8e12])
    assert legend_texts(fig) == ["ridge of H100: 295 FLOP/B", "ridge of H200: 206 FLOP/B"]
    assert ax.get_legend() is None, "the legend must sit outside the axes, where it hides no bar"
    assert len({line.get_color() for line in ax.get_lines()}) == 2
    assert "FLOP/byte" in ax.get_xlabel()


def test_intensity_bars_reject_bad_input():
    with pytest.raises(ValueError, match="at least one OpCost"):
        plots.intensity_bars([], {})
    with pytest.raises(ValueError, match="ridge points"):
        plots.intensity_bars([rl.elementwise(8)], {"x": 0})


def test_rooflines_compared_draws_each_roof_with_its_ridge():
    devices = {"H100": rl.DEVICES["h100"], "H200": rl.DEVICES["h200"]}
    fig = plots.rooflines_compared(devices, "bf16", intensity_range=(1, 1000))
    ax = fig.axes[0]
    roofs = [line for line in ax.get_lines() if len(line.get_xdata()) > 1]
    assert [max(line.get_ydata()) for line in roofs] == pytest.approx([989, 989])
    assert roofs[0].get_ydata()[0] == pytest.approx(3.35) and roofs[1].get_ydata()[0] == pytest.approx(4.8)
    assert roofs[0].get_linestyle() != roofs[1].get_linestyle(), "equal compute roofs must stay distinguishable"
    assert legend_texts(fig) == ["H100: ridge 295 FLOP/B", "H200: ridge 206 FLOP/B"]
    with pytest.raises(ValueError, match="intensity_range"):
        plots.rooflines_compared(devices, "bf16", intensity_range=(10, 1))


def test_predicted_vs_measured_in_microseconds():
    fig = plots.predicted_vs_measured([("add", "memory", 1e-3, 2e-3), ("gemm", "compute", 1e-6, 1e-6)])
    ax = fig.axes[0]
    memory, compute = ax.collections
    assert memory.get_offsets().tolist() == [[1000, 2000]] and compute.get_offsets().tolist() == [[1, 1]]
    assert "microseconds" in ax.get_xlabel() and "microseconds" in ax.get_ylabel()
    with pytest.raises(ValueError, match="'memory' or 'compute'"):
        plots.predicted_vs_measured([("add", "disk", 1, 1)])


def test_time_share_bars_stack_to_100_percent_and_label_throughput():
    results = {"training": (900e12, {"GEMM": 9.0, "attention": 1.0}), "decode": (3e12, {"GEMM": 1.0, "attention": 3.0})}
    fig = plots.time_share_bars(results, 989e12, device_label="roofline bound")
    ax = fig.axes[0]
    widths = [patch.get_width() for patch in ax.patches if isinstance(patch, Rectangle)]
    assert widths == pytest.approx([90, 10, 25, 75])
    assert "900 TFLOP/s (91.0% of peak)" in texts(fig) and "3 TFLOP/s (0.3% of peak)" in texts(fig)
    assert legend_texts(fig) == ["GEMM", "attention"]
    with pytest.raises(ValueError, match="positive peak"):
        plots.time_share_bars(results, 0, device_label="x")


def test_chapter_three_figures_show_themselves_as_png():
    figures = [plots.intensity_bars([rl.elementwise(8)], {"H100": 295.0}),
               plots.rooflines_compared({"H100": rl.DEVICES["h100"]}, "bf16"),
               plots.predicted_vs_measured([("add", "memory", 1e-3, 2e-3)]),
               plots.time_share_bars({"t": (1e12, {"GEMM": 1.0})}, 2e12, device_label="x")]
    for fig in figures:
        assert isinstance(fig, plots.CourseFigure)
        assert fig._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")
