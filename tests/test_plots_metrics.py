"""Chapter 1's figures (labutils.plots.metrics) and the scaling figure's reference markers:
check the data drawn, the labels and units, and the errors on bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.measure import collectives_bench
from labutils.plots.base import CourseFigure  # noqa: E402
from figure_text import texts  # noqa: E402


def bar_heights(ax) -> list[float]:
    return [bar.get_height() for container in ax.containers for bar in container]


def record(op: str, size: int, time_s: float, world_size: int = 2) -> dict:
    """One collectives_bench record, bandwidths by nccl-tests' definitions."""
    algbw, busbw = collectives_bench.bandwidths(op, size, time_s, world_size)
    row = {"op": op, "world_size": world_size, "size": size}
    for mode in ("oop", "ip"):
        row.update({f"{mode}_time_us": time_s * 1e6, f"{mode}_algbw": algbw, f"{mode}_busbw": busbw})
    return row


def test_precision_throughput_draws_tflops_on_log_axes():
    fig = plots.precision_throughput({"float32": 2e11, "bfloat16": 4e11}, {"bf16": 989e12, "fp8": 1979e12},
                                     measured_label="this CPU", datasheet_label="H100 SXM datasheet, dense")
    assert isinstance(fig, CourseFigure)
    left, right = fig.axes
    assert bar_heights(left) == pytest.approx([0.2, 0.4])
    assert bar_heights(right) == pytest.approx([989, 1979])
    assert [tick.get_text() for tick in right.get_xticklabels()] == ["bf16", "fp8"]
    assert left.get_yscale() == right.get_yscale() == "log"
    assert "TFLOP/s" in left.get_ylabel() and "dense" in right.get_ylabel()
    assert left.get_title() == "Measured on this CPU"
    assert "989" in texts(fig) and "0.4" in texts(fig)
    with pytest.raises(ValueError, match="measured FLOP/s"):
        plots.precision_throughput({"float32": 0.0}, {"bf16": 1e12}, measured_label="x", datasheet_label="y")
    with pytest.raises(ValueError, match="no datasheet FLOP/s"):
        plots.precision_throughput({"float32": 1e9}, {}, measured_label="x", datasheet_label="y")


def test_training_time_one_line_per_model_and_a_reference():
    fig = plots.training_time([1, 2, 4], {"7B": [40.0, 20.0, 10.0], "70B": [400.0, 200.0, 100.0]})
    ax = fig.axes[0]
    seven, seventy, month = ax.get_lines()
    assert list(seven.get_ydata()) == [40, 20, 10] and list(seventy.get_xdata()) == [1, 2, 4]
    assert list(month.get_ydata()) == [30, 30]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["7B", "70B", "one month"]
    assert ax.get_ylabel() == "training time (days)" and "GPUs" in ax.get_xlabel()
    with pytest.raises(ValueError, match="one number of days per GPU count"):
        plots.training_time([1, 2], {"7B": [1.0]})
    with pytest.raises(ValueError, match="no model"):
        plots.training_time([1, 2], {})


def test_mfu_bars_in_percent():
    fig = plots.mfu_bars(["1 x 64", "4 x 64"], [0.05, 0.125], xlabel="tokens per step", title="MFU")
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([5, 12.5])
    assert "5.0%" in texts(fig) and "12.5%" in texts(fig)
    assert "%" in ax.get_ylabel()
    with pytest.raises(ValueError, match="one label per MFU"):
        plots.mfu_bars(["a"], [0.1, 0.2], xlabel="x", title="t")
    with pytest.raises(ValueError, match="fractions"):
        plots.mfu_bars(["a"], [-0.1], xlabel="x", title="t")


def test_busy_vs_useful_draws_both_shares_and_the_ceiling():
    fig = plots.busy_vs_useful(["elementwise", "matmul"], [1.0, 0.9], [0.02, 0.8], ceiling=0.03,
                               ceiling_label="roofline ceiling")
    ax = fig.axes[0]
    busy, useful = ax.containers
    assert [b.get_height() for b in busy] == pytest.approx([100, 90])
    assert [b.get_height() for b in useful] == pytest.approx([2, 80])
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([3, 3])
    assert "roofline ceiling (3.0%)" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError, match="one busy and one peak share"):
        plots.busy_vs_useful(["a", "b"], [1.0], [0.1, 0.2], ceiling=0.1, ceiling_label="c")


def test_communication_efficiency_draws_measured_model_and_reference():
    allreduce = [record("all_reduce", size, 1e-4 + size / 1e9) for size in (4096, 65536, 2**20)]
    sendrecv = [record("sendrecv", size, 5e-5 + size / 2e9) for size in (4096, 65536)]
    model = [1.0, 2.0, 3.0]
    fig = plots.communication_efficiency(allreduce, sendrecv, model, reference_GBps=4.0,
                                         reference_label="best measured", title="2 ranks (gloo)")
    ax = fig.axes[0]
    measured, modelled, p2p, reference = ax.get_lines()
    assert list(measured.get_ydata()) == pytest.approx([r["ip_busbw"] for r in allreduce])
    assert list(modelled.get_ydata()) == model
    assert list(p2p.get_xdata()) == [4096, 65536]
    assert list(reference.get_ydata()) == [4.0, 4.0]
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()
    assert "1 MiB" in [t.get_text() for t in ax.get_xticklabels()]
    with pytest.raises(ValueError, match="one model busbw per all-reduce record"):
        plots.communication_efficiency(allreduce, sendrecv, [1.0], reference_GBps=4.0, reference_label="r", title="t")
    with pytest.raises(ValueError, match="send/recv records"):
        plots.communication_efficiency(allreduce, [], model, reference_GBps=4.0, reference_label="r", title="t")


def test_latency_histogram_in_microseconds_with_percentiles():
    samples = [100e-6] * 50 + [120e-6] * 45 + [400e-6] * 5
    fig = plots.latency_histogram(samples, p50_s=100e-6, p99_s=400e-6)
    ax = fig.axes[0]
    assert sum(bar.get_height() for bar in ax.patches) == len(samples)
    p50, p99 = ax.get_lines()
    assert list(p50.get_xdata()) == pytest.approx([100, 100]) and list(p99.get_xdata()) == pytest.approx([400, 400])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["P50 100 us", "P99 400 us"]
    assert "microseconds" in ax.get_xlabel()
    with pytest.raises(ValueError, match="at least two"):
        plots.latency_histogram([1e-4], p50_s=1e-4, p99_s=1e-4)
    with pytest.raises(ValueError, match="latencies"):
        plots.latency_histogram([1e-4, 0.0], p50_s=1e-4, p99_s=1e-4)


def test_step_breakdown_stacks_phases_in_milliseconds():
    rows = {"rank 0": {"data": 0.001, "compute": 0.004}, "model": {"data": 0.001, "compute": 0.006}}
    fig = plots.step_breakdown(rows, hatched=["model"])
    ax = fig.axes[0]
    widths = [(patch.get_x(), patch.get_width(), patch.get_hatch()) for patch in ax.patches]
    assert widths == [(0, pytest.approx(1), None), (pytest.approx(1), pytest.approx(4), None),
                      (0, pytest.approx(1), "//"), (pytest.approx(1), pytest.approx(6), "//")]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "model"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["data", "compute"]
    assert ax.get_xlabel() == "milliseconds per step"
    with pytest.raises(ValueError, match="must have the phases"):
        plots.step_breakdown({"a": {"data": 1.0}, "b": {"compute": 1.0}})
    with pytest.raises(ValueError, match="no rows"):
        plots.step_breakdown({})


def test_energy_efficiency_bars_and_measured_line():
    fig = plots.energy_efficiency(["A100", "H100"], [0.78e12, 1.41e12], [0.31e12, 0.57e12],
                                  delivered_label="at 40% MFU", measured_per_watt=1.1e12)
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([0.78, 1.41, 0.31, 0.57])
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([1.1, 1.1])
    assert "at 40% MFU" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_ylabel() == "TFLOP/s per watt"
    without = plots.energy_efficiency(["H100"], [1.41e12], [0.57e12], delivered_label="at 40% MFU")
    assert without.axes[0].get_lines() == []
    with pytest.raises(ValueError, match="one value of each kind"):
        plots.energy_efficiency(["H100"], [1.0], [], delivered_label="x")


def test_reliability_interruptions_and_goodput():
    fig = plots.reliability([8, 16], [0.01, 0.02], {"MTTR 15 min": [0.99, 0.98]}, goodput_title="Young")
    left, right = fig.axes
    assert list(left.get_lines()[0].get_ydata()) == [0.01, 0.02]
    assert list(right.get_lines()[0].get_ydata()) == pytest.approx([99, 98])
    assert right.get_title() == "Young" and "%" in right.get_ylabel()
    assert left.get_xscale() == "log" and left.get_xlabel() == "GPUs in the job"
    with pytest.raises(ValueError, match="one goodput per GPU count"):
        plots.reliability([8, 16], [0.01, 0.02], {"MTTR": [0.9]}, goodput_title="t")
    with pytest.raises(ValueError, match="fractions"):
        plots.reliability([8, 16], [0.01, 0.02], {"MTTR": [0.9, -1.0]}, goodput_title="t")


def test_cores_per_gpu_bars_and_one_core_line():
    fig = plots.cores_per_gpu(["0.125B", "70B"], [12.0, 0.02])
    ax = fig.axes[0]
    assert bar_heights(ax) == pytest.approx([12.0, 0.02])
    assert list(ax.get_lines()[0].get_ydata()) == [1, 1]
    assert ax.get_yscale() == "log" and "cores per GPU" in ax.get_ylabel()
    with pytest.raises(ValueError, match="cores per GPU"):
        plots.cores_per_gpu(["a"], [0.0])


def test_scaling_efficiency_draws_references_beside_the_last_bar():
    fig = plots.scaling_efficiency([1, 2], [100, 150], unit="ranks",
                                   references={"model": 0.9, "strong": 0.5})
    right = fig.axes[1]
    points = [collection.get_offsets()[0] for collection in right.collections]
    assert [list(p) for p in points] == [[pytest.approx(1.4), pytest.approx(90)],
                                         [pytest.approx(1.4), pytest.approx(50)]]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["model (90%)", "strong (50%)"]
    assert [bar.get_height() for bar in right.containers[0]] == pytest.approx([100, 75])
    plain = plots.scaling_efficiency([1, 2], [100, 150])
    assert plain.legends == [] and len(plain.axes[1].collections) == 0
    with pytest.raises(ValueError, match="fractions"):
        plots.scaling_efficiency([1, 2], [100, 150], references={"model": -0.1})
