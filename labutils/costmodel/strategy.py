"""Suggest a parallel layout (TP x PP x DP, ZeRO stage) for a model on a cluster.

The usual decision guide for large-model training, made concrete. It follows Megatron-LM's
recommendations (Narayanan et al., arXiv:2104.04473, sections 3.3-3.4, takeaways 1 and 2: tensor parallelism up to
the GPUs of one NVLink node, pipeline parallelism across nodes, data parallelism on the
rest) and ZeRO's stages (arXiv:1910.02054):

1. The model fits one GPU: data parallelism on every GPU, nothing else.
2. It does not: ZeRO stage 1, then 2, over the data-parallel GPUs. They shard the
   optimizer states and gradients and move the same 2 Psi per step as DDP.
3. Still short: tensor parallelism, only inside one NVLink domain (at most
   ``gpus_per_node`` GPUs, a power of two dividing the heads): its 4 all-reduces per layer
   need NVLink; over PCIe it is not used.
4. Still short with TP at its largest: pipeline parallelism (across nodes when the job
   has several): only activations cross, point to point.
5. Still short: ZeRO stage 3 (FSDP full shard), which moves 1.5x the data of DDP.

Data parallelism takes every GPU left over. Memory per GPU counts the model states
(mixed-precision Adam, 16 bytes per parameter before sharding, arXiv:1910.02054) and, when
``layers``, ``hidden`` and ``heads`` are given, the activations (arXiv:2205.05198, no
recomputation): ``layers`` x s b h (10 + 24/t + 5 a s / (h t)) bytes, the first stage of a
1F1B pipeline holding p microbatches of its layers/p layers.

    from labutils.costmodel.roofline import DEVICES
    from labutils.costmodel.strategy import suggest
    print(suggest(175e9, 1024, 8, DEVICES["h100"].memory_bytes, layers=96, hidden=12288, heads=96))
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labutils.costmodel import GB, ring_bytes_per_rank, zero_memory

INTRA_NODE_LINKS = ("nvlink", "pcie")


@dataclass(frozen=True)
class Suggestion:
    """A layout: ``tp`` x ``pp`` x ``dp`` GPUs and a ZeRO stage (0 = plain DDP).

    ``memory_per_gpu_bytes``: the estimate for the busiest GPU (bytes); ``fits``: whether
    it is within the usable memory; ``reasons``: each decision in plain words.
    """

    tp: int
    pp: int
    dp: int
    zero_stage: int
    reasons: list[str] = field(default_factory=list)
    memory_per_gpu_bytes: float = 0.0
    fits: bool = True

    def __str__(self) -> str:
        head = (f"TP={self.tp} x PP={self.pp} x DP={self.dp}, ZeRO stage {self.zero_stage}: "
                f"{self.memory_per_gpu_bytes / GB:.1f} GB per GPU ({'fits' if self.fits else 'does NOT fit'})")
        return "\n".join([head] + [f"  - {reason}" for reason in self.reasons])


def activation_bytes_per_layer(seq_len: int, micro_batch_size: int, hidden: int, heads: int, tp: int = 1) -> float:
    """Activation bytes one transformer layer stores for backward (arXiv:2205.05198, 16-bit).

    s b h (34 + 5 a s / h) without parallelism; s b h (10 + 24/t + 5 a s / (h t)) with
    tensor parallelism of t (no sequence parallelism, no recomputation).
    """
    s, b, h, a, t = seq_len, micro_batch_size, hidden, heads, tp
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def suggest(
    num_params: float,
    num_gpus: int,
    gpus_per_node: int,
    gpu_memory_bytes: float,
    intra_node: str = "nvlink",
    inter_node_GBps: float = 25.0,
    seq_len: int = 2048,
    micro_batch_size: int = 1,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    optimizer_bytes_per_param: float = 12,
    usable_memory_fraction: float = 1.0,
) -> Suggestion:
    """Suggest TP, PP, DP and a ZeRO stage following the decision guide in the module docstring.

    ``num_params`` parameters; ``num_gpus`` in all, ``gpus_per_node`` per node (one NVLink
    domain when ``intra_node`` is "nvlink"); ``gpu_memory_bytes`` per GPU;
    ``inter_node_GBps`` one GPU's share of the inter-node network per direction (GB/s;
    InfiniBand HDR is 200 Gb/s = 25 GB/s per port); ``seq_len``, ``micro_batch_size``,
    ``layers``, ``hidden``, ``heads`` size the activations (left out if any of the last three
    is None); ``usable_memory_fraction`` of the GPU memory the estimate may fill (the CUDA
    context, communication buffers and fragmentation take the rest).
    """
    _validate(num_params, num_gpus, gpus_per_node, gpu_memory_bytes, intra_node, inter_node_GBps,
              seq_len, micro_batch_size, layers, hidden, heads, usable_memory_fraction)
    node = min(gpus_per_node, num_gpus)
    budget = gpu_memory_bytes * usable_memory_fraction
    with_activations = None not in (layers, hidden, heads)

    def memory(tp: int, pp: int, zero: int) -> float:
        states = zero_memory(num_params / (tp * pp), num_gpus // (tp * pp), zero,
                             optimizer_bytes_per_param=optimizer_bytes_per_param).total
        if not with_activations:
            return states
        return states + layers * activation_bytes_per_layer(seq_len, micro_batch_size, hidden, heads, tp)

    tp_options = [1]
    if intra_node == "nvlink":
        tp_options += [t for t in _powers_of_two_upto(node)[1:]
                       if node % t == 0 and (heads is None or heads % t == 0)]
    pp_options = [p for p in _divisors(num_gpus // tp_options[-1]) if layers is None or layers % p == 0]

    candidates = [(1, 1)] + [(t, 1) for t in tp_options[1:]] + [(tp_options[-1], p) for p in pp_options[1:]]
    tp, pp, zero = _choose_layout(candidates, memory, budget)
    dp = num_gpus // (tp * pp)
    used = memory(tp, pp, zero)

    reasons = _reasons(num_params, num_gpus, node, gpu_memory_bytes, budget, intra_node, inter_node_GBps,
                       tp, pp, dp, zero, memory, with_activations, tp_options, layers)
    return Suggestion(tp, pp, dp, zero, reasons, used, used <= budget)


def _choose_layout(candidates: list[tuple[int, int]], memory, budget: float) -> tuple[int, int, int]:
    """(tp, pp, ZeRO stage): the guide's first layout that fits ``budget`` bytes per GPU.

    ``candidates`` are (tp, pp) in the guide's order, ``memory(tp, pp, zero)`` bytes per GPU.
    """
    # Steps 1-4: the first layout, in the guide's order, that fits with ZeRO 0, 1 or 2.
    for tp, pp in candidates:
        zero = next((z for z in (0, 1, 2) if memory(tp, pp, z) <= budget), None)
        if zero is not None:
            return tp, pp, zero
    # Step 5: ZeRO-3 with the least model parallelism that fits.
    chosen = next(((tp, pp, 3) for tp, pp in candidates if memory(tp, pp, 3) <= budget), None)
    if chosen is None:  # nothing fits: the smallest footprint, with the least sharding among equals
        chosen = min(((tp, pp, z) for tp, pp in candidates for z in range(4)),
                     key=lambda c: (round(memory(*c) / 1e6), c[2], c[0] * c[1]))
    return chosen


def _reasons(num_params, num_gpus, node, gpu_memory_bytes, budget, intra_node, inter_node_GBps,
             tp, pp, dp, zero, memory, with_activations, tp_options, layers) -> list[str]:
    """The decisions behind a layout, one sentence each."""
    gb = lambda nbytes: f"{nbytes / GB:.1f} GB"  # noqa: E731
    reasons = []
    what = "model states and activations" if with_activations else "model states"
    if zero == 0 and tp * pp == 1 and memory(1, 1, 0) <= budget:
        reasons.append(f"The {what} fit one GPU ({gb(memory(1, 1, 0))} of {gb(gpu_memory_bytes)}): "
                       f"plain data parallelism, one gradient all-reduce per step.")
    else:
        reasons.append(f"One GPU would need {gb(memory(1, 1, 0))} for the {what} "
                       f"(16 bytes per parameter for mixed-precision Adam), more than its {gb(budget)} usable.")
    if not with_activations:
        reasons.append("Activations are not counted: give layers, hidden and heads to include them.")
    if intra_node == "pcie":
        reasons.append("The GPUs of a node talk over PCIe: tensor parallelism (4 all-reduces per layer) "
                       "needs NVLink, so TP stays 1.")
    if tp > 1:
        reasons.append(f"Tensor parallelism of {tp} inside one node's NVLink domain ({node} GPUs): "
                       f"its per-layer all-reduces need NVLink bandwidth, so it never crosses nodes.")
    if pp > 1:
        across = "across nodes" if tp * pp > node else "inside the node"
        limit = f"TP is at its largest ({tp_options[-1]})" if tp_options[-1] > 1 else "TP is not available"
        reasons.append(f"{limit}, so pipeline parallelism of {pp} {across}: only activations "
                       f"cross between stages, point to point; use 1F1B with many microbatches (m >> {pp}) "
                       f"to keep the bubble (p-1)/(m+p-1) small.")
    if zero in (1, 2):
        sharded = "optimizer states" if zero == 1 else "optimizer states and gradients"
        reasons.append(f"ZeRO stage {zero} shards the {sharded} over the {dp} data-parallel GPUs "
                       f"at no extra communication (still 2 Psi per step, like DDP).")
    if zero == 3:
        reasons.append(f"ZeRO stage 3 (FSDP full shard) over the {dp} data-parallel GPUs also shards "
                       f"the parameters: 1.5x the communication of DDP (3 Psi per step).")
    grad_bytes = ring_bytes_per_rank("all_reduce", 2 * num_params / (tp * pp), dp) * (1.5 if zero == 3 else 1.0)
    if dp > 1:
        line = f"Data parallelism over the remaining {dp} replicas: {gb(grad_bytes)} sent per GPU per step"
        if num_gpus > node:
            line += (f", about {grad_bytes / (inter_node_GBps * GB):.2f} s at {inter_node_GBps:g} GB/s "
                     f"inter-node if nothing overlaps")
        reasons.append(line + ".")
    if memory(tp, pp, zero) > budget:
        remedies = "activation recomputation, a smaller micro-batch, " if with_activations else ""
        reasons.append(f"No layout fits; the smallest needs {gb(memory(tp, pp, zero))} per GPU: "
                       f"use more GPUs, {remedies}or CPU offload.")
    return reasons


def _powers_of_two_upto(n: int) -> list[int]:
    powers = [1]
    while powers[-1] * 2 <= n:
        powers.append(powers[-1] * 2)
    return powers


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _validate(num_params, num_gpus, gpus_per_node, gpu_memory_bytes, intra_node, inter_node_GBps,
              seq_len, micro_batch_size, layers, hidden, heads, usable_memory_fraction) -> None:
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    if not gpu_memory_bytes > 0:
        raise ValueError(f"gpu_memory_bytes must be > 0 (bytes, e.g. roofline.DEVICES['h100'].memory_bytes), got {gpu_memory_bytes!r}")
    for name, value in (("num_gpus", num_gpus), ("gpus_per_node", gpus_per_node), ("seq_len", seq_len),
                        ("micro_batch_size", micro_batch_size), ("layers", layers), ("hidden", hidden),
                        ("heads", heads)):
        if value is not None and (int(value) != value or value < 1):
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if num_gpus > gpus_per_node and num_gpus % gpus_per_node:
        raise ValueError(f"num_gpus ({num_gpus}) must be a multiple of gpus_per_node ({gpus_per_node})")
    if intra_node not in INTRA_NODE_LINKS:
        raise ValueError(f"unknown intra_node {intra_node!r}; choose one of: {', '.join(INTRA_NODE_LINKS)}")
    if not inter_node_GBps > 0:
        raise ValueError(f"inter_node_GBps must be > 0 GB/s, got {inter_node_GBps!r}")
    if not 0 < usable_memory_fraction <= 1:
        raise ValueError(f"usable_memory_fraction must be in (0, 1], got {usable_memory_fraction!r}")
