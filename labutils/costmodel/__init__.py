"""Modelling: collective time, communication per strategy, ZeRO memory, MFU, rooflines, schedules, strategies.

Units everywhere: bytes, seconds, FLOP/s; GB = 1e9 bytes, GB/s = 1e9 B/s.

Quick use from a notebook::

    from labutils import costmodel as cm
    cm.collective_time("all_reduce", "ring", 1e9, 8, alpha=5e-6, beta=1 / 450e9)  # seconds
    cm.comm_volume("tp", layers=96, hidden=12288, seq_len=2048, micro_batch_size=1, tp_size=8)
    cm.zero_memory_table(7.5e9, 64)           # DDP and ZeRO stages 1-3, bytes per GPU
    cm.fit_alpha_beta(sizes, times, world_size=4)   # alpha (s) and beta (s/B) from measurements
    cm.expert_capacity(tokens=4096, num_experts=8, top_k=2, capacity_factor=1.25)  # tokens per expert

One module per concern, every name re-exported here:

- ``collectives``: alpha-beta(-gamma) time of one collective per algorithm, bytes per rank
  (MPICH: Thakur, Rabenseifner, Gropp, IJHPCA 2005; files named per formula);
- ``volumes``: communication of one training step per strategy, per device (Megatron-LM
  tensor parallelism arXiv:1909.08053, pipeline schedules arXiv:2104.04473);
- ``zero``: ZeRO memory and communication per stage (arXiv:1910.02054);
- ``utilisation``: model FLOPs per token, MFU (PaLM, arXiv:2204.02311, appendix B),
  scaling efficiency;
- ``fit``: alpha and beta fitted to measured times;
- ``comm_bound``: where each strategy becomes communication-bound (compute against
  alpha-beta communication time; Austin et al., "How to Scale Your Model", 2025);
- ``ddp_buckets``: the gradient buckets DDP forms from the parameters' sizes (torch's
  ``_compute_bucket_assignment_by_size``), so the all-reduces a DDP step makes;
- ``moe``: expert capacity and the load-balancing loss (Switch Transformer,
  arXiv:2101.03961; Megatron-LM moe_utils.py).

Modules of their own, imported by name (``from labutils.costmodel import roofline``):

- ``roofline``: device peaks from datasheets (sourced) and the arithmetic intensity of common ops;
- ``schedules``: pipeline schedules (naive, GPipe, 1F1B, interleaved 1F1B) and their simulated timelines;
- ``strategy``: a parallel layout (TP x PP x DP, ZeRO stage) suggested for a model on a cluster;
- ``fsdp_overlap``: FSDP's prefetching and hybrid sharding as timelines under the alpha-beta model.

``_checks`` holds the argument checks the models share (one clear ``ValueError`` per bad input).
"""
from labutils.costmodel._checks import GB
from labutils.costmodel.collectives import COLLECTIVE_ALGORITHMS, collective_time, ring_bytes_per_rank
from labutils.costmodel.comm_bound import (
    CrossoverCurve,
    StepCosts,
    crossover_curve,
    crossover_tokens,
    dp_step_costs,
    ep_min_expert_hidden,
    ep_step_costs,
    fsdp_step_costs,
    pp_step_costs,
    tp_step_costs,
    tp_min_hidden,
)
from labutils.costmodel.ddp_buckets import ddp_bucket_caps, ddp_bucket_sizes
from labutils.costmodel.fit import FIT_WEIGHTINGS, AlphaBetaFit, fit_alpha_beta
from labutils.costmodel.moe import expert_capacity, load_balancing_loss
from labutils.costmodel.utilisation import mfu, model_flops_per_token, scaling_efficiency
from labutils.costmodel.volumes import STRATEGIES, CommVolume, comm_volume
from labutils.costmodel.zero import ZeroMemory, zero_comm_bytes, zero_memory, zero_memory_table

__all__ = [
    "GB",
    "COLLECTIVE_ALGORITHMS",
    "collective_time",
    "ring_bytes_per_rank",
    "STRATEGIES",
    "CommVolume",
    "comm_volume",
    "ZeroMemory",
    "zero_memory",
    "zero_memory_table",
    "zero_comm_bytes",
    "model_flops_per_token",
    "mfu",
    "scaling_efficiency",
    "FIT_WEIGHTINGS",
    "AlphaBetaFit",
    "fit_alpha_beta",
    "ddp_bucket_caps",
    "ddp_bucket_sizes",
    "expert_capacity",
    "load_balancing_loss",
    "StepCosts",
    "CrossoverCurve",
    "crossover_curve",
    "crossover_tokens",
    "dp_step_costs",
    "fsdp_step_costs",
    "tp_step_costs",
    "pp_step_costs",
    "ep_step_costs",
    "tp_min_hidden",
    "ep_min_expert_hidden",
]
