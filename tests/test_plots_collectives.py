"""labutils.plots (chapter 5): what each collectives figure draws, its units, and bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.text  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import costmodel, plots  # noqa: E402
from labutils.measure import collectives_bench
from figure_text import legend_texts, texts  # noqa: E402


def two_rank_demo():
    """What chapter 5's run_all_collectives returns on 2 ranks (rank r holds 10(r+1) + k)."""
    return [
        {"broadcast": ([10, 11], [10, 11]), "reduce": ([10, 11], [30, 32]), "all_gather": ([10], [10, 21])},
        {"broadcast": ([20, 21], [10, 11]), "reduce": ([20, 21], None), "all_gather": ([21], [10, 21])},
    ]


def box_colors(ax) -> list[tuple]:
    return [patch.get_facecolor()[:3] for patch in ax.patches if isinstance(patch, Rectangle)]


def test_collective_buffers_colours_boxes_by_owner_and_sums_grey():
    fig = plots.collective_buffers(two_rank_demo())
    broadcast, reduce, all_gather = fig.axes[:3]
    assert broadcast.get_title() == "broadcast: before -> after"
    # boxes per rank: before, then after; rank 1 starts in its own colour and ends with rank 0's data
    colors = box_colors(broadcast)
    assert len(colors) == 8
    assert colors[0] == colors[2] == colors[6] and colors[4] != colors[0]
    grey = matplotlib.colors.to_rgb("#d9d9d9")
    assert box_colors(reduce).count(grey) == 2  # the root's sum; rank 1's result is undefined
    assert "(undefined off the root)" in texts(fig)
    assert [t for t in texts(all_gather) if t.replace(".", "").isdigit()] == ["10", "10", "21", "21", "10", "21"]
    assert not fig.axes[3].axison  # the spare panel stays empty
    assert legend_texts(fig) == ["data from rank 0", "data from rank 1", "a sum over all ranks"]
    assert "2 ranks" in fig._suptitle.get_text()


def test_collective_buffers_bad_input():
    with pytest.raises(ValueError, match="no ranks"):
        plots.collective_buffers([])
    demo = two_rank_demo()
    del demo[1]["reduce"]
    with pytest.raises(ValueError, match="same collectives"):
        plots.collective_buffers(demo)


def test_busbw_factor_curves_draw_the_given_factors():
    ranks = [2, 4, 8, 1024]
    factors = {"all-reduce: 2(n-1)/n": [collectives_bench.bus_bandwidth_factor("all_reduce", n) for n in ranks],
               "all-gather: (n-1)/n": [collectives_bench.bus_bandwidth_factor("all_gather", n) for n in ranks]}
    fig = plots.busbw_factor_curves(ranks, factors, world_size=4)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert list(lines[0].get_ydata()) == [1.0, 1.5, 1.75, 2 * 1023 / 1024]
    assert list(lines[1].get_xdata()) == ranks
    assert ax.get_xscale() == "log" and "ranks n" in ax.get_xlabel() and "/ S" in ax.get_ylabel()
    assert "your WORLD_SIZE = 4" in legend_texts(fig)
    with pytest.raises(ValueError, match="2 factors for 4 rank counts"):
        plots.busbw_factor_curves(ranks, {"x": [1, 2]})


def test_collective_fits_draws_points_and_model():
    sizes = [8 * 4**k for k in range(6)]
    times = [1e-4 + s / 1e9 for s in sizes]
    fit = costmodel.fit_alpha_beta(sizes, times, "all_gather", "ring", world_size=2)
    fig = plots.collective_fits({"all_gather": (sizes, times), "all_to_all": (sizes, times)}, {"all_gather": fit},
                                title="measured and fitted")
    ax = fig.axes[0]
    points, model, only_points = ax.get_lines()
    assert list(points.get_ydata()) == pytest.approx([t * 1e6 for t in times])
    assert model.get_ydata()[0] == pytest.approx(fit.predict(sizes[0]) * 1e6)
    assert legend_texts(fig) == ["all_gather: measured", "all_gather: alpha-beta model", "all_to_all: measured"]
    assert "(us)" in ax.get_ylabel() and "bytes" in ax.get_xlabel() and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="positive"):
        plots.collective_fits({"all_gather": ([0, 8], [1e-5, 2e-5])})


def test_algorithm_times_one_panel_per_scale():
    sizes = [8, 1024, 2**20]
    panels = {f"n = {n}": {a: [costmodel.collective_time("all_reduce", a, s, n, 1e-5, 1e-10) for s in sizes]
                           for a in ("ring", "recursive_doubling")} for n in (2, 64)}
    fig = plots.algorithm_times(sizes, panels, title="models")
    assert [ax.get_title() for ax in fig.axes] == ["n = 2", "n = 64"]
    ring = fig.axes[1].get_lines()[0]
    assert list(ring.get_ydata()) == pytest.approx([t * 1e3 for t in panels["n = 64"]["ring"]])
    assert fig.axes[0].get_ylabel() == "model time (ms)" and "bytes" in fig.axes[0].get_xlabel()
    bad = {"n = 2": {"ring": [0.0, 1.0, 2.0]}}
    with pytest.raises(ValueError, match="positive and finite"):
        plots.algorithm_times(sizes, bad)
    with pytest.raises(ValueError, match="1 to 4 panels"):
        plots.algorithm_times(sizes, {})


def test_time_comparison_bars_heights_in_ms():
    fig = plots.time_comparison_bars(["2 GB", "14 GB"], {"claimed": [4e-3, 31e-3], "least": [7.8e-3, 54e-3]},
                                     ylabel="time (ms)", title="claims")
    ax = fig.axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx([4.0, 31.0, 7.8, 54.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2 GB", "14 GB"]
    assert legend_texts(fig) == ["claimed", "least"] and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="1 times for 2 groups"):
        plots.time_comparison_bars(["a", "b"], {"x": [1.0]}, "s", "t")
