"""labutils.plots.strategy draws chapter 10's numbers: check the data, labels and bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_expert_load_bars_capacities_and_drops():
    fig = plots.expert_load([400, 300, 200, 124], [(1.0, 256, 188), (1.25, 320, 80)], title="T = 512")
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches if isinstance(p, Rectangle)] == [400, 300, 200, 124]
    even, low, high = ax.get_lines()
    assert even.get_ydata()[0] == pytest.approx(256)                # T k / E = 1024 / 4
    assert low.get_ydata()[0] == 256 and high.get_ydata()[0] == 320
    labels = legend_texts(ax)
    assert "capacity, factor 1.25: C = 320, drops 80 (7.8%)" in labels
    assert "count" in ax.get_ylabel()
    with pytest.raises(ValueError, match="triples"):
        plots.expert_load([1, 2], [], title="x")
    with pytest.raises(ValueError, match="out of range"):
        plots.expert_load([1, 2], [(1.0, 2, 5)], title="x")


def test_aux_loss_vs_skew_two_axes():
    fig = plots.aux_loss_vs_skew([0, 1, 2], [0.01, 0.012, 0.02], [0.0, 0.05, 0.3], coefficient=0.01, capacity_factor=1.25)
    left, right = fig.axes
    assert list(left.get_lines()[0].get_ydata()) == [0.01, 0.012, 0.02]
    assert list(right.get_lines()[0].get_ydata()) == pytest.approx([0, 5, 30])
    assert "(%)" in right.get_ylabel()
    assert any("λ = 0.01" in t for t in legend_texts(left))
    with pytest.raises(ValueError, match="between 0 and 1"):
        plots.aux_loss_vs_skew([0, 1], [0.01, 0.02], [0, 30], coefficient=0.01, capacity_factor=1.25)


def test_all_to_all_matrix_numbers_every_cell():
    fig = plots.all_to_all_matrix([[10, 3], [4, 9]])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["10", "3", "4", "9"]
    assert ax.get_images()[0].get_array().tolist() == [[10, 3], [4, 9]]
    assert ax.get_xlabel().startswith("to") and ax.get_ylabel().startswith("from")
    with pytest.raises(ValueError, match="square"):
        plots.all_to_all_matrix([[1, 2, 3], [4, 5, 6]])


def test_parallel_layout_colours_stages_and_hatches_replicas():
    tp, dp = 2, 2                                                       # and pp = 2: 8 GPUs
    coordinates = [(r % tp, (r // tp) % dp, r // (tp * dp)) for r in range(8)]
    fig = plots.parallel_layout(coordinates, gpus_per_node=4)
    ax = fig.axes[0]
    blocks = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(blocks) == 8
    assert [bool(b.get_hatch()) for b in blocks] == [False, False, True, True] * 2
    assert blocks[0].get_facecolor() != blocks[4].get_facecolor()         # stage 0 vs stage 1
    assert [t.get_text() for t in ax.texts] == [str(r) for r in range(8)]
    assert "TP 2 x DP 2 x PP 2 = 8 GPUs" in ax.get_title()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["stage 0", "stage 1", "odd DP replica"]
    with pytest.raises(ValueError, match="whole nodes"):
        plots.parallel_layout(coordinates, gpus_per_node=3)
    with pytest.raises(ValueError, match="distinct"):
        plots.parallel_layout([(0, 0, 0)] * 4, gpus_per_node=4)


def test_scaling_against_model_marks_the_model():
    fig = plots.scaling_against_model([1, 2], [100.0, 150.0], {"model: t_1/N + t_ar": 0.9})
    efficiency = fig.axes[1]
    bars = [p.get_height() for p in efficiency.patches if isinstance(p, Rectangle)]
    assert bars == pytest.approx([100, 75])
    marker = efficiency.get_lines()[-1]
    assert list(marker.get_ydata()) == pytest.approx([90]) and marker.get_label() == "model: t_1/N + t_ar"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["model: t_1/N + t_ar"]
    with pytest.raises(ValueError, match="one to three"):
        plots.scaling_against_model([1, 2], [100.0, 150.0], {})
