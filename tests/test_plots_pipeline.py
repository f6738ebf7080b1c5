"""labutils.plots.pipeline's bubble and in-flight figures (chapter 9): data, labels, bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.costmodel import schedules


def test_bubble_vs_microbatches_curves_and_measured_points():
    ms = list(range(1, 17))
    formulas = [schedules.bubble_formula("gpipe", 2, m) for m in ms]
    fig = plots.bubble_vs_microbatches(2, ms, [f["of_total"] for f in formulas],
                                       [f["relative_to_ideal"] for f in formulas], {1: 0.52, 8: 0.15})
    ax = fig.axes[0]
    total, ideal, measured = ax.get_lines()
    assert total.get_ydata()[0] == pytest.approx(50.0) and total.get_ydata()[-1] == pytest.approx(100 / 17)
    assert ideal.get_ydata()[0] == pytest.approx(100.0)                        # (p-1)/m at m = 1
    assert list(measured.get_xdata()) == [1, 8] and list(measured.get_ydata()) == pytest.approx([52, 15])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16"]
    assert ax.get_ylabel() == "bubble (%)" and "p = 2" in ax.get_title()


def test_bubble_vs_microbatches_rejects_bad_input():
    with pytest.raises(ValueError, match="one formula value per m"):
        plots.bubble_vs_microbatches(2, [1, 2], [0.5], [1.0, 0.5], {})
    with pytest.raises(ValueError, match="fractions"):
        plots.bubble_vs_microbatches(2, [1, 2], [0.5, 0.3], [1.0, 0.5], {1: 50})
    with pytest.raises(ValueError, match="num_stages"):
        plots.bubble_vs_microbatches(0, [1, 2], [0.5, 0.3], [1.0, 0.5], {})


def test_in_flight_bars_measured_bars_and_simulated_ticks():
    fig = plots.in_flight_bars({"GPipe": [4, 4], "1F1B": [2, 1]}, {"GPipe": [4, 4], "1F1B": [2, 1]},
                               num_microbatches=4)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]
    assert heights == [4, 4, 2, 1]
    ticks = [list(line.get_ydata()) for line in ax.get_lines()]
    assert ticks == [[4, 4], [2, 1]]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["stage 0", "stage 1"]
    assert "microbatches" in ax.get_ylabel() and "m = 4" in ax.get_title()
    with pytest.raises(ValueError, match="same schedules"):
        plots.in_flight_bars({"GPipe": [4, 4]}, {"1F1B": [2, 1]}, num_microbatches=4)
    with pytest.raises(ValueError, match="one count per stage"):
        plots.in_flight_bars({"GPipe": [4, 4]}, {"GPipe": [4, 4, 4]}, num_microbatches=4)
