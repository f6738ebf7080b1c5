"""Bandwidth against message size (chapters 2, 4 and 5): algbw and busbw in GB/s = 1e9 B/s."""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from labutils.plots.base import (
    CourseFigure,
    _plain_number,
    _require,
    _set_bytes_axis,
)

#: record fields that tell benchmark series apart, in the order their values enter a label
_SERIES_FIELDS = ("op", "world_size", "backend", "device", "type", "stat")
_MODE_NAMES = {"oop": "out-of-place", "ip": "in-place"}


def bandwidth_vs_size(records: Sequence[dict], link_peak_GBps: float | None = None,
                      link_label: str | None = None, *, mode: str | None = None) -> Figure:
    """algbw and busbw (GB/s = 1e9 B/s) against message size (bytes), log-log.

    ``records`` come from ``labutils.measure.collectives_bench`` (one dict per size with ``size``
    and ``oop_*`` / ``ip_*`` columns); several collectives, world sizes or backends become
    separate series (one colour each: busbw solid, algbw dashed), as do records timed with
    different statistics (``stat``: mean, median, min). ``mode`` "oop" or "ip"
    picks out-of-place or in-place columns; by default each series uses out-of-place
    where it was measured, else in-place. ``link_peak_GBps`` draws the link's bandwidth
    PER DIRECTION, the figure busbw is to be compared with (never a bidirectional one).
    """
    _require(len(records) > 0, "no benchmark records to draw: run collectives_bench.collective_bench(...) first")
    _require(mode in (None, "oop", "ip"), f"mode must be 'oop', 'ip' or None, got {mode!r}")
    _require(link_peak_GBps is None or link_peak_GBps > 0,
             f"link_peak_GBps must be a positive GB/s figure, got {link_peak_GBps!r}")
    missing = {"size", "oop_time_us", "ip_time_us"} - set(records[0])
    _require(not missing, f"records lack {sorted(missing)}: pass collectives_bench.collective_bench(...) records")
    series: dict[tuple, list[dict]] = {}
    for record in records:
        series.setdefault(tuple(record.get(name) for name in _SERIES_FIELDS), []).append(record)
    varying = [index for index, name in enumerate(_SERIES_FIELDS)
               if name == "op" or len({key[index] for key in series}) > 1]
    first_key = next(iter(series))
    shared = [_series_field_text(name, first_key[index]) for index, name in enumerate(_SERIES_FIELDS)
              if index not in varying and first_key[index] is not None]

    fig = CourseFigure(figsize=(10, 5.5), layout="constrained")
    ax = fig.add_subplot()
    colors = [f"C{index % 10}" for index in range(len(series))]
    for color, (key, group) in zip(colors, series.items()):
        series_mode = mode or ("oop" if any(r["oop_time_us"] is not None for r in group) else "ip")
        measured = sorted((r for r in group if r[f"{series_mode}_time_us"] is not None),
                          key=lambda r: r["size"])
        _require(len(measured) > 0, f"{key[0]} has no {_MODE_NAMES[series_mode]} measurements: "
                                    f"use mode={'ip' if series_mode == 'oop' else 'oop'!r}")
        name = ", ".join(_series_field_text(_SERIES_FIELDS[i], key[i]) for i in varying)
        name += f" ({_MODE_NAMES[series_mode]})"
        sizes = [r["size"] for r in measured]
        ax.plot(sizes, [r[f"{series_mode}_busbw"] for r in measured], color=color, marker="o",
                markersize=4, label=f"{name}: busbw")
        ax.plot(sizes, [r[f"{series_mode}_algbw"] for r in measured], color=color, linestyle="--",
                marker=".", markersize=4, alpha=0.8, label=f"{name}: algbw")
    if link_peak_GBps is not None:
        ax.axhline(link_peak_GBps, color="black", linestyle=":", linewidth=1.5,
                   label=f"{link_label or 'link'} peak, per direction: {link_peak_GBps:g} GB/s")

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _set_bytes_axis(ax.xaxis, [r["size"] for r in records])
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=30))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.set_xlabel("message size (bytes; nccl-tests' size column)")
    ax.set_ylabel("bandwidth (GB/s = 1e9 B/s)")
    ax.set_title("Collective bandwidth vs message size (busbw solid, algbw dashed)"
                 + (f"\n{', '.join(shared)}" if shared else ""))
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    return fig


def _series_field_text(name: str, value) -> str:
    """How one record field reads in a legend entry or the title: "4 ranks", "dtype float"."""
    templates = {"world_size": "{} ranks", "device": "on {}", "type": "dtype {}", "stat": "{} time"}
    return templates.get(name, "{}").format(value)
