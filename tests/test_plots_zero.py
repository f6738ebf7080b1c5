"""Chapter 7's figures (labutils.plots.memory and labutils.plots.communication.zero_comm_measured):
check what is drawn (data, labels, units) and that bad input is refused with a clear error."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import costmodel, plots  # noqa: E402
from figure_text import legend_texts, texts  # noqa: E402


def test_bytes_per_parameter_bars_stack_the_three_parts():
    num_params = 1000
    model = vars(costmodel.zero_memory(num_params, 1, 0))                     # 2 + 2 + 12 bytes
    measured = {"params": 4000, "grads": 4000, "optimizer_states": 8000}     # 4 + 4 + 8 bytes
    fig = plots.bytes_per_parameter_bars([("model", model), ("measured", measured)], num_params, title="state")
    ax = fig.axes[0]
    heights = [round(p.get_height(), 9) for p in ax.patches if isinstance(p, Rectangle)]
    assert heights == [2, 2, 12, 4, 4, 8]
    assert ax.get_ylabel() == "bytes per parameter"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["model", "measured"]
    assert texts(fig).count("16") == 2                                       # each bar's total
    assert legend_texts(fig) == ["parameters", "gradients", "optimizer states"]
    with pytest.raises(ValueError, match="lacks"):
        plots.bytes_per_parameter_bars([("x", {"params": 1})], 1, title="")
    with pytest.raises(ValueError, match="num_params"):
        plots.bytes_per_parameter_bars([("model", model)], 0, title="")


def test_zero_memory_bars_marks_measured_states_beside_their_stage():
    table = costmodel.zero_memory_table(1e6, 2, optimizer_bytes_per_param=8, param_bytes_per_param=4,
                                        grad_bytes_per_param=4)
    fig = plots.zero_memory_bars(table, measured={0: 16e6, 3: 8e6})
    diamonds = fig.axes[0].get_lines()[0]
    assert list(diamonds.get_xdata()) == pytest.approx([0.36]) and list(diamonds.get_ydata()) == [16.0]
    assert list(fig.axes[0].get_lines()[1].get_ydata()) == [8.0]              # MB: a toy model
    assert "measured (diamond beside its bar)" in legend_texts(fig)
    with pytest.raises(ValueError, match="stages"):
        plots.zero_memory_bars(table, measured={5: 1.0})


def test_optimizer_state_per_rank_bars_and_model_lines():
    fig = plots.optimizer_state_per_rank([2.62e6, 2.25e6], 2.43e6, 4.87e6, title="ZeroRedundancyOptimizer")
    ax = fig.axes[0]
    assert [round(p.get_height(), 9) for p in ax.patches] == [2.62, 2.25]
    assert [line.get_ydata()[0] for line in ax.get_lines()] == pytest.approx([2.43, 4.87])
    assert {"2.62 MB", "2.25 MB"} <= set(texts(fig))
    assert "model, an even share: 2.43 MB" in legend_texts(fig)
    assert "MB = 1e6 bytes" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["rank 0", "rank 1"]
    with pytest.raises(ValueError, match="no ranks"):
        plots.optimizer_state_per_rank([], 1.0, 1.0, title="")
    with pytest.raises(ValueError, match="positive"):
        plots.optimizer_state_per_rank([1.0], 0.0, 1.0, title="")


def test_offload_costs_memory_and_seconds():
    costs = {"PCIe Gen4": 0.825, "Adam on the CPU": 468.0}
    fig = plots.offload_costs({"no offload": 208e9, "offloaded": 26e9}, 182e9, costs,
                              gpu_memory_bytes=80e9, gpu_label="H100 SXM", title="13B")
    memory, seconds = fig.axes
    assert [round(p.get_height(), 9) for p in memory.patches] == [208, 26]
    assert {"208 GB", "26 GB", "+ 182 GB in CPU memory"} <= set(texts(fig))
    assert memory.get_lines()[0].get_ydata()[0] == 80 and "H100 SXM: 80 GB" in legend_texts(fig)
    assert [round(p.get_width(), 9) for p in seconds.patches] == [0.825, 468.0]
    assert seconds.get_xscale() == "log" and "seconds" in seconds.get_xlabel()
    assert "GB = 1e9 bytes" in memory.get_ylabel()
    with pytest.raises(ValueError, match="positive seconds"):
        plots.offload_costs({"a": 1.0}, 0.0, {"b": 0.0}, gpu_memory_bytes=1.0, gpu_label="", title="")
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        plots.offload_costs({"a": 1.0}, 0.0, {"b": 1.0}, gpu_memory_bytes=0.0, gpu_label="", title="")


def test_zero_comm_measured_in_units_of_parameter_bytes():
    parameter_bytes = 4e6
    fig = plots.zero_comm_measured(["DDP", "stage 3"], [4e6, 6e6], [4e6, 6e6], parameter_bytes, world_size=2,
                                   extra_model=(0, 8e6, "PyTorch's stage 1"))
    ax = fig.axes[0]
    assert [round(p.get_height(), 9) for p in ax.patches] == [1.0, 1.5, 1.0, 1.5]
    assert ax.get_lines()[0].get_ydata()[0] == 2.0
    assert {"1.00", "1.50"} <= set(texts(fig))
    assert "PyTorch's stage 1" in legend_texts(fig)
    assert "d = 2" in ax.get_title() and "parameter bytes" in ax.get_ylabel()
    with pytest.raises(ValueError, match="one modelled and one measured"):
        plots.zero_comm_measured(["a"], [1.0, 2.0], [1.0], 1.0, world_size=2)
    with pytest.raises(ValueError, match="extra_model index"):
        plots.zero_comm_measured(["a"], [1.0], [1.0], 1.0, world_size=2, extra_model=(3, 1.0, "x"))
