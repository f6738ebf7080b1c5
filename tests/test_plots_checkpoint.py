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


# ----------------------------------------------------------------------------- a restart's loss curve


def _restart_inputs():
    reference = {step: 1.0 / (1 + step) for step in range(12)}
    attempts = {0: {step: reference[step] for step in range(10)}, 1: {step: reference[step] for step in range(8, 12)}}
    return reference, attempts


def test_restart_losses_draws_the_reference_each_attempt_and_the_steps_done_twice():
    reference, attempts = _restart_inputs()
    fig = plots.restart_losses(reference, attempts, checkpoints=[4, 8, 12], killed_at=10, title="resumed")
    ax = fig.axes[0]
    line, first, second = ax.get_lines()[:3]
    assert list(line.get_xdata()) == list(range(12)) and list(line.get_ydata()) == pytest.approx(list(reference.values()))
    assert list(first.get_xdata()) == list(range(10)) and list(second.get_xdata()) == [8, 9, 10, 11]
    legend = legend_texts(fig)
    assert "attempt 0: steps 0-9" in legend and "attempt 1: steps 8-11" in legend
    assert "done twice: steps 8-9" in legend and "a rank killed: step 10 never finished" in legend
    assert "checkpoint complete" in legend and "resumed" in texts(fig)
    spans = [(p.get_x(), p.get_width()) for p in ax.patches if isinstance(p, Rectangle)]
    assert spans == [(7.5, 2.0)], "steps 8 and 9, done twice, are shaded"
    assert ax.get_xlabel() == "training step" and "loss" in ax.get_ylabel()


def test_restart_losses_names_a_single_step_done_twice():
    reference, attempts = _restart_inputs()
    attempts = {0: {s: reference[s] for s in range(9)}, 1: {s: reference[s] for s in range(8, 12)}}
    fig = plots.restart_losses(reference, attempts, checkpoints=[4, 8], killed_at=9)
    assert "done twice: step 8" in legend_texts(fig)


@pytest.mark.parametrize("change, message", [
    (lambda r, a: ({0: 1.0}, a, {}), "at least two steps"),
    (lambda r, a: ({**r, 3: -1.0}, a, {}), "positive numbers"),
    (lambda r, a: (r, {}, {}), "between 1 and"),
    (lambda r, a: (r, {0: {1: math.nan}}, {}), "attempt 0"),
    (lambda r, a: (r, a, {"killed_at": 40}), "killed_at"),
])
def test_restart_losses_refuses_bad_input(change, message):
    reference, attempts = _restart_inputs()
    reference, attempts, extra = change(reference, attempts)
    with pytest.raises(ValueError, match=message):
        plots.restart_losses(reference, attempts, checkpoints=[4, 8], **{"killed_at": 10, **extra})
