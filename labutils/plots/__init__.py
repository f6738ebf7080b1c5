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
from labutils.plots.pipeline import pipeline_gantt
from labutils.plots.memory import (bytes_per_parameter_bars, offload_costs, optimizer_state_per_rank,
                                   zero_memory_bars)
from labutils.plots.communication import (allreduce_time_comparison, busbw_with_model, comm_volume_bars,
                                          zero_comm_measured)
from labutils.plots.data_parallel import (bucket_counts, bucket_timeline, loss_agreement, sampler_orders,
                                          scaling_with_model, step_time_breakdown)
from labutils.plots.scaling import scaling_efficiency

__all__ = [
    "GB", "CourseFigure", "figure_png", "format_bytes_binary",
    "bandwidth_vs_size", "roofline", "pipeline_gantt", "zero_memory_bars", "comm_volume_bars",
    "scaling_efficiency",
    "bytes_per_parameter_bars", "offload_costs", "optimizer_state_per_rank",
    "allreduce_time_comparison", "busbw_with_model", "zero_comm_measured",
    "bucket_counts", "bucket_timeline", "loss_agreement", "sampler_orders", "scaling_with_model",
    "step_time_breakdown",
]
