"""What a figure draws, read back for the plots' tests: its texts, its legends' entries, its bars.

Importing this module selects matplotlib's Agg backend (no display), before any test draws.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402


def texts(fig: Figure) -> list[str]:
    """Every piece of text drawn in the figure (titles, labels, annotations, legend entries)."""
    return [artist.get_text() for artist in fig.findobj(Text) if artist.get_text()]


def legend_texts(fig: Figure) -> list[str]:
    """The entries of the figure's legends and of its axes' legends."""
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def bar_heights(ax) -> list[float]:
    """Heights of the rectangles drawn on ``ax`` (bars, in data units)."""
    return [patch.get_height() for patch in ax.patches if isinstance(patch, Rectangle)]


def bar_widths(ax) -> list[float]:
    """Widths of the rectangles drawn on ``ax`` (horizontal bars, in data units)."""
    return [patch.get_width() for patch in ax.patches if isinstance(patch, Rectangle)]
