"""All-reduce algorithms under the alpha-beta model (``allreduce_explorer``)."""
from __future__ import annotations

import html
import math

import ipywidgets as widgets

from labutils import plots
from labutils.widgets.base import WIDE, Dashboard, check_range

#: all-reduce explorer: log2 of the ranks n, log10 of alpha in us and of the bandwidth in GB/s
_LOG2_RANKS = (1, 12)
_ALPHA_US_LOG10 = (-1.0, 3.0)          # 0.1 us .. 1 ms per message
_BANDWIDTH_GBPS_LOG10 = (-1.0, 3.0)    # 0.1 .. 1000 GB/s per direction
#: the all-reduce algorithms compared, with their alpha-beta times (labutils.costmodel.collective_time)
_ALLREDUCE_ALGORITHMS = {
    "ring": "ring: 2(n-1) alpha + 2(n-1)/n S beta",
    "double_binary_tree": "double binary tree (approx.): 2 lg n alpha + 2(n-1)/n S beta",
    "recursive_doubling": "recursive doubling: lg n alpha + lg n S beta",
}
#: all-reduce sizes S drawn: 8 B to 1 GiB, 8 points per factor of two
_ALLREDUCE_SIZES = [8 * 2 ** (k / 8) for k in range(8 * 27 + 1)]


def _positive_finite(name: str, value) -> float:
    """``value`` as a float, or a ValueError when it is not a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _clamped_log_slider(name: str, value: float, bounds_log10, description: str) -> tuple[widgets.FloatLogSlider, str]:
    """A FloatLogSlider starting at ``value`` (clamped into its range) and a note when it was clamped."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    low, high = 10 ** bounds_log10[0], 10 ** bounds_log10[1]
    start = min(max(float(value), low), high)
    note = "" if start == value else f"{name} = {value:.3g} lies outside the slider's {low:g} to {high:g}; it starts at {start:g}. "
    slider = widgets.FloatLogSlider(value=start, base=10, min=bounds_log10[0], max=bounds_log10[1], step=0.05,
                                    description=description, readout_format=".3g", continuous_update=False,
                                    style=WIDE)
    return slider, note


class AllReduceExplorer(Dashboard):
    """Ranks n, latency alpha and bandwidth 1/beta -> all-reduce time of ring, tree and recursive doubling."""

    def __init__(self, num_ranks: int, alpha_s: float, beta_s_per_byte: float):
        if not isinstance(num_ranks, int) or num_ranks < 2 or num_ranks & (num_ranks - 1):
            raise ValueError(f"num_ranks must be a power of two from 2 to {2 ** _LOG2_RANKS[1]}, got {num_ranks!r}")
        check_range("num_ranks", num_ranks, (2 ** _LOG2_RANKS[0], 2 ** _LOG2_RANKS[1]))
        for name, value in (("alpha_s", alpha_s), ("beta_s_per_byte", beta_s_per_byte)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        alpha_slider, alpha_note = _clamped_log_slider("alpha (us)", alpha_s * 1e6, _ALPHA_US_LOG10,
                                                       "alpha (us per message)")
        fastest = 10 ** _BANDWIDTH_GBPS_LOG10[1]
        bandwidth_slider, bandwidth_note = _clamped_log_slider(
            "1/beta (GB/s)", 1 / beta_s_per_byte / 1e9 if beta_s_per_byte > 0 else fastest,
            _BANDWIDTH_GBPS_LOG10, "1/beta (GB/s per direction)")
        if beta_s_per_byte == 0:
            bandwidth_note = f"beta = 0 (no bandwidth term): 1/beta starts at {fastest:g} GB/s. "
        self.start_note = alpha_note + bandwidth_note
        controls = {
            "log2_n": widgets.IntSlider(value=int(math.log2(num_ranks)), min=_LOG2_RANKS[0], max=_LOG2_RANKS[1],
                                        description="log2 n (ranks)", continuous_update=False, style=WIDE),
            "alpha_us": alpha_slider,
            "bandwidth_GBps": bandwidth_slider,
        }
        self.times = {}
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils import costmodel

        n = 2 ** self.controls["log2_n"].value
        alpha = _positive_finite("alpha", self.controls["alpha_us"].value) * 1e-6
        bandwidth_GBps = _positive_finite("1/beta", self.controls["bandwidth_GBps"].value)
        beta = 1 / (bandwidth_GBps * 1e9)
        self.times = {algorithm: [costmodel.collective_time("all_reduce", algorithm, size, n, alpha, beta)
                                  for size in _ALLREDUCE_SIZES]
                      for algorithm in _ALLREDUCE_ALGORITHMS}
        title = f"n = {n} ranks, alpha = {alpha * 1e6:.3g} us, 1/beta = {bandwidth_GBps:.3g} GB/s per direction"
        curves = {_ALLREDUCE_ALGORITHMS[name]: times for name, times in self.times.items()}
        self.image.value = plots.figure_png(plots.algorithm_times(_ALLREDUCE_SIZES, {title: curves}))
        ring_wins = [size for size, ring, doubling in zip(_ALLREDUCE_SIZES, self.times["ring"],
                                                          self.times["recursive_doubling"]) if ring <= doubling]
        if ring_wins:
            crossing = f"the ring beats recursive doubling from S = {plots.format_bytes_binary(ring_wins[0])}"
        else:
            crossing = "the ring never beats recursive doubling up to 1 GiB" + (
                ": at n = 2 both send S per rank and the ring takes one more step" if n == 2 else "")
        fastest = {label: min(self.times, key=lambda name: self.times[name][index])
                   for label, index in (("8 B", 0), ("1 GiB", -1))}
        self.readout.value = (html.escape(self.start_note) + f"{crossing}; fastest at S = 8 B: {fastest['8 B']}, "
                              f"at S = 1 GiB: {fastest['1 GiB']}")


def allreduce_explorer(num_ranks: int = 8, alpha_s: float = 10e-6, beta_s_per_byte: float = 1e-10) -> AllReduceExplorer:
    """Dashboard of all-reduce algorithms under the alpha-beta model (``labutils.costmodel.collective_time``).

    Controls: "log2_n" (n = 2 to 4096 ranks), "alpha_us" (latency per message, 0.1 us to
    1 ms), "bandwidth_GBps" (1/beta, 0.1 to 1000 GB/s per direction). The chart draws the
    model time (ms) of ring, double binary tree and recursive doubling against the size S
    (8 B to 1 GiB); ``.readout`` says from which S the ring beats recursive doubling and
    which is fastest at both ends; ``.times`` holds the seconds per algorithm.
    Start from a fit (``AlphaBetaFit.alpha``, ``.beta``): values outside the sliders' ranges
    start at the nearest end, and the readout says so; beta = 0 (no bandwidth term) starts
    at the largest bandwidth.
    """
    return AllReduceExplorer(num_ranks, alpha_s, beta_s_per_byte)
