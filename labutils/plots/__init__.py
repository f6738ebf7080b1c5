"""Figures for the course: matplotlib pictures of what the other labutils modules compute.

Every function returns a :class:`matplotlib.figure.Figure` (a :class:`CourseFigure`) built
without pyplot, so a notebook shows it exactly once (as the cell's value, or with
``display(fig)``) and no global figure state is left behind. Nothing here models or measures anything: the numbers
come from ``labutils.measure.collectives_bench`` and ``labutils.measure.bench`` (measurements) and from
``labutils.costmodel``, ``labutils.costmodel.roofline`` and ``labutils.costmodel.schedules`` (models); this
module only draws them.

Units on every axis: bytes (binary prefixes KiB/MiB/GiB for message sizes, as nccl-tests
sizes are powers of two), GB = 1e9 bytes for memory and volume, GB/s = 1e9 B/s for
bandwidth, FLOP/s for throughput.

    from labutils import plots
    from labutils.costmodel import schedules
    plots.pipeline_gantt(schedules.simulate(schedules.build_schedule("1f1b", 4, 8)))

One module per kind of figure, every function re-exported here: ``base`` (``CourseFigure``,
PNG, units), ``bandwidth``, ``roofline_chart``, ``device_benchmarks``, ``gpu_architecture``,
``fp8``, ``metrics``, ``scaling``, ``interconnects``, ``collectives``, ``communication``,
``data_parallel``, ``profile``, ``memory``, ``checkpoint``, ``scale_memory``,
``tensor_parallel``, ``pipeline``, ``strategy``, ``comm_bound``.
"""

from labutils.plots.base import GB, CourseFigure, figure_png, format_bytes_binary
from labutils.plots.bandwidth import bandwidth_vs_size
from labutils.plots.roofline_chart import (
    roofline,
    intensity_bars,
    predicted_vs_measured,
    rooflines_compared,
    time_share_bars,
)
from labutils.plots.pipeline import pipeline_gantt, bubble_vs_microbatches, in_flight_bars
from labutils.plots.memory import (
    zero_memory_bars,
    bytes_per_parameter_bars,
    offload_costs,
    optimizer_state_per_rank,
)
from labutils.plots.communication import (
    comm_volume_bars,
    allreduce_time_comparison,
    busbw_with_model,
    zero_comm_measured,
)
from labutils.plots.scaling import scaling_efficiency
from labutils.plots.metrics import (
    busy_vs_useful,
    communication_efficiency,
    cores_per_gpu,
    energy_efficiency,
    latency_histogram,
    mfu_bars,
    precision_throughput,
    reliability,
    step_breakdown,
    training_time,
)
from labutils.plots.device_benchmarks import cache_bandwidth_sweep, call_time_vs_size, matrix_unit_speedup
from labutils.plots.gpu_architecture import (
    generation_growth,
    grouped_bars,
    nvlink_domains,
    simt_efficiency_bars,
    systolic_wavefront,
    thread_block_map,
    torus_hop_distribution,
)
from labutils.plots.interconnects import (
    copy_bandwidth,
    link_ladder,
    numa_layout,
    ping_pong,
    ring_time_by_link,
    topology_matrices,
)
from labutils.plots.collectives import (
    algorithm_times,
    busbw_factor_curves,
    collective_buffers,
    collective_fits,
    time_comparison_bars,
)
from labutils.plots.data_parallel import (
    bucket_counts,
    bucket_timeline,
    loss_agreement,
    sampler_orders,
    scaling_with_model,
    step_time_breakdown,
)
from labutils.plots.tensor_parallel import (
    activation_memory_vs_tp,
    allreduce_counts,
    collective_time_fit,
    step_time_parts,
    tp_layer_times,
    tp_sharding,
)
from labutils.plots.comm_bound import comm_vs_compute
from labutils.plots.profile import step_timeline
from labutils.plots.fp8 import fp8_scale_sweep
from labutils.plots.strategy import (
    aux_loss_vs_skew,
    all_to_all_matrix,
    expert_load,
    parallel_layout,
    scaling_against_model,
)
from labutils.plots.scale_memory import overlap_timeline, recompute_tradeoff
from labutils.plots.checkpoint import checkpoint_bytes_per_rank, checkpoint_waste, restart_losses

__all__ = [
    "GB",
    "CourseFigure",
    "figure_png",
    "format_bytes_binary",
    "bandwidth_vs_size",
    "roofline",
    "intensity_bars",
    "predicted_vs_measured",
    "rooflines_compared",
    "time_share_bars",
    "pipeline_gantt",
    "bubble_vs_microbatches",
    "in_flight_bars",
    "zero_memory_bars",
    "bytes_per_parameter_bars",
    "offload_costs",
    "optimizer_state_per_rank",
    "comm_volume_bars",
    "allreduce_time_comparison",
    "busbw_with_model",
    "zero_comm_measured",
    "scaling_efficiency",
    "busy_vs_useful",
    "communication_efficiency",
    "cores_per_gpu",
    "energy_efficiency",
    "latency_histogram",
    "mfu_bars",
    "precision_throughput",
    "reliability",
    "step_breakdown",
    "training_time",
    "cache_bandwidth_sweep",
    "call_time_vs_size",
    "matrix_unit_speedup",
    "generation_growth",
    "grouped_bars",
    "nvlink_domains",
    "simt_efficiency_bars",
    "systolic_wavefront",
    "thread_block_map",
    "torus_hop_distribution",
    "copy_bandwidth",
    "link_ladder",
    "numa_layout",
    "ping_pong",
    "ring_time_by_link",
    "topology_matrices",
    "algorithm_times",
    "busbw_factor_curves",
    "collective_buffers",
    "collective_fits",
    "time_comparison_bars",
    "bucket_counts",
    "bucket_timeline",
    "loss_agreement",
    "sampler_orders",
    "scaling_with_model",
    "step_time_breakdown",
    "activation_memory_vs_tp",
    "allreduce_counts",
    "collective_time_fit",
    "step_time_parts",
    "tp_layer_times",
    "tp_sharding",
    "aux_loss_vs_skew",
    "all_to_all_matrix",
    "expert_load",
    "parallel_layout",
    "scaling_against_model",
    "comm_vs_compute",
    "step_timeline",
    "fp8_scale_sweep",
    "overlap_timeline",
    "recompute_tradeoff",
    "checkpoint_bytes_per_rank",
    "checkpoint_waste",
    "restart_losses",
]
