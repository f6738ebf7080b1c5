"""labutils.plots.profile: the profiled step's timeline (chapter 6.7): what is drawn (bars,
rows, labels, units) and that bad input is refused with a clear error."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.plots import profile  # noqa: E402
from figure_text import legend_texts, texts  # noqa: E402

COMPUTE = [[(0.0, 0.004), (0.006, 0.010)], [(0.0, 0.008)]]
COMM = [[(0.003, 0.007)], [(0.005, 0.011)]]
EXPOSED = [[(0.004, 0.006)], [(0.008, 0.011)]]
STEPS = [0.010, 0.012]


def bars(ax) -> list:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]   # broken_barh's


def test_step_timeline_draws_two_rows_per_rank_in_milliseconds():
    fig = plots.step_timeline(COMPUTE, COMM, STEPS, exposed=EXPOSED, title="two ranks")
    assert plots.step_timeline is profile.step_timeline
    (ax,) = fig.axes
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels == ["rank 0 compute", "rank 0 communication", "rank 1 compute", "rank 1 communication"]
    assert "milliseconds" in ax.get_xlabel()
    assert ax.get_title() == "two ranks"
    collections = bars(ax)
    assert len(collections) == 3 * 2                            # compute, communication, exposed per rank
    first = collections[0].get_paths()
    assert len(first) == 2                                      # rank 0's two compute intervals
    xs = sorted({round(float(x), 9) for path in first for x in path.vertices[:, 0]})
    assert xs == [0.0, 4.0, 6.0, 10.0]                          # seconds drawn as ms
    assert ax.get_xlim()[1] == pytest.approx(12.0 * 1.02)
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--" and len(line.get_xdata())]
    assert sorted(float(line.get_xdata()[0]) for line in dashed) == pytest.approx([10.0, 12.0])
    legend = legend_texts(fig)
    assert any(text.startswith("exposed") for text in legend) and "end of the step" in legend
    assert fig._repr_png_()[:4] == b"\x89PNG"


def test_step_timeline_without_exposed_has_no_exposed_bars():
    fig = plots.step_timeline(COMPUTE[:1], COMM[:1], STEPS[:1])
    (ax,) = fig.axes
    assert len(bars(ax)) == 2
    assert not any(text.startswith("exposed") for text in legend_texts(fig))
    assert "One profiled step on every rank" in texts(fig)


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    (([], [], []), {}, "no ranks"),
    ((COMPUTE, COMM[:1], STEPS), {}, "one list per rank"),
    ((COMPUTE, COMM, STEPS), {"exposed": EXPOSED[:1]}, "one list per rank"),
    ((COMPUTE, COMM, [0.01, 0.0]), {}, "positive seconds"),
    (([[(0.002, 0.001)], [(0.0, 0.008)]], COMM, STEPS), {}, "rank 0 compute"),
    ((COMPUTE, [[(0.003, 0.007)], [(0.005, 0.02)]], STEPS), {}, "rank 1 communication"),
    ((COMPUTE, COMM, STEPS), {"exposed": [[(-0.001, 0.001)], []]}, "rank 0 exposed"),
])
def test_step_timeline_rejects_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plots.step_timeline(*args, **kwargs)
