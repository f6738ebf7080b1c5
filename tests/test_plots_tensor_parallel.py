"""labutils.plots.tensor_parallel draws chapter 8's numbers: check the data, labels and units."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from figure_text import bar_heights, texts  # noqa: E402


def test_tp_sharding_one_block_per_rank_in_each_layout():
    fig = plots.tp_sharding(4)
    column, row = fig.axes
    column_blocks = [p for p in column.patches if isinstance(p, Rectangle)]
    row_blocks = [p for p in row.patches if isinstance(p, Rectangle)]
    assert [round(p.get_height(), 6) for p in column_blocks] == [0.25] * 4        # bands of output rows
    assert [round(p.get_width(), 6) for p in row_blocks] == [0.25] * 4            # bands of input columns
    assert sum("rank 3" == t for t in texts(fig)) == 2
    assert column.get_ylabel().startswith("out features") and row.get_xlabel().startswith("in features")
    assert "t = 4" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="tp_size"):
        plots.tp_sharding(0)


def test_allreduce_counts_draws_measured_and_model_pairs():
    fig = plots.allreduce_counts(["MLP", "block"], [(1, 1), (2, 2)], [(1, 1), (2, 2)], world_size=2)
    ax = fig.axes[0]
    assert bar_heights(ax) == [1, 2, 1, 2, 1, 2, 1, 2]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "forward, measured", "forward, f/g model", "backward, measured", "backward, f/g model"]
    assert "count" in ax.get_ylabel() and "2 ranks" in ax.get_title()
    with pytest.raises(ValueError, match="one \\(forward, backward\\) pair per label"):
        plots.allreduce_counts(["MLP"], [(1, 1), (2, 2)], [(1, 1)], world_size=2)
    with pytest.raises(ValueError, match=">= 0"):
        plots.allreduce_counts(["MLP"], [(1, -1)], [(1, 1)], world_size=2)


def test_collective_time_fit_in_microseconds():
    fig = plots.collective_time_fit([4096, 65536, 2**20], [1e-4, 2e-4, 1e-3], [1.1e-4, 2.1e-4, 0.9e-3],
                                    title="all_reduce on 2 ranks")
    ax = fig.axes[0]
    measured, model = ax.get_lines()
    assert list(measured.get_ydata()) == pytest.approx([100, 200, 1000])
    assert list(model.get_ydata()) == pytest.approx([110, 210, 900])
    assert "microseconds" in ax.get_ylabel() and "bytes" in ax.get_xlabel()
    assert "1 MiB" in [t.get_text() for t in ax.get_xticklabels()]
    fig.canvas.draw()
    minor = [t.get_text() for t in ax.yaxis.get_ticklabels(minor=True) if t.get_text()]
    assert minor and {label[0] for label in minor} <= {"2", "5"}              # no crowded 300, 400, ...
    wide = plots.collective_time_fit([1, 2], [1e-6, 1e-2], [1e-6, 1e-2], title="four decades")
    wide.canvas.draw()
    assert not [t.get_text() for t in wide.axes[0].yaxis.get_ticklabels(minor=True) if t.get_text()]
    with pytest.raises(ValueError, match="> 0"):
        plots.collective_time_fit([0, 1], [1, 1], [1, 1], title="x")
    with pytest.raises(ValueError, match="one entry per size"):
        plots.collective_time_fit([1, 2], [1, 1], [1], title="x")


def test_tp_layer_times_stacks_ms_and_stars_beyond_the_domain():
    fig = plots.tp_layer_times([2, 4, 8, 16], {"NVLink": ([4e-3, 2e-3, 1e-3, 5e-4], [1e-3] * 4),
                                               "InfiniBand": ([4e-3, 2e-3, 1e-3, 5e-4], [9e-3] * 4)},
                               domain_size=8, title="one layer")
    nvlink, infiniband = fig.axes
    assert bar_heights(nvlink) == pytest.approx([4, 2, 1, 0.5, 1, 1, 1, 1])
    assert [t.get_text() for t in nvlink.get_xticklabels()] == ["t=2", "t=4", "t=8", "t=16*"]
    assert "20%" in texts(nvlink) and "95%" in texts(infiniband)          # 1 / (4 + 1), 9 / (0.5 + 9)
    assert "ms per layer" in nvlink.get_ylabel()
    assert "t > 8 does not fit" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="one compute and one communication time per degree"):
        plots.tp_layer_times([2, 4], {"NVLink": ([1.0], [1.0, 2.0])}, domain_size=8, title="x")


def test_activation_memory_vs_tp_in_gb():
    fig = plots.activation_memory_vs_tp([1, 2, 4], [4e9, 3e9, 2.5e9], [4e9, 2e9, 1e9], title="one layer")
    ax = fig.axes[0]
    tp_line, sp_line = ax.get_lines()
    assert list(tp_line.get_ydata()) == pytest.approx([4, 3, 2.5])
    assert list(sp_line.get_ydata()) == pytest.approx([4, 2, 1])
    assert "GB = 1e9 B" in ax.get_ylabel()
    with pytest.raises(ValueError, match="per degree"):
        plots.activation_memory_vs_tp([1, 2], [1.0], [1.0, 2.0], title="x")


def test_step_time_parts_stacks_and_totals():
    fig = plots.step_time_parts(["TP8 x PP2", "TP8 x DP2"],
                                {"compute": [1.0, 1.0], "TP all-reduces": [0.5, 0.5], "DP": [0.0, 0.25]},
                                title="16 GPUs")
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([1, 1, 0.5, 0.5, 0, 0.25])
    assert "1.5 s" in texts(fig) and "1.75 s" in texts(fig)
    assert "seconds per step" in ax.get_ylabel()
    with pytest.raises(ValueError, match="one value"):
        plots.step_time_parts(["a", "b"], {"compute": [1.0]}, title="x")
    with pytest.raises(ValueError, match=">= 0"):
        plots.step_time_parts(["a"], {"compute": [-1.0]}, title="x")
