"""Any function that returns a figure, as a dashboard (``figure_explorer``)."""
from __future__ import annotations

import html
import math

import ipywidgets as widgets

from labutils import plots
from labutils.widgets.base import Dashboard


def _checked_value(name: str, control: widgets.Widget):
    """A control's value; a float slider's must be finite and inside its range (else a ValueError)."""
    value = control.value
    if isinstance(control, widgets.FloatLogSlider):
        low, high = control.base ** control.min, control.base ** control.max
    elif isinstance(control, widgets.FloatSlider):
        low, high = control.min, control.max
    else:
        return value
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{name} = {value!r} is not a number between {low:g} and {high:g}")
    return value


class FigureExplorer(Dashboard):
    """Any ``draw(**values)`` that returns a Figure, a text, or both, redrawn whenever a control moves."""

    def __init__(self, draw, controls: dict[str, widgets.Widget]):
        if not callable(draw):
            raise ValueError(f"draw must be a function of the controls' values, got {draw!r}")
        if not controls or not all(isinstance(control, widgets.ValueWidget) for control in controls.values()):
            raise ValueError("controls must be ipywidgets with a value, e.g. {'n': IntSlider(...)}, by argument name")
        self.draw = draw
        super().__init__(dict(controls), with_image=True)

    def _redraw(self) -> None:
        from matplotlib.figure import Figure

        result = self.draw(**{name: _checked_value(name, control) for name, control in self.controls.items()})
        parts = result if isinstance(result, tuple) else (result,)
        figures = [part for part in parts if isinstance(part, Figure)]
        lines = [str(part) for part in parts if part is not None and not isinstance(part, Figure)]
        self.image.value = plots.figure_png(figures[0]) if figures else b""
        self.image.layout.display = None if figures else "none"
        self.readout.value = "".join(f"<pre>{html.escape(line)}</pre>" for line in lines)


def figure_explorer(draw, **controls: widgets.Widget) -> FigureExplorer:
    """A dashboard over ``draw``: one control per argument; what it returns is shown, as PNG and text.

    ``draw(**values)`` returns a matplotlib Figure (from ``labutils.plots``: built without
    pyplot), a text, or a tuple of both; it should not print (a callback's prints do not reach
    the notebook). Unlike ``ipywidgets.interact`` with pyplot, the figure is rendered to PNG
    here (no pyplot state, no Output widget), a float slider's value is checked to be finite and
    inside its range before ``draw`` runs, and a ValueError is shown as one red line::

        widgets.figure_explorer(lambda n: plots.busbw_factor_curves(...),
                                n=ipywidgets.IntSlider(value=8, min=2, max=64))
    """
    return FigureExplorer(draw, controls)
