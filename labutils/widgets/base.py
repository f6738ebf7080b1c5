"""What every dashboard shares: the redraw-on-change ``Dashboard`` box and checked controls.

GPU memory capacities are ``labutils.costmodel.roofline.DEVICES[...].memory_bytes`` (bytes: the
datasheet's "80 GB" is 80 GiB), shown both ways ("85.9 GB (80.0 GiB)"); GPUs listed there
without a capacity are left out of the menus.
"""
from __future__ import annotations

import html
import math

import ipywidgets as widgets

from labutils.machine._gpu_records import GB, memory_text

WIDE = {"description_width": "initial"}
POWERS_OF_TWO = [2**k for k in range(11)]  # 1 .. 1024
#: parameter counts as powers of ten (slider range, inclusive)
PARAMS_LOG10 = (8.0, 12.5)


def check_range(name: str, value, bounds) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} must be between {bounds[0]:g} and {bounds[1]:g}, got {value!r}")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


def params_slider(value: float) -> widgets.FloatLogSlider:
    check_range("num_params", value, (10 ** PARAMS_LOG10[0], 10 ** PARAMS_LOG10[1]))
    return widgets.FloatLogSlider(value=value, base=10, min=PARAMS_LOG10[0], max=PARAMS_LOG10[1], step=0.01,
                                  description="parameters", readout_format=".3g", continuous_update=False,
                                  style=WIDE)


def powers_of_two_slider(name: str, value: int, description: str) -> widgets.SelectionSlider:
    """A slider over ``POWERS_OF_TWO`` (a count of GPUs or nodes) at ``value``, checked as ``name``."""
    check_choice(name, value, POWERS_OF_TWO)
    return widgets.SelectionSlider(options=POWERS_OF_TWO, value=value, description=description,
                                   continuous_update=False, style=WIDE)


def gpu_dropdown(gpu: str) -> widgets.Dropdown:
    options = gpu_memory_options()
    check_choice("gpu", gpu, [key for _, key in options])
    return widgets.Dropdown(options=options, value=gpu, description="GPU")


def gpu_memory_options() -> list[tuple[str, str]]:
    """(menu label, DEVICES key) for every GPU in ``labutils.costmodel.roofline.DEVICES`` with a known capacity."""
    from labutils.costmodel.roofline import DEVICES

    return [(f"{device.name} ({memory_text(device.memory_bytes)})", key)
            for key, device in DEVICES.items() if device.memory_bytes]


def memory_of(needed_bytes: float, device) -> str:
    """"120.0 GB of 85.9 GB (80.0 GiB)": bytes needed per GPU against the capacity of ``device`` (a
    ``DEVICES`` entry); GB = 1e9 bytes."""
    return f"{needed_bytes / GB:.1f} GB of {memory_text(device.memory_bytes)}"


def _same_float(old, new) -> bool:
    """True for two floats within rounding of each other (a relative 1e-9).

    When a float slider first renders, the browser snaps its value to ``min + k * step`` in
    JavaScript and sends the result back: 0.4 with ``step=0.05`` returns as
    0.39999999999999997; integer sliders send nothing. Redrawing for that echo would run the
    drawing a second time, after the cell that showed the widget has finished.
    """
    floats = all(isinstance(value, float) for value in (old, new))
    return floats and math.isfinite(old) and math.isfinite(new) and math.isclose(old, new, rel_tol=1e-9)


class Dashboard(widgets.VBox):
    """Controls on top, then the picture (if any), then the readout; redrawn on every change.

    Subclasses define ``_redraw()``, which reads ``self.controls`` and sets ``self.readout``
    (and ``self.image``); a ValueError it raises is shown in the readout instead.
    """

    def __init__(self, controls: dict[str, widgets.Widget], with_image: bool):
        self.controls = controls
        self.readout = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto")) \
            if with_image else None
        children = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
        children += [self.image] if with_image else []
        super().__init__(children + [self.readout])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def _on_change(self, change) -> None:
        if _same_float(change["old"], change["new"]):
            return   # a float slider's echo after its first render (0.4 -> 0.39999999999999997): same draw
        self.update()

    def update(self) -> None:
        """Recompute from the controls' values and redraw the picture and the readout."""
        try:
            self._redraw()
        except ValueError as error:  # a combination the model rejects, e.g. m not a multiple of p
            if self.image is not None:
                self.image.value = b""
            self.readout.value = f"<span style='color:#b00020'>{html.escape(str(error))}</span>"
