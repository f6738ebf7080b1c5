"""Chapter 6's figures (labutils.plots.data_parallel and two of labutils.plots.communication):
check what is drawn (data, labels, units) and that bad input is refused with a clear error."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import costmodel, plots  # noqa: E402
from labutils.measure import collectives_bench
from figure_text import bar_widths, legend_texts, texts  # noqa: E402


# ----------------------------------------------------------------------------- sampler


def test_sampler_orders_draws_one_box_per_index_and_outlines_padding():
    # 2 ranks, 2 epochs of 3 indices over a dataset of 5: index 0 is repeated on rank 1 to pad.
    with_epoch = [[[4, 2, 0], [1, 3, 4]], [[1, 3, 0], [0, 2, 1]]]
    without = [[[4, 2, 0], [4, 2, 0]], [[1, 3, 4], [1, 3, 4]]]
    fig = plots.sampler_orders({"with set_epoch": with_epoch, "without": without})
    left, right = fig.axes
    boxes = [p for p in left.patches if isinstance(p, Rectangle)]
    assert len(boxes) == 2 * 2 * 3
    outlined = [box for box in boxes if box.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert len(outlined) == 2  # epoch 0: rank 1's 0; epoch 1: rank 1's 1 (rank 0 had 1 first)
    labels = [tick.get_text() for tick in left.get_yticklabels()]
    assert labels == ["epoch 0, rank 0", "epoch 0, rank 1", "epoch 1, rank 0", "epoch 1, rank 1"]
    assert {"with set_epoch", "without"} <= set(texts(fig))
    assert [t.get_text() for t in right.texts[:3]] == ["4", "2", "0"]
    assert any("red outline = repeated to pad" in text for text in texts(fig))


@pytest.mark.parametrize("panels", [{}, {"a": []}, {"a": [[[1]], [[2]]], "b": [[[1]]]}])
def test_sampler_orders_rejects_bad_input(panels):
    with pytest.raises(ValueError, match="orders"):
        plots.sampler_orders(panels)


# ----------------------------------------------------------------------------- DDP vs one process


def test_loss_agreement_curves_and_difference():
    reference, ddp = [1.0, 0.5, 0.25], [1.0, 0.5 + 6e-8, 0.25]
    fig = plots.loss_agreement(reference, ddp, reference_label="one process", ddp_label="DDP")
    left, right = fig.axes
    assert list(left.get_lines()[0].get_ydata()) == reference
    assert list(left.get_lines()[1].get_ydata()) == ddp
    difference = right.get_lines()[0].get_ydata()
    assert difference[0] == 1e-12 and difference[1] == pytest.approx(6e-8)
    assert right.get_yscale() == "log"
    assert right.get_lines()[1].get_ydata()[0] == pytest.approx(2.0**-23)
    assert "float32 machine epsilon (1.2e-07)" in legend_texts(fig)
    assert {"one process", "DDP"} <= set(legend_texts(fig))


def test_loss_agreement_rejects_bad_input():
    with pytest.raises(ValueError, match="same non-zero length"):
        plots.loss_agreement([1.0], [1.0, 2.0], reference_label="a", ddp_label="b")
    with pytest.raises(ValueError, match="epsilon"):
        plots.loss_agreement([1.0], [1.0], reference_label="a", ddp_label="b", epsilon=0)


# ----------------------------------------------------------------------------- buckets


def test_bucket_counts_measured_against_model():
    caps = [0.25, 0.5, 25]
    fig = plots.bucket_counts(caps, [16, 8, 1], [16, 9, 1], grad_bytes=4.02 * 2**20)
    ax = fig.axes[0]
    ceil_line, measured_line, model_line = ax.get_lines()
    assert list(ceil_line.get_ydata()) == [17, 9, 1]  # ceil(4.02 MiB / cap), computed by the plot
    assert list(model_line.get_ydata()) == [16, 9, 1] and list(measured_line.get_ydata()) == [16, 8, 1]
    assert ax.get_xscale() == "log"
    assert "MiB" in ax.get_xlabel() and ax.get_title() == "Buckets for 4.02 MiB of gradients"
    with pytest.raises(ValueError, match="one measured and one modelled"):
        plots.bucket_counts(caps, [1], [1, 2, 3], 1.0)
    with pytest.raises(ValueError, match="positive MiB"):
        plots.bucket_counts([0, 1], [1, 1], [1, 1], 1.0)


def test_bucket_timeline_bars_in_milliseconds():
    buckets = [{"bytes": 2**19, "ready": 0.002, "done": 0.006},
               {"bytes": 2**20, "ready": 0.010, "done": 0.013}]
    fig = plots.bucket_timeline(buckets, compute_only_s=0.020, ddp_backward_s=0.025, cap_mib=0.5)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert [round(bar.get_width(), 9) for bar in bars] == [20.0, 25.0, 4.0, 3.0]
    assert [round(bar.get_x(), 9) for bar in bars[2:]] == [2.0, 10.0]
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels == ["backward", "DDP backward", "bucket 0 (0.50 MiB)", "bucket 1 (1.00 MiB)"]
    assert ax.get_xlabel() == "milliseconds since the start of backward"
    assert "bucket_cap_mb = 0.5" in ax.get_title()
    assert len(legend_texts(fig)) == 3


def test_bucket_timeline_rejects_bad_input():
    with pytest.raises(ValueError, match="no buckets"):
        plots.bucket_timeline([], 1.0, 1.0, 1)
    with pytest.raises(ValueError, match="ready <= done"):
        plots.bucket_timeline([{"bytes": 1, "ready": 0.5, "done": 0.1}], 1.0, 1.0, 1)
    with pytest.raises(ValueError, match="positive seconds"):
        plots.bucket_timeline([{"bytes": 1, "ready": 0.0, "done": 0.1}], 0.0, 1.0, 1)


# ----------------------------------------------------------------------------- step model


def test_step_time_breakdown():
    fig = plots.step_time_breakdown(1.5, 0.054, 0.0, title="efficiency 100.0%")
    ax = fig.axes[0]
    assert bar_widths(ax) == pytest.approx([1500.0, 54.0, 0.0])
    assert ax.get_xlabel() == "milliseconds per training step"
    assert {" 1,500 ms", " 54 ms", " 0 ms"} <= set(texts(fig))
    with pytest.raises(ValueError, match="exceed"):
        plots.step_time_breakdown(1.0, 0.1, 0.2, title="")
    with pytest.raises(ValueError, match="non-negative"):
        plots.step_time_breakdown(-1.0, 0.1, 0.0, title="")


def test_scaling_with_model_adds_the_model_in_count_order():
    fig = plots.scaling_with_model([2, 1], [150.0, 100.0], [0.8, 1.0], model_label="model")
    efficiency_axes = fig.axes[1]
    diamonds = efficiency_axes.get_lines()[-1]
    assert list(diamonds.get_ydata()) == [100.0, 80.0]       # sorted by count like the bars
    assert [round(b.get_height(), 6) for b in efficiency_axes.patches] == [100.0, 75.0]
    assert "model" in legend_texts(fig)
    with pytest.raises(ValueError, match="one model efficiency per count"):
        plots.scaling_with_model([1, 2], [1.0, 2.0], [1.0], model_label="m")


# ----------------------------------------------------------------------------- communication


def bench_record(size: int, time_s: float) -> dict:
    algbw, busbw = collectives_bench.bandwidths("all_reduce", size, time_s, 2)
    record = {"op": "all_reduce", "world_size": 2, "backend": "gloo", "device": "cpu", "size": size,
              "count": size // 4, "type": "float", "redop": "sum", "root": -1,
              "oop_time_us": None, "oop_algbw": None, "oop_busbw": None, "oop_wrong": None}
    record.update({"ip_time_us": time_s * 1e6, "ip_algbw": algbw, "ip_busbw": busbw, "ip_wrong": 0})
    return record


def test_busbw_with_model_adds_the_fitted_line_to_one_legend():
    sizes = [4096 * 4**k for k in range(4)]
    records = [bench_record(size, 1e-3 + size / 1e9) for size in sizes]
    fit = costmodel.fit_alpha_beta(sizes, [1e-3 + size / 1e9 for size in sizes], world_size=2)
    model = [collectives_bench.bandwidths("all_reduce", s, fit.predict(s), 2)[1] for s in sizes]
    fig = plots.busbw_with_model(records, sizes, model, model_label="model, fitted")
    line = fig.axes[0].get_lines()[-1]
    assert list(line.get_xdata()) == sizes and list(line.get_ydata()) == pytest.approx(model)
    assert len(fig.legends) == 1 and legend_texts(fig)[-1] == "model, fitted"
    assert "GB/s" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="one model busbw"):
        plots.busbw_with_model(records, sizes, model[:1], model_label="m")


def test_allreduce_time_comparison_groups_and_labels():
    fig = plots.allreduce_time_comparison(["1B", "7B"], {"claimed": [4e-3, 31e-3], "model": [7.8e-3, 4.9]},
                                          ylabel="ms per step", title="T")
    ax = fig.axes[0]
    heights = [round(patch.get_height(), 9) for patch in ax.patches]
    assert heights == [4.0, 31.0, 7.8, 4900.0]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "ms per step"
    assert {"4", "31", "7.8", "4,900"} <= set(texts(fig))
    assert legend_texts(fig) == ["claimed", "model"]
    with pytest.raises(ValueError, match="one time per group"):
        plots.allreduce_time_comparison(["1B"], {"a": [1.0, 2.0]}, ylabel="", title="")
    with pytest.raises(ValueError, match="positive seconds"):
        plots.allreduce_time_comparison(["1B"], {"a": [0.0]}, ylabel="", title="")
