"""FSDP's overlap engineering under the alpha-beta model: prefetching and hybrid sharding.

PyTorch FSDP (Zhao et al., arXiv:2304.11277) hides the parameter all-gathers
behind compute: while layer i computes, layer i+1's all-gather is already on the wire
(forward prefetch), and in backward the next layer's all-gather is issued *before* the
current layer's reduce-scatter (backward prefetch), so it does not queue behind it. Hybrid
sharding (HSDP) shards within a node and replicates across nodes: the
three per-layer collectives stay on the fast intra-node links and only a gradient
all-reduce of one shard crosses the network.

    from labutils.costmodel import fsdp_overlap as fo
    plan = fo.layer_times(num_params=7e9, layers=32, tokens=4096, flops_per_s=0.5 * 989e12,
                          gather_Bps=50e9, world_size=32)     # seconds per layer
    fo.simulate_step(plan, prefetch=True).exposed_comm_s
    fo.sharding_comparison(7e9, nodes=4, gpus_per_node=8, intra_Bps=450e9, inter_Bps=50e9)

Every time is in seconds, every bandwidth in bytes per second per direction.
"""
from __future__ import annotations

from dataclasses import dataclass

from labutils.costmodel import collective_time, zero_memory


@dataclass
class LayerTimes:
    """One FSDP unit (a layer): seconds of forward compute, all-gather, reduce-scatter."""

    layers: int
    forward_s: float
    gather_s: float
    reduce_scatter_s: float
    backward_factor: float = 2.0   # backward computes about twice the forward's FLOPs


@dataclass
class Interval:
    resource: str     # "compute" or "comm" (all-gathers and reduce-scatters share the link)
    name: str         # e.g. "F3", "AG3", "B3", "RS3"
    start_s: float
    end_s: float


@dataclass
class StepTimeline:
    intervals: list[Interval]
    total_s: float
    compute_s: float

    @property
    def exposed_comm_s(self) -> float:
        """Seconds of the step in which the compute waits for communication."""
        return self.total_s - self.compute_s


def layer_times(num_params: float, layers: int, tokens: int, flops_per_s: float, gather_Bps: float,
                world_size: int, bytes_per_value: int = 2, alpha_s: float = 0.0) -> LayerTimes:
    """Per-layer seconds for a model of ``num_params`` in ``layers`` equal FSDP units.

    Forward FLOPs 2 x params per token (``tokens`` per rank per step) at ``flops_per_s``;
    all-gather and reduce-scatter of a layer's ``bytes_per_value``-byte parameters over a
    ring of ``world_size`` ranks at ``gather_Bps`` per direction (latency ``alpha_s``).
    """
    for name, value in (("num_params", num_params), ("layers", layers), ("tokens", tokens),
                        ("flops_per_s", flops_per_s), ("gather_Bps", gather_Bps), ("world_size", world_size)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    layer_bytes = num_params / layers * bytes_per_value
    ring = dict(world_size=world_size, alpha=alpha_s, beta=1 / gather_Bps)
    return LayerTimes(layers, 2 * num_params / layers * tokens / flops_per_s,
                      collective_time("all_gather", "ring", layer_bytes, **ring),
                      collective_time("reduce_scatter", "ring", layer_bytes, **ring))


def _schedule(ops: list[tuple[str, str, float, list[str]]]) -> list[Interval]:
    """Run (resource, name, seconds, dependencies) in list order, one op at a time per resource.

    A dependency that names no op of the step (the layer before the first, "F-1") is met.
    """
    free = {"compute": 0.0, "comm": 0.0}
    ends: dict[str, float] = {}
    intervals = []
    for resource, name, seconds, deps in ops:
        start = max([free[resource]] + [ends[dep] for dep in deps if dep in ends])
        ends[name] = free[resource] = start + seconds
        intervals.append(Interval(resource, name, start, start + seconds))
    return intervals


def _step_ops(t: LayerTimes, prefetch: bool) -> list[tuple[str, str, float, list[str]]]:
    """The ops of one forward + backward in the order FSDP issues them (reshard after forward).

    Without prefetch an all-gather is issued when its layer is about to run; with prefetch
    one layer ahead (forward: when the previous layer starts; backward: before the current
    layer's reduce-scatter).
    """
    L = t.layers
    ops = []
    for i in range(L):
        if i == 0 or not prefetch:
            ops.append(("comm", f"AG{i}", t.gather_s, [f"F{i - 1}"]))
        if prefetch and i + 1 < L:
            ops.append(("comm", f"AG{i + 1}", t.gather_s, [f"F{i - 1}"]))
        ops.append(("compute", f"F{i}", t.forward_s, [f"AG{i}"]))
    backward = t.forward_s * t.backward_factor
    for j in reversed(range(L)):
        if j == L - 1 or not prefetch:
            ops.append(("comm", f"AG'{j}", t.gather_s, [f"F{L - 1}", f"B{j + 1}"]))
        if prefetch and j >= 1:
            ops.append(("comm", f"AG'{j - 1}", t.gather_s, [f"F{L - 1}", f"B{j + 1}"]))
        ops.append(("compute", f"B{j}", backward, [f"AG'{j}"]))
        ops.append(("comm", f"RS{j}", t.reduce_scatter_s, [f"B{j}"]))
    return ops


def simulate_step(times: LayerTimes, prefetch: bool) -> StepTimeline:
    """Timeline of one FSDP forward + backward with or without prefetching.

    Compute runs one op at a time, so does the link (all-gathers and reduce-scatters share
    its bandwidth); an op starts when its resource is free and its inputs are ready. The
    step ends when the last reduce-scatter does.
    """
    intervals = _schedule(_step_ops(times, prefetch))
    compute = sum(i.end_s - i.start_s for i in intervals if i.resource == "compute")
    return StepTimeline(intervals, max(i.end_s for i in intervals), compute)


@dataclass
class ShardingPlan:
    """Per-step communication seconds and model-state bytes per GPU of one sharding layout."""

    name: str
    shard_group: int          # ranks a parameter is sharded over
    intra_node_s: float       # the collectives on the intra-node links
    inter_node_s: float       # the collectives crossing nodes
    state_bytes_per_gpu: float

    @property
    def comm_s(self) -> float:
        return self.intra_node_s + self.inter_node_s


def sharding_comparison(num_params: float, nodes: int, gpus_per_node: int, intra_Bps: float,
                        inter_Bps: float, bytes_per_value: int = 2) -> list[ShardingPlan]:
    """FSDP full sharding over every GPU against HSDP (shard in a node, replicate across).

    Full sharding: all-gather (forward), all-gather (backward), reduce-scatter of all the
    parameters over nodes x gpus_per_node ranks; the ring crosses nodes, so each GPU's
    share of the network (``inter_Bps``) sets its pace. HSDP: the same three collectives
    within a node at ``intra_Bps``, then a ring all-reduce of each GPU's gradient shard
    (1/gpus_per_node of them) across the ``nodes`` replicas. Latency is left out; memory is
    mixed-precision Adam's 16 bytes per parameter divided by the shard group
    (``costmodel.zero_memory``, stage 3).
    """
    if nodes < 2 or gpus_per_node < 1:
        raise ValueError(f"compare across 2 or more nodes of 1 or more GPUs; got {nodes} x {gpus_per_node}")
    world, size = nodes * gpus_per_node, num_params * bytes_per_value
    full = sum(collective_time(op, "ring", size, world, 0.0, 1 / inter_Bps)
               for op in ("all_gather", "all_gather", "reduce_scatter"))
    within = sum(collective_time(op, "ring", size, gpus_per_node, 0.0, 1 / intra_Bps)
                 for op in ("all_gather", "all_gather", "reduce_scatter"))
    across = collective_time("all_reduce", "ring", size / gpus_per_node, nodes, 0.0, 1 / inter_Bps)
    return [ShardingPlan("FSDP, full sharding", world, 0.0, full, zero_memory(num_params, world, 3).total),
            ShardingPlan("HSDP, shard in node", gpus_per_node, within, across,
                         zero_memory(num_params, gpus_per_node, 3).total)]
