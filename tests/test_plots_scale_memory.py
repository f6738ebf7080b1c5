"""labutils.plots.scale_memory draws recomputation's trade and FSDP's prefetch timeline: data and units."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labutils import plots  # noqa: E402
from labutils.costmodel import fsdp_overlap


def test_recompute_tradeoff_puts_each_variant_at_its_time_and_bytes():
    fig = plots.recompute_tradeoff(["none", "selective", "full"], [20e6, 9e6, 0.5e6], [0.030, 0.036, 0.041],
                                   [19.9e6, 8.9e6, 0.5e6], title="t")
    ax = fig.axes[0]
    points = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines()]
    assert points[0] == pytest.approx((30.0, 20.0)) and points[1] == pytest.approx((30.0, 19.9))   # ms, MB
    assert points[-1] == pytest.approx((41.0, 0.5))
    assert "(MB)" in ax.get_ylabel() and "(ms" in ax.get_xlabel()
    with pytest.raises(ValueError, match="one saved_bytes"):
        plots.recompute_tradeoff(["a"], [1, 2], [1], [1], title="t")


def test_overlap_timeline_draws_every_interval_in_ms():
    step = fsdp_overlap.simulate_step(fsdp_overlap.LayerTimes(2, 0.001, 0.0005, 0.0005), prefetch=True)
    fig = plots.overlap_timeline({"prefetch": step}, title="t")
    bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    assert len(bars) == len(step.intervals)
    assert max(b.get_x() + b.get_width() for b in bars) == pytest.approx(step.total_s * 1e3)
    assert "exposed" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="at least one timeline"):
        plots.overlap_timeline({}, title="t")
