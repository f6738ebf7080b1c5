"""Figures for the course: matplotlib pictures of what the other labutils modules compute.

Every function returns a :class:`matplotlib.figure.Figure` (a :class:`CourseFigure`) built
without pyplot, so a notebook shows it exactly once (as the cell's value, or with
``display(fig)``) and no global figure state is left behind. Nothing here models or measures anything: the numbers
come from ``labutils.collectives_bench`` and ``labutils.bench`` (measurements) and from
``labutils.costmodel``, ``labutils.roofline`` and ``labutils.schedules`` (models); this
module only draws them.

Units on every axis: bytes (binary prefixes KiB/MiB/GiB for message sizes, as nccl-tests
sizes are powers of two), GB = 1e9 bytes for memory and volume, GB/s = 1e9 B/s for
bandwidth, FLOP/s for throughput.

    from labutils import plots, schedules
    plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("1f1b", 4, 8)))
"""
from labutils.plots.base import GB, CourseFigure, figure_png, format_bytes_binary
from labutils.plots.bandwidth import bandwidth_vs_size
from labutils.plots.roofline_chart import roofline
from labutils.plots.pipeline import bubble_vs_microbatches, in_flight_bars, pipeline_gantt
from labutils.plots.memory import zero_memory_bars
from labutils.plots.communication import comm_volume_bars
from labutils.plots.scaling import scaling_efficiency
from labutils.plots.tensor_parallel import (
    activation_memory_vs_tp, allreduce_counts, collective_time_fit, step_time_parts, tp_layer_times,
    tp_sharding,
)
from labutils.plots.strategy import (
    aux_loss_vs_skew, all_to_all_matrix, expert_load, parallel_layout, scaling_against_model,
)

__all__ = [
    "GB", "CourseFigure", "figure_png", "format_bytes_binary",
    "bandwidth_vs_size", "roofline", "pipeline_gantt", "zero_memory_bars", "comm_volume_bars",
    "scaling_efficiency",
    "bubble_vs_microbatches", "in_flight_bars",
    "tp_sharding", "allreduce_counts", "collective_time_fit", "tp_layer_times", "activation_memory_vs_tp",
    "step_time_parts",
    "expert_load", "aux_loss_vs_skew", "all_to_all_matrix", "parallel_layout", "scaling_against_model",
]
