"""Communication volume of one training step, per strategy (DP, FSDP, TP, PP), per device.

Volumes are per device, not summed over devices: the step time is set by what one device
has to push through its own link (its link is full duplex, so what it receives does not
add). ``CommVolume.total_bytes_per_step`` is the sum over the group, which matters for
switch capacity only.

Worked example, GPT-3 175B (arXiv:2005.14165, table 2.1: 96 layers, h = 12288, s = 2048),
fp16 on the wire, as ``tests/test_costmodel.py`` checks it:

* DP 700 GB and FSDP 1050 GB per device: the d -> infinity limits of 2(d-1)/d and
  3(d-1)/d x 350 GB (699.3 GB and 1049.0 GB at d = 1024).
* TP, one microbatch of B = 32 sequences on one TP group holding all 96 layers: 4L = 384
  all-reduces of B s h = 32 x 2048 x 12288 values = 1.61 GB each; a ring moves 2(t-1)/t of
  that, 1237 GB per device as t -> infinity, 1082 GB at t = 8. (The often quoted 1228.8 GB
  rounds B s h to 0.8e9.)
* PP with m = 32 microbatches of one sequence on p = 8 stages: 2m(p-1) = 448 messages of
  s h = 2048 x 12288 values (50.3 MB), 22.5 GB sent by the whole pipeline; an interior stage
  sends only 2m s h x 2 bytes = 3.2 GB. (The often quoted 45 GB counts the pipeline's bytes
  at the sender and again at the receiver: it is neither per device nor what the links carry
  per direction.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from labutils.costmodel._checks import GB, check_divisible, check_nonnegative, check_positive_int, choice_error
from labutils.costmodel.collectives import ring_bytes_per_rank


@dataclass(frozen=True)
class CommVolume:
    """Communication of one training step, seen from one device.

    ``bytes_per_step``: bytes one device sends per step (it receives as many; links are
    full duplex, so this sets the time). For PP it is an interior stage, the busiest.
    ``calls_per_step``: collectives (or, for PP, sends) one device makes per step.
    ``group_calls_per_step``: distinct collectives / messages in its whole group per step
    (equal to ``calls_per_step`` for collectives, where every rank takes part in each;
    for PP every stage-to-stage message counted once).
    ``total_bytes_per_step``: bytes sent summed over every device of the group
    (switch capacity, not step time).
    ``message_bytes``: the buffer of one call (bytes); ``op``: the collective or "send";
    ``group_size``: ranks in the group; ``formula``: how bytes_per_step was computed;
    ``assumptions``: what the numbers take for granted.
    """

    strategy: str
    bytes_per_step: float
    calls_per_step: int
    formula: str
    assumptions: list[str] = field(default_factory=list)
    op: str = ""
    message_bytes: float = 0.0
    group_size: int = 1
    group_calls_per_step: int = 0
    total_bytes_per_step: float = 0.0

    def time_s(self, bandwidth_GBps: float, latency_s: float = 0.0) -> float:
        """Seconds of communication per step if nothing overlaps with compute.

        ``bandwidth_GBps``: one device's link bandwidth per direction (GB/s = 1e9 B/s; compare
        with busbw, never with a bidirectional figure); ``latency_s``: seconds per call.
        """
        if not bandwidth_GBps > 0:
            raise ValueError(f"bandwidth_GBps must be > 0, got {bandwidth_GBps!r}")
        check_nonnegative(latency_s=latency_s)
        return self.calls_per_step * latency_s + self.bytes_per_step / (bandwidth_GBps * GB)


class StepShape(NamedTuple):
    """The arguments of :func:`comm_volume`, validated; t, p, d, m as whole numbers."""

    params: float | None
    layers: int | None
    hidden: int | None
    seq_len: int | None
    micro_batch_size: int | None
    m: int
    t: int
    p: int
    d: int
    bytes_per_value: int
    sequence_parallel: bool
    ddp_bucket_bytes: float | None


def _require(strategy: str, shape: StepShape, *names: str) -> None:
    """ValueError naming the arguments ``strategy`` needs that were left as None."""
    missing = [name for name in names if getattr(shape, name) is None]
    if missing:
        raise ValueError(f"comm_volume({strategy!r}) needs {', '.join(missing)}")


def _calls_in_group(calls: int, group_size: int) -> int:
    """``calls``, or 0 when the group is one rank: a collective among one rank moves nothing."""
    return calls if group_size > 1 else 0


def _model_shard(strategy: str, s: StepShape) -> tuple[float, float, str]:
    """(parameters, bytes) of this device's 1/(t p) of the model, and a phrase saying so."""
    _require(strategy, s, "params")
    if not s.params > 0:
        raise ValueError(f"params must be > 0, got {s.params!r}")
    shard_params = float(s.params) / (s.t * s.p)
    where = "" if s.t * s.p == 1 else f" (this device's 1/(t p) = 1/{s.t * s.p} of the model)"
    return shard_params, shard_params * s.bytes_per_value, where


def _layers_per_stage(strategy: str, s: StepShape) -> int:
    _require(strategy, s, "layers")
    check_positive_int(layers=s.layers)
    check_divisible(s.layers, s.p, "layers", "pp_size")
    return s.layers // s.p


def _activation_bytes(strategy: str, s: StepShape) -> float:
    """Bytes of one microbatch's activations b x s x h at one layer boundary."""
    _require(strategy, s, "hidden", "seq_len", "micro_batch_size")
    check_positive_int(hidden=s.hidden, seq_len=s.seq_len, micro_batch_size=s.micro_batch_size)
    return float(s.micro_batch_size) * s.seq_len * s.hidden * s.bytes_per_value


def _collective_volume(strategy: str, op: str, group_size: int, per_device: float, calls: int,
                       message_bytes: float, formula: str, assumptions: list[str]) -> CommVolume:
    """The volume of ``calls`` collectives ``op`` per step, each of ``message_bytes`` bytes, in which
    every one of the ``group_size`` ranks takes part and sends ``per_device`` bytes per step: the
    group makes as many calls as one device, and sends ``group_size`` times its bytes."""
    return CommVolume(strategy=strategy, bytes_per_step=per_device, calls_per_step=calls, formula=formula,
                      assumptions=assumptions, op=op, message_bytes=message_bytes, group_size=group_size,
                      group_calls_per_step=calls, total_bytes_per_step=per_device * group_size)


def _dp_volume(s: StepShape) -> CommVolume:
    """One ring all-reduce of the gradients: 2(d-1)/d x params/(t p) x bytes."""
    shard_params, shard_bytes, where = _model_shard("dp", s)
    d = s.d
    per_device = ring_bytes_per_rank("all_reduce", shard_bytes, d)
    if s.ddp_bucket_bytes is None:
        calls = 1
        bucket_note = ("one all-reduce over all gradients (DDP actually splits them into buckets, "
                       "25 MiB by default: pass ddp_bucket_bytes)")
    else:
        if not s.ddp_bucket_bytes > 0:
            raise ValueError(f"ddp_bucket_bytes must be > 0, got {s.ddp_bucket_bytes!r}")
        calls = math.ceil(shard_bytes / s.ddp_bucket_bytes)
        bucket_note = (f"gradients all-reduced in ceil(G/C) buckets of {s.ddp_bucket_bytes:.4g} bytes "
                       "(DDP puts whole parameters in a bucket and closes it at or above the cap: "
                       "ddp_bucket_sizes gives its exact buckets from the parameters' sizes)")
    message = shard_bytes / calls
    calls = _calls_in_group(calls, d)
    return _collective_volume(
        "dp", "all_reduce", d, per_device, calls, message,
        formula=f"2(d-1)/d x params/(t p) x bytes = 2 x {d - 1}/{d} x {shard_params:.4g} x {s.bytes_per_value}",
        assumptions=[
            f"ring all-reduce of the gradients{where} over d = {d} data-parallel ranks",
            bucket_note,
            "gradient accumulation over microbatches without sync (no_sync): one all-reduce per step",
            f"gradients are {s.bytes_per_value} bytes per value on the wire",
        ],
    )


def _fsdp_volume(s: StepShape) -> CommVolume:
    """ZeRO-3: all-gather in forward and backward, reduce-scatter: 3(d-1)/d x params/(t p) x bytes x m."""
    shard_params, shard_bytes, where = _model_shard("fsdp", s)
    local_layers = _layers_per_stage("fsdp", s)
    d, m = s.d, s.m
    per_device = 3 * ring_bytes_per_rank("all_gather", shard_bytes, d) * m
    calls = _calls_in_group(3 * local_layers * m, d)
    return _collective_volume(
        "fsdp", "all_gather+reduce_scatter", d, per_device, calls, shard_bytes / local_layers,
        formula=(f"3(d-1)/d x params/(t p) x bytes x m = 3 x {d - 1}/{d} x {shard_params:.4g}"
                 f" x {s.bytes_per_value} x {m}"),
        assumptions=[
            f"ZeRO-3 / FSDP full shard{where} over d = {d} data-parallel ranks",
            "parameters all-gathered in forward, again in backward (reshard_after_forward=True), "
            "gradients reduce-scattered",
            f"one FSDP unit per layer: {local_layers} layers x 3 collectives x {m} microbatch(es)",
            "every microbatch gathers and reduce-scatters (no gradient accumulation without sync)",
            "ZeRO stages 1 and 2 move 2 x params x bytes like DDP; only stage 3 moves 3x (1.5x DDP)",
        ],
    )


def _tp_volume(s: StepShape) -> CommVolume:
    """Megatron TP: 4 all-reduces of b s h values per layer and microbatch."""
    activation_bytes = _activation_bytes("tp", s)
    local_layers = _layers_per_stage("tp", s)
    t, m = s.t, s.m
    all_reduces = _calls_in_group(4 * local_layers * m, t)
    per_device = all_reduces * ring_bytes_per_rank("all_reduce", activation_bytes, t)
    calls = 2 * all_reduces if s.sequence_parallel else all_reduces
    pattern = ("each all-reduce split into an all-gather and a reduce-scatter (sequence parallelism): "
               "same bytes, twice the calls" if s.sequence_parallel
               else "no sequence parallelism: plain all-reduces")
    return _collective_volume(
        "tp", "reduce_scatter+all_gather" if s.sequence_parallel else "all_reduce", t, per_device, calls,
        activation_bytes,
        formula=(f"4 x layers/p x m x 2(t-1)/t x b s h x bytes = 4 x {local_layers} x {m} x 2 x {t - 1}/{t}"
                 f" x {s.micro_batch_size} x {s.seq_len} x {s.hidden} x {s.bytes_per_value}"),
        assumptions=[
            "Megatron pattern: column- then row-parallel in attention and MLP, "
            "2 all-reduces forward + 2 backward per layer",
            f"{local_layers} layers on this device's pipeline stage, {m} microbatch(es) of "
            f"{s.micro_batch_size} sequence(s) per step",
            f"ring all-reduce over t = {t} tensor-parallel ranks; activations {s.bytes_per_value} bytes per value",
            pattern,
            "the embedding and the output layer's communication are left out",
        ],
    )


def _pp_volume(s: StepShape) -> CommVolume:
    """Point to point between stages: an interior stage sends 2m messages of b s h values."""
    activation_bytes = _activation_bytes("pp", s)
    p, m = s.p, s.m
    sends = 2 * m if p > 1 else 0
    return CommVolume(
        strategy="pp",
        bytes_per_step=sends * activation_bytes,
        calls_per_step=sends,
        formula=(f"2 m b s h x bytes = 2 x {m} x {s.micro_batch_size} x {s.seq_len} x {s.hidden}"
                 f" x {s.bytes_per_value} (interior stage)"),
        assumptions=[
            "point-to-point: activations to the next stage in forward, their gradients to the previous stage in backward",
            f"an interior stage (the busiest) of p = {p}; the first and last stages send half as much",
            f"the whole pipeline sends 2m(p-1) = {2 * m * (p - 1)} messages per step",
            "no interleaving (v chunks multiply the messages by v), no scatter-gather optimisation across TP ranks",
        ],
        op="send",
        message_bytes=activation_bytes,
        group_size=p,
        group_calls_per_step=2 * m * (p - 1),
        total_bytes_per_step=2 * m * (p - 1) * activation_bytes,
    )


#: strategy -> the function computing its volume from a :class:`StepShape`
VOLUME_BY_STRATEGY = {"dp": _dp_volume, "fsdp": _fsdp_volume, "tp": _tp_volume, "pp": _pp_volume}
STRATEGIES = tuple(VOLUME_BY_STRATEGY)


def comm_volume(
    strategy: str,
    *,
    params: float | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    seq_len: int | None = None,
    micro_batch_size: int | None = None,
    num_microbatches: int = 1,
    tp_size: int = 1,
    pp_size: int = 1,
    dp_size: int = 1,
    bytes_per_value: int = 2,
    sequence_parallel: bool = False,
    ddp_bucket_bytes: float | None = None,
) -> CommVolume:
    """Per-device communication of one training step for ``strategy`` in {dp, fsdp, tp, pp}.

    The layout is ``tp_size x pp_size x dp_size`` devices; each strategy reports the traffic
    of its own dimension (so a 3-D layout's total is the sum of the three).
    ``params`` parameter count of the whole model; ``layers`` transformer layers;
    ``hidden`` model width h; ``seq_len`` s tokens per sequence; ``micro_batch_size`` b
    sequences per microbatch; ``num_microbatches`` m per step; ``bytes_per_value`` of
    gradients, parameters and activations on the wire (2 for fp16/bf16).

    * dp: one ring all-reduce of the gradients, 2(d-1)/d x (params / (t p)) x bytes
      (2 x params x bytes as d -> infinity).
    * fsdp (ZeRO-3): per microbatch, all-gather the parameters in forward and again in
      backward, reduce-scatter the gradients: 3(d-1)/d x (params / (t p)) x bytes x m;
      one FSDP unit per layer, so 3 x layers/p x m calls.
    * tp (Megatron, arXiv:1909.08053): 2 all-reduces forward + 2 backward per layer, each of
      b x s x h values: 4 x (layers/p) x m calls of 2(t-1)/t x b s h x bytes. With
      ``sequence_parallel`` each all-reduce becomes an all-gather + a reduce-scatter
      (arXiv:2205.05198): twice the calls, same bytes.
    * pp: activations forward and their gradients backward between neighbouring stages,
      one message of b x s x h values each. An interior stage sends 2m messages
      (2 m b s h x bytes); the pipeline as a whole sends 2m(p-1) messages.

    A dimension of size 1 (d, t or p = 1) communicates nothing: 0 bytes in 0 calls. The
    module docstring works the numbers out for GPT-3.
    """
    if strategy not in VOLUME_BY_STRATEGY:
        raise choice_error("strategy", strategy, STRATEGIES)
    check_positive_int(num_microbatches=num_microbatches, tp_size=tp_size,
                       pp_size=pp_size, dp_size=dp_size, bytes_per_value=bytes_per_value)
    shape = StepShape(params, layers, hidden, seq_len, micro_batch_size, int(num_microbatches),
                      int(tp_size), int(pp_size), int(dp_size), bytes_per_value, sequence_parallel,
                      ddp_bucket_bytes)
    return VOLUME_BY_STRATEGY[strategy](shape)
