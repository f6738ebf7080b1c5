"""labutils.plots draws what the models and benchmarks compute: check what each figure shows."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import costmodel, plots  # noqa: E402
from labutils.costmodel import schedules
from labutils.measure import collectives_bench
from labutils.costmodel import roofline as rl  # noqa: E402
from figure_text import legend_texts, texts  # noqa: E402


def bench_record(op: str, size: int, time_s: float, world_size: int = 2, in_place_only: bool = False) -> dict:
    """One record in collectives_bench's layout, bandwidths by its own nccl-tests definitions."""
    algbw, busbw = collectives_bench.bandwidths(op, size, time_s, world_size)
    record = {"op": op, "world_size": world_size, "backend": "gloo", "device": "cpu", "size": size,
              "count": size // 4, "type": "float", "redop": "sum", "root": -1}
    for mode in ("oop", "ip"):
        measured = mode == "ip" or not in_place_only
        record.update({f"{mode}_time_us": time_s * 1e6 if measured else None,
                       f"{mode}_algbw": algbw if measured else None,
                       f"{mode}_busbw": busbw if measured else None,
                       f"{mode}_wrong": 0 if measured else None})
    return record


@pytest.mark.parametrize("num_bytes, text", [(8, "8 B"), (1023, "1023 B"), (1024, "1 KiB"),
                                             (1536, "1.5 KiB"), (2**20, "1 MiB"), (2**30, "1 GiB")])
def test_format_bytes_binary(num_bytes, text):
    assert plots.format_bytes_binary(num_bytes) == text


# ----------------------------------------------------------------------------- bandwidth


def test_bandwidth_vs_size_series_units_and_link_line():
    sizes = [8 * 4**k for k in range(10)]  # 8 B .. 2 MiB
    records = ([bench_record("all_reduce", s, 1e-5 + s / 2e9, in_place_only=True) for s in sizes]
               + [bench_record("all_gather", s, 1e-5 + s / 1e9) for s in sizes])
    fig = plots.bandwidth_vs_size(records, link_peak_GBps=450, link_label="H100 NVLink4")

    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = legend_texts(fig)
    assert labels == ["all_reduce (in-place): busbw", "all_reduce (in-place): algbw",
                      "all_gather (out-of-place): busbw", "all_gather (out-of-place): algbw",
                      "H100 NVLink4 peak, per direction: 450 GB/s"]
    busbw_line = ax.get_lines()[2]
    assert list(busbw_line.get_xdata()) == sizes
    assert list(busbw_line.get_ydata()) == [r["oop_busbw"] for r in records[len(sizes):]]
    assert ax.get_lines()[-1].get_ydata()[0] == 450
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert "8 B" in ticks and "2 MiB" in ticks
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()
    assert "2 ranks" in ax.get_title()


def test_bandwidth_vs_size_separates_statistics_over_iterations():
    sizes = [8 * 4**k for k in range(4)]
    mean = [dict(bench_record("all_reduce", s, 2e-5 + s / 2e9, in_place_only=True), stat="mean") for s in sizes]
    median = [dict(bench_record("all_reduce", s, 1e-5 + s / 2e9, in_place_only=True), stat="median") for s in sizes]
    fig = plots.bandwidth_vs_size(mean + median)
    assert legend_texts(fig)[::2] == ["all_reduce, mean time (in-place): busbw",
                                      "all_reduce, median time (in-place): busbw"]
    one_stat = plots.bandwidth_vs_size(median)
    assert "median time" in one_stat.axes[0].get_title()
    without_stat = plots.bandwidth_vs_size([bench_record("all_gather", s, 1e-5) for s in sizes])
    assert "None" not in without_stat.axes[0].get_title()


def test_bandwidth_vs_size_rejects_bad_input():
    with pytest.raises(ValueError, match="no benchmark records"):
        plots.bandwidth_vs_size([])
    only_in_place = [bench_record("all_reduce", 1024, 1e-4, in_place_only=True)]
    with pytest.raises(ValueError, match="mode='ip'"):
        plots.bandwidth_vs_size(only_in_place, mode="oop")
    with pytest.raises(ValueError, match="records lack"):
        plots.bandwidth_vs_size([{"size": 8, "busbw": 1.0}])
    with pytest.raises(ValueError, match="link_peak_GBps"):
        plots.bandwidth_vs_size(only_in_place, link_peak_GBps=-1)


# ----------------------------------------------------------------------------- roofline


def test_roofline_marks_ridge_and_places_points():
    h100 = rl.DEVICES["h100"]
    gemm = rl.gemm(8192, 8192, 8192, "bf16")
    fig = plots.roofline(h100, "bfloat16", [gemm, rl.elementwise(2**20), ("matmul measured", gemm.intensity, 798e12)])

    ax = fig.axes[0]
    labels = legend_texts(fig)
    assert len(labels) == 2 + 3
    assert labels[1] == f"ridge point: {rl.ridge_point(h100, 'bf16'):.3g} FLOP/B" == "ridge point: 295 FLOP/B"
    assert "compute-bound" in labels[2] and "memory-bound" in labels[3]
    assert "measured 81% of the roof" in labels[4]
    ridge_line, measured_line = ax.get_lines()[1], ax.get_lines()[-1]
    assert ridge_line.get_ydata()[0] == pytest.approx(989)  # TFLOP/s
    assert measured_line.get_ydata()[0] == pytest.approx(798)
    assert "TFLOP/s" in ax.get_ylabel() and "FLOP/byte" in ax.get_xlabel()
    assert "H100" in ax.get_title()


def test_roofline_rejects_missing_dtype_and_bad_points():
    with pytest.raises(ValueError, match="no bf16 peak"):
        plots.roofline(rl.DEVICES["v100"], "bf16")
    with pytest.raises(ValueError, match="a roofline point is"):
        plots.roofline(rl.DEVICES["h100"], "bf16", [("two", 1.0)])
    with pytest.raises(ValueError, match="intensity_range"):
        plots.roofline(rl.DEVICES["h100"], "bf16", intensity_range=(10, 1))


# ----------------------------------------------------------------------------- pipelines


def test_pipeline_gantt_title_boxes_and_labels():
    timeline = schedules.simulate(schedules.build_schedule("1f1b", 4, 16))
    fig = plots.pipeline_gantt(timeline)

    ax = fig.axes[0]
    title = ax.get_title()
    assert "1f1b" in title and "p = 4" in title and "m = 16" in title
    assert f"{timeline.bubble_fraction():.1%}" == "15.8%"
    assert "measured on this timeline: 15.8%" in title
    assert "15.8% of total time = 18.8% of the ideal" in title
    rectangles = [patch for patch in ax.patches if isinstance(patch, Rectangle)]
    assert len(rectangles) == 4 + len(timeline.events)  # one idle background per stage + one box per event
    numbers = [text.get_text() for text in ax.texts]
    assert sorted(numbers, key=int) == sorted((str(e.microbatch) for e in timeline.events), key=int)
    assert legend_texts(fig) == ["forward", "backward", "idle (bubble)"]
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "stage 0\n(rank 0)"


def test_pipeline_gantt_follows_the_timeline():
    small = plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("gpipe", 4, 4)))
    large = plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("gpipe", 4, 12)))
    assert "42.9%" in small.axes[0].get_title()  # 3/7
    assert "20.0%" in large.axes[0].get_title()  # 3/15
    assert "p = 4 stages, m = 12 microbatches" in large.axes[0].get_title()
    one = plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("gpipe", 4, 1)))
    assert "p = 4 stages, m = 1 microbatch\n" in one.axes[0].get_title()
    interleaved = plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("interleaved_1f1b", 2, 4, 2)))
    assert "v = 2 chunks per rank" in interleaved.axes[0].get_title()
    assert "forward, chunk 1" in legend_texts(interleaved)


def test_pipeline_gantt_without_schedule_name_has_no_formula():
    actions = schedules.build_schedule("gpipe", 2, 2)
    timeline = schedules.simulate([list(rank) for rank in actions])  # a plain list: no name
    title = plots.pipeline_gantt(timeline).axes[0].get_title()
    assert title.startswith("pipeline:") and "formula" not in title


# ----------------------------------------------------------------------------- ZeRO


def test_zero_memory_bars_values_capacity_and_selection():
    table = costmodel.zero_memory_table(7.5e9, 64)
    fig = plots.zero_memory_bars(table, 80e9, "H100 SXM", highlight_stage=2)

    ax = fig.axes[0]
    for total in ("120 GB", "31.4 GB", "16.6 GB", "1.88 GB"):
        assert total in texts(fig)
    assert len(ax.patches) >= 3 * 4  # three stacked parts per stage
    optimizer_bars = ax.containers[2]
    assert [bar.get_height() for bar in optimizer_bars] == pytest.approx([90, 90 / 64, 90 / 64, 90 / 64])
    assert "H100 SXM memory: 80 GB" in legend_texts(fig)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[2].endswith("(selected)") and not ticks[1].endswith("(selected)")
    assert "GB" in ax.get_ylabel()


def test_zero_memory_bars_switch_to_mb_for_a_toy_model():
    fig = plots.zero_memory_bars(costmodel.zero_memory_table(1e6, 4))  # 16 MB of model states in DDP
    assert "16 MB" in texts(fig) and "MB = 1e6 bytes" in fig.axes[0].get_ylabel()
    with_gpu = plots.zero_memory_bars(costmodel.zero_memory_table(1e6, 4), 80e9, "H100 SXM")
    assert "GB = 1e9 bytes" in with_gpu.axes[0].get_ylabel()  # the GPU line sets the scale


def test_zero_memory_bars_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        plots.zero_memory_bars([])
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        plots.zero_memory_bars(costmodel.zero_memory_table(1e9, 8), gpu_memory_bytes=0)


# ----------------------------------------------------------------------------- communication volume


def test_comm_volume_bars_heights_calls_and_formulas():
    gpt3 = dict(layers=96, hidden=12288, seq_len=2048, micro_batch_size=1)
    volumes = [costmodel.comm_volume("dp", params=175e9, dp_size=64),
               costmodel.comm_volume("tp", tp_size=8, **gpt3)]
    fig = plots.comm_volume_bars(volumes)

    ax = fig.axes[0]
    assert [bar.get_height() for bar in ax.containers[0]] == pytest.approx([v.bytes_per_step / 1e9 for v in volumes])
    annotations = [text.get_text() for text in ax.texts]
    assert annotations[0].endswith("1 call") and annotations[1].endswith("384 calls")
    assert ax.get_yscale() == "linear"  # DP sends about 20 times what TP sends
    assert all(volume.formula in "\n".join(texts(fig)) for volume in volumes)
    with_pp = plots.comm_volume_bars(volumes + [costmodel.comm_volume("pp", pp_size=8, num_microbatches=32, **gpt3)])
    assert with_pp.axes[0].get_yscale() == "log"  # DP sends more than 50 times what PP sends
    with pytest.raises(ValueError, match="no volumes"):
        plots.comm_volume_bars([])


def test_comm_volume_bars_ticks_name_the_strategy_and_labels_override():
    gpt3 = dict(layers=96, hidden=12288, seq_len=2048, micro_batch_size=1)
    volumes = [costmodel.comm_volume("dp", params=175e9, dp_size=64),
               costmodel.comm_volume("tp", tp_size=8, **gpt3)]
    fig = plots.comm_volume_bars(volumes)
    ticks = [tick.get_text() for tick in fig.axes[0].get_xticklabels()]
    assert ticks == ["DP", "TP"]
    notes = "\n".join(text.get_text() for text in fig.axes[1].texts)
    assert f"DP: {volumes[0].formula}" in notes and f"TP: {volumes[1].formula}" in notes

    tp_sp = costmodel.comm_volume("tp", tp_size=8, sequence_parallel=True, **gpt3)
    twice = plots.comm_volume_bars([volumes[1], tp_sp])
    assert [t.get_text() for t in twice.axes[0].get_xticklabels()] == [
        "TP\n(all_reduce)", "TP\n(reduce_scatter + all_gather)"]

    custom = plots.comm_volume_bars(volumes, labels=["data parallel", "tensor parallel"])
    assert [t.get_text() for t in custom.axes[0].get_xticklabels()] == ["data parallel", "tensor parallel"]
    assert "tensor parallel: " in "\n".join(text.get_text() for text in custom.axes[1].texts)
    with pytest.raises(ValueError, match="one label per volume"):
        plots.comm_volume_bars(volumes, labels=["only one"])


# ----------------------------------------------------------------------------- scaling


def test_scaling_efficiency_against_ideal():
    fig = plots.scaling_efficiency([4, 1, 2], [350, 100, 190], throughput_unit="tokens/s")
    left, right = fig.axes
    ideal, measured = left.get_lines()
    assert list(ideal.get_ydata()) == [100, 200, 400]
    assert list(measured.get_ydata()) == [100, 190, 350]
    assert [bar.get_height() for bar in right.containers[0]] == pytest.approx([100, 95, 87.5])
    assert [text.get_text() for text in right.texts] == ["100%", "95%", "88%", "linear scaling = 100%"]
    assert "tokens/s" in left.get_ylabel()
    with pytest.raises(ValueError, match="at least two"):
        plots.scaling_efficiency([1], [100])
    with pytest.raises(ValueError, match="positive"):
        plots.scaling_efficiency([1, 2], [100, 0])


def test_scaling_efficiency_axis_names_the_unit():
    default = plots.scaling_efficiency([1, 2], [100, 190])
    assert [ax.get_xlabel() for ax in default.axes] == ["number of GPUs"] * 2
    assert "ideal: linear from 1 GPU" in legend_texts_of_axes(default)
    ranks = plots.scaling_efficiency([1, 4], [100, 300], unit="ranks")
    assert [ax.get_xlabel() for ax in ranks.axes] == ["number of ranks"] * 2
    assert "ideal: linear from 1 rank" in legend_texts_of_axes(ranks)
    assert "GPU" not in "\n".join(texts(ranks))
    with pytest.raises(ValueError, match="unit must name"):
        plots.scaling_efficiency([1, 2], [100, 190], unit="")


def legend_texts_of_axes(fig: Figure) -> list[str]:
    return [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]


def test_figures_show_themselves_as_png_in_a_notebook():
    """Without pyplot the inline backend ignores a Figure: _repr_png_ is what a kernel shows."""
    figures = [plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("naive", 2, 2))),
               plots.zero_memory_bars(costmodel.zero_memory_table(1e9, 8)),
               plots.roofline(rl.DEVICES["a100"], "bf16")]
    for fig in figures:
        assert isinstance(fig, Figure)
        assert fig._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")
