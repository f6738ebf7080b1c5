"""What every course figure shares: the Figure class that shows itself in a notebook, PNG
rendering, byte-axis labels (binary prefixes) and the units used on axes (GB = 1e9 bytes)."""
from __future__ import annotations

import io
import math
from typing import Iterable

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

GB = 1e9  # bytes: memory and volume in decimal gigabytes (SI), as on vendor datasheets

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")



def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure rendered as PNG bytes (for an ``ipywidgets.Image`` or a file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


class CourseFigure(Figure):
    """A Figure that shows itself as a PNG when it is a notebook cell's value.

    Figures made without pyplot are not picked up by the inline backend until pyplot has
    been imported somewhere; ``_repr_png_`` makes them display in every kernel, once.
    """

    def _repr_png_(self) -> bytes:
        return figure_png(self, dpi=100)


def format_bytes_binary(num_bytes: float) -> str:
    """Human label for a byte count with binary prefixes: 8 -> "8 B", 1048576 -> "1 MiB"."""
    value = float(num_bytes)
    unit_index = 0
    while abs(value) >= 1024 and unit_index < len(_BINARY_UNITS) - 1:
        value /= 1024
        unit_index += 1
    return f"{value:.4g} {_BINARY_UNITS[unit_index]}"


def _plain_number(value: float, _pos=None) -> str:
    """Tick label without scientific notation where it stays short (0.001, 1, 250, 1e+05)."""
    return f"{value:g}"


def _set_bytes_axis(axis, sizes: Iterable[float], max_ticks: int = 10) -> None:
    """Log2 byte axis: a labelled tick every few powers of two, unlabelled minors between."""
    exponents = [math.log2(size) for size in sizes if size > 0]
    low, high = math.floor(min(exponents)), math.ceil(max(exponents))
    step = max(1, math.ceil((high - low + 1) / max_ticks))
    axis.set_major_locator(FixedLocator([2.0**k for k in range(low, high + 1, step)]))
    axis.set_minor_locator(FixedLocator([2.0**k for k in range(low, high + 1)]))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: format_bytes_binary(value)))
    axis.set_minor_formatter(NullFormatter())


def _flops_scale(peak_flops: float) -> tuple[float, str]:
    """(divisor, unit) so a device's peak reads as a small number: TFLOP/s or GFLOP/s."""
    return (1e12, "TFLOP/s") if peak_flops >= 1e12 else (1e9, "GFLOP/s")


def _singular(unit: str) -> str:
    """"GPUs" -> "GPU", "ranks" -> "rank"; a unit without a plural s is kept."""
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
