"""Chapter 7.9's figures (labutils.plots.checkpoint): check what is drawn (data, labels, units) and
that bad input is refused with a clear error."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from figure_text import bar_heights, legend_texts, texts  # noqa: E402


# ----------------------------------------------------------------------------- bytes per rank


def test_checkpoint_bytes_per_rank_draws_one_bar_per_rank_in_mb_with_the_model_line():
    fig = plots.checkpoint_bytes_per_rank([6.342e6, 6.369e6, 6.3e6], 6.304e6, title="three ranks")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([6.342, 6.369, 6.3])
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert "MB" in ax.get_ylabel() and "10^{6}" in ax.get_ylabel()
    assert ax.get_xlabel() == "rank (of n = 3)"
    model_lines = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(model_lines) == 1 and model_lines[0].get_ydata()[0] == pytest.approx(6.304)
    assert "model: 6.3 MB per rank" in legend_texts(fig)
    assert "6.34 MB" in texts(fig) and "three ranks" in texts(fig)


def test_checkpoint_bytes_per_rank_stacks_the_metadata_on_rank_0_and_picks_the_unit():
    fig = plots.checkpoint_bytes_per_rank([2.0e9, 2.1e9], 2.0e9, metadata_bytes=5e8)
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([2.0, 2.1, 0.5])        # two ranks, then .metadata on rank 0
    metadata = [p for p in ax.patches if isinstance(p, Rectangle)][2]
    assert metadata.get_x() + metadata.get_width() / 2 == pytest.approx(0) and metadata.get_y() == pytest.approx(2.0)
    assert "GB" in ax.get_ylabel()
    assert any(text.startswith(".metadata (written by rank 0): 0.5 GB") for text in legend_texts(fig))
    small = plots.checkpoint_bytes_per_rank([800, 900], 850)
    assert small.axes[0].get_ylabel() == "bytes written (B)"


@pytest.mark.parametrize("per_rank, model, metadata", [
    ([], 1.0, 0.0), ([1.0, -1.0], 1.0, 0.0), ([1.0, math.nan], 1.0, 0.0), ([1.0], 0.0, 0.0),
    ([1.0], -5.0, 0.0), ([1.0], 1.0, -1.0), (["1"], 1.0, 0.0)])
def test_checkpoint_bytes_per_rank_rejects_bad_input(per_rank, model, metadata):
    with pytest.raises(ValueError, match="bytes"):
        plots.checkpoint_bytes_per_rank(per_rank, model, metadata_bytes=metadata)


# ----------------------------------------------------------------------------- waste vs interval


def _young(intervals, cost, mtbf):
    return [cost / t + t / (2 * mtbf) for t in intervals]


def test_checkpoint_waste_draws_each_curve_in_percent_and_marks_the_optimum():
    mtbf, cost = 11135.0, 32.8
    intervals = [60.0 * k for k in (1, 2, 5, 10, 20, 50, 100, 200)]
    best = math.sqrt(2 * cost * mtbf)
    fig = plots.checkpoint_waste(intervals, {"large": _young(intervals, cost, mtbf),
                                             "small": _young(intervals, 0.1, mtbf)},
                                 {"large": best}, title="Young")
    ax = fig.axes[0]
    curves = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert len(curves) == 2
    assert list(curves[0].get_xdata()) == pytest.approx([t / 60 for t in intervals])       # minutes
    assert list(curves[0].get_ydata()) == pytest.approx([100 * w for w in _young(intervals, cost, mtbf)])
    optimum_lines = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(optimum_lines) == 1 and optimum_lines[0].get_xdata()[0] == pytest.approx(best / 60)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "checkpoint interval T (minutes)"
    assert ax.get_ylabel() == "time wasted (% of wall time)"
    labels = legend_texts(fig)
    assert "large" in labels and "small" in labels
    assert any(f"T* = {best / 60:.3g} min: waste" in label for label in labels)
    (dot_x, dot_y), = ax.collections[0].get_offsets()          # on the curve (log-log interpolation)
    assert dot_x == pytest.approx(best / 60) and dot_y == pytest.approx(100 * math.sqrt(2 * cost / mtbf), rel=0.1)
    assert ax.get_title() == "Young"


def test_checkpoint_waste_cuts_the_axis_at_100_percent():
    intervals = [1.0, 10.0, 100.0]
    fig = plots.checkpoint_waste(intervals, {"c": _young(intervals, 30.0, 1e4)})
    assert fig.axes[0].get_ylim()[1] == pytest.approx(100.0)


@pytest.mark.parametrize("intervals, waste, optima, match", [
    ([60.0], {"a": [0.1]}, None, "two checkpoint intervals"),
    ([60.0, -1.0], {"a": [0.1, 0.1]}, None, "positive"),
    ([120.0, 60.0], {"a": [0.1, 0.1]}, None, "ascending"),
    ([60.0, 120.0], {}, None, "waste curves"),
    ([60.0, 120.0], {"a": [0.1]}, None, "1 values for 2 intervals"),
    ([60.0, 120.0], {"a": [0.1, 0.0]}, None, "fractions"),
    ([60.0, 120.0], {"a": [0.1, 0.1]}, {"b": 90.0}, "not drawn"),
    ([60.0, 120.0], {"a": [0.1, 0.1]}, {"a": 500.0}, "within the intervals"),
])
def test_checkpoint_waste_rejects_bad_input(intervals, waste, optima, match):
    with pytest.raises(ValueError, match=match):
        plots.checkpoint_waste(intervals, waste, optima)
