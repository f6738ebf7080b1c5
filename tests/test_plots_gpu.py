"""Chapter 2's figures (labutils.plots.device_benchmarks and gpu_architecture): what is drawn,
labels and units, and clear errors on bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.costmodel import roofline as rl  # noqa: E402
from figure_text import legend_texts, texts  # noqa: E402


def bar_sizes(ax, horizontal: bool = False) -> list[float]:
    return [patch.get_width() if horizontal else patch.get_height()
            for patch in ax.patches if isinstance(patch, Rectangle)]


def test_matrix_unit_speedup_draws_ratios_and_the_datasheet_bar():
    fig = plots.matrix_unit_speedup({"float32": 1e11, "bfloat16": 4.5e11}, "float32",
                                    device_label="this CPU", datasheet=("H100 BF16 / FP32", 14.8))
    ax = fig.axes[0]
    assert bar_sizes(ax) == pytest.approx([1.0, 4.5, 14.8])
    assert {"1.0x", "4.5x", "14.8x"} <= set(texts(fig))
    assert "float32" in ax.get_ylabel() and "this CPU" in ax.get_title()
    assert ax.patches[2].get_facecolor() != ax.patches[0].get_facecolor()


def test_matrix_unit_speedup_rejects_a_missing_baseline_and_bad_numbers():
    with pytest.raises(ValueError, match="baseline"):
        plots.matrix_unit_speedup({"bfloat16": 1e11}, "float32", device_label="x")
    with pytest.raises(ValueError, match="positive"):
        plots.matrix_unit_speedup({"float32": 0.0}, "float32", device_label="x")
    with pytest.raises(ValueError, match="datasheet"):
        plots.matrix_unit_speedup({"float32": 1.0}, "float32", device_label="x", datasheet=("y", -1))


def test_cache_bandwidth_sweep_draws_gb_per_s_cache_lines_and_datasheet():
    sweep = {2**k: (10 + k) * 1e9 for k in range(14, 24)}
    fig = plots.cache_bandwidth_sweep(sweep, [("L1", 48 * 2**10), ("L2", 2**20)], datasheet=("HBM", 3.35e12))
    ax = fig.axes[0]
    measured = ax.get_lines()[0]
    assert list(measured.get_xdata()) == sorted(sweep)
    assert list(measured.get_ydata()) == pytest.approx([sweep[size] / 1e9 for size in sorted(sweep)])
    labels = legend_texts(fig)
    assert "L1 size: 48 KiB" in labels and "L2 size: 1 MiB" in labels
    assert any("3,350 GB/s" in label for label in labels)
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()


def test_cache_bandwidth_sweep_rejects_bad_input():
    with pytest.raises(ValueError, match="at least two"):
        plots.cache_bandwidth_sweep({1024: 1e9})
    with pytest.raises(ValueError, match="positive"):
        plots.cache_bandwidth_sweep({1024: 1e9, 2048: -1.0})
    with pytest.raises(ValueError, match="cache sizes"):
        plots.cache_bandwidth_sweep({1024: 1e9, 2048: 1e9}, [("L1", 0)])


def test_call_time_vs_size_draws_microseconds():
    measured = {1: 1e-6, 64: 6e-6, 512: 2.3e-3}
    model = {1: 1e-6, 64: 5e-6, 512: 2.3e-3}
    fig = plots.call_time_vs_size(measured, model, model_label="T_0 + 2N^3 / P")
    ax = fig.axes[0]
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([1, 6, 2300])
    assert list(ax.get_lines()[1].get_ydata()) == pytest.approx([1, 5, 2300])
    assert "microseconds" in ax.get_ylabel() and "T_0 + 2N^3 / P" in legend_texts(fig)
    with pytest.raises(ValueError, match="same sizes"):
        plots.call_time_vs_size(measured, {1: 1e-6, 64: 5e-6}, model_label="m")


def test_generation_growth_is_relative_to_the_first_gpu():
    keys = ["v100", "h100", "h200"]
    fig = plots.generation_growth({"V100": 2017, "H100": 2022, "H200": 2023},
                                  {"HBM bandwidth": [rl.DEVICES[k].mem_bandwidth for k in keys]})
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [2017, 2022, 2023]
    assert list(line.get_ydata()) == pytest.approx([1, 3.35e12 / 900e9, 4.8e12 / 900e9])
    assert "V100" in ax.get_ylabel() and {"V100", "H100", "H200"} <= set(texts(fig))
    with pytest.raises(ValueError, match="2 values for 3 GPUs"):
        plots.generation_growth({"a": 1, "b": 2, "c": 3}, {"m": [1, 2]})


def test_nvlink_domains_labels_tb_per_s():
    fig = plots.nvlink_domains({"HGX H100": 8 * 900e9, "NVL72": 72 * 1.8e12})
    ax = fig.axes[0]
    assert bar_sizes(ax, horizontal=True) == pytest.approx([7.2, 129.6])
    assert {"7.2 TB/s", "129.6 TB/s"} <= set(texts(fig))
    assert "TB/s" in ax.get_xlabel() and "both directions" in ax.get_xlabel()
    with pytest.raises(ValueError, match="positive"):
        plots.nvlink_domains({"x": 0})


def test_grouped_bars_puts_the_legend_outside_the_axes_and_draws_lines():
    fig = plots.grouped_bars(["H100", "H200"], {"FLOP/s": [1, 1], "bandwidth": [1, 1.43]}, ylabel="relative (x)",
                             title="t", lines={"ratio": [1, 2]})
    ax = fig.axes[0]
    assert sorted(bar_sizes(ax)) == pytest.approx([1, 1, 1, 1.43])
    assert list(ax.get_lines()[0].get_ydata()) == [1, 2]
    assert ax.get_legend() is None and set(legend_texts(fig)) == {"FLOP/s", "bandwidth", "ratio"}
    with pytest.raises(ValueError, match="1 values for 2 categories"):
        plots.grouped_bars(["a", "b"], {"s": [1]}, ylabel="y", title="t")


def test_thread_block_map_shows_the_owner_array():
    owner = np.arange(12).reshape(3, 4)
    fig = plots.thread_block_map(owner, block=2)
    image = fig.axes[0].get_images()[0]
    assert (np.asarray(image.get_array()) == owner % 20).all()
    assert "threadIdx.x" in fig.axes[0].get_xlabel()
    with pytest.raises(ValueError, match="2-D"):
        plots.thread_block_map(np.arange(4), block=2)


def test_simt_efficiency_bars_draw_percentages():
    fig = plots.simt_efficiency_bars({"if i % 2 == 0": {"warp of 32": 0.5, "wavefront of 64": 0.5},
                                      "uniform": {"warp of 32": 1.0, "wavefront of 64": 1.0}})
    ax = fig.axes[0]
    assert sorted(bar_sizes(ax, horizontal=True)) == pytest.approx([50, 50, 100, 100])
    assert "(%)" in ax.get_xlabel()
    with pytest.raises(ValueError, match="fractions"):
        plots.simt_efficiency_bars({"p": {"warp": 50}})


def test_systolic_wavefront_draws_snapshots_and_utilisation():
    frames = [np.eye(4, dtype=bool), np.ones((4, 4), dtype=bool), np.zeros((4, 4), dtype=bool)]
    fig = plots.systolic_wavefront(frames, snapshots=(0, 1))
    assert len(fig.axes) == 3
    assert "cycle 1: 16 of 16 cells busy" in texts(fig)
    assert list(fig.axes[-1].get_lines()[0].get_ydata()) == pytest.approx([25, 100, 0])
    with pytest.raises(ValueError, match="snapshots"):
        plots.systolic_wavefront(frames, snapshots=(3,))


def test_torus_hop_distribution_shares_and_mean():
    fig = plots.torus_hop_distribution({"ring of 4": [1, 2, 1]}, chips=4)
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == pytest.approx([25, 50, 25])
    assert legend_texts(fig) == ["ring of 4: mean 1.0 hops, max 2"]
    with pytest.raises(ValueError, match="add up to 8"):
        plots.torus_hop_distribution({"ring of 4": [1, 2, 1]}, chips=8)


def test_chapter_two_figures_show_themselves_as_png():
    figures = [plots.matrix_unit_speedup({"float32": 1.0}, "float32", device_label="x"),
               plots.cache_bandwidth_sweep({1024: 1e9, 2048: 2e9}),
               plots.nvlink_domains({"HGX": 7.2e12}),
               plots.thread_block_map(np.zeros((2, 2), dtype=int), block=1),
               plots.torus_hop_distribution({"ring": [1, 1]}, chips=2)]
    for fig in figures:
        assert isinstance(fig, plots.CourseFigure)
        assert fig._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")
