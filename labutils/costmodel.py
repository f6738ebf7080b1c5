"""Cost models: collective time, communication volume per strategy, ZeRO memory, MFU.

Units everywhere: bytes, seconds, FLOP/s; GB = 1e9 bytes, GB/s = 1e9 B/s.

Quick use from a notebook::

    from labutils import costmodel as cm
    cm.collective_time("all_reduce", "ring", 1e9, 8, alpha=5e-6, beta=1 / 450e9)  # seconds
    cm.comm_volume("tp", layers=96, hidden=12288, seq_len=2048, micro_batch_size=1, tp_size=8)
    cm.zero_memory_table(7.5e9, 64)           # DDP and ZeRO stages 1-3, bytes per GPU
    cm.fit_alpha_beta(sizes, times, world_size=4)   # alpha (s) and beta (s/B) from measurements
    cm.expert_capacity(tokens=4096, num_experts=8, top_k=2, capacity_factor=1.25)  # tokens per expert

Sources: the collective formulas are MPICH's (Thakur, Rabenseifner, Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 2005; files named per function), ZeRO
is arXiv:1910.02054, MFU is PaLM (arXiv:2204.02311, appendix B), the Megatron-LM tensor
parallel pattern is arXiv:1909.08053, the pipeline schedules arXiv:2104.04473 and the
mixture-of-experts capacity and load-balancing loss the Switch Transformer's
(arXiv:2101.03961; Megatron-LM moe_utils.py).

Volumes are per device, not summed over devices: the step time is set by what one device
has to push through its own link (seed 003, section 11). ``total_bytes_per_step`` is the
sum over the group, which matters for switch capacity only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

GB = 1e9  #: bytes in a GB (SI), as in GB/s = 1e9 B/s

#: op -> algorithms with a cost formula in :func:`collective_time`
COLLECTIVE_ALGORITHMS = {
    "all_reduce": ("ring", "recursive_doubling", "rabenseifner", "double_binary_tree"),
    "all_gather": ("ring",),
    "reduce_scatter": ("ring",),
    "broadcast": ("ring", "binomial_tree"),
    "all_to_all": ("pairwise", "ring"),
    "sendrecv": ("point_to_point",),
}


def _choice_error(what: str, value, choices) -> ValueError:
    return ValueError(f"unknown {what} {value!r}; choose one of: {', '.join(choices)}")


def _check_nonnegative(**values: float) -> None:
    for name, value in values.items():
        if value is None or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_positive_int(**values) -> None:
    for name, value in values.items():
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not is_number or value != int(value) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def collective_time(
    op: str,
    algorithm: str,
    nbytes: float,
    world_size: int,
    alpha: float,
    beta: float,
    gamma: float = 0.0,
) -> float:
    """Seconds one collective takes under the alpha-beta(-gamma) model.

    ``nbytes`` is the buffer size n in bytes (for all-gather the *output*, for
    reduce-scatter the *input*: the full tensor, as nccl-tests' size column),
    ``world_size`` p ranks, ``alpha`` the latency of one message (s), ``beta`` the time per
    byte on one link (s/B, i.e. 1 / link bandwidth in B/s), ``gamma`` the time to reduce
    one byte (s/B).

    ======================  =====================================================  ==================================
    op / algorithm          time                                                   source
    ======================  =====================================================  ==================================
    all_gather ring         (p-1) a + (p-1)/p n b                                  MPICH allgather_intra_ring.c
    reduce_scatter ring     (p-1) a + (p-1)/p n b + (p-1)/p n g                    MPICH (Thakur et al. 2005)
    all_reduce ring         2(p-1) a + 2(p-1)/p n b + (p-1)/p n g                  MPICH allreduce_intra_ring.c
    all_reduce rabenseifner 2 lg p a + 2(p-1)/p n b + (p-1)/p n g                  MPICH allreduce_intra_reduce_
                                                                                   scatter_allgather.c
    all_reduce recursive_   lg p a + n lg p b + n lg p g                           MPICH allreduce_intra_recursive_
    doubling                                                                       doubling.c
    all_reduce double_      2 lg p a + 2(p-1)/p n b + (p-1)/p n g                  APPROXIMATION of NCCL >= 2.4 trees
    binary_tree                                                                    (NVIDIA blog, NCCL 2.4)
    broadcast binomial_tree lg p (a + n b)                                         MPICH (Thakur et al. 2005)
    broadcast ring          (p-1) a + n b                                          APPROXIMATION: pipelined ring
    all_to_all pairwise     (p-1) a + (p-1)/p n b                                  MPICH alltoall_intra_pairwise.c
    (or ring)                                                                      (Thakur et al. 2005)
    sendrecv                a + n b                                                one message (Hockney's model)
    point_to_point
    ======================  =====================================================  ==================================

    For all_to_all, ``nbytes`` is one rank's send buffer (nccl-tests' size column): it
    keeps n/p for itself and sends n/p to each of the p-1 others, one partner per step.
    "ring" and "pairwise" name the same schedule here (step k: send to rank + k, receive
    from rank - k; MPICH's pairwise exchange uses rank XOR k when p is a power of two);
    it is not a store-and-forward ring, which would move more bytes. For sendrecv,
    ``nbytes`` is the message; every rank sends one to its neighbour at once (nccl-tests'
    sendrecv), so the time is that of one message. One rank alone sends nothing (0 s).

    ``lg p`` is rounded up to a whole number of steps when p is not a power of two
    (MPICH then adds a fix-up step; the formulas above are exact for powers of two only).

    The double binary tree line is an approximation, not a published formula: NVIDIA's
    blog states the trees' latency grows as O(log p) (up the tree and back down: 2 lg p
    messages) while the bandwidth stays about the ring's, which is what is written here.
    The pipelined ring broadcast is likewise the limit of many small chunks: every byte
    crosses each link once (nccl-tests' busbw factor 1 for broadcast) and the first chunk
    needs p-1 hops.

    >>> collective_time("all_reduce", "ring", 1e9, 4, alpha=0.0, beta=1e-9)  # 2*(3/4)*1 s
    1.5
    """
    if op not in COLLECTIVE_ALGORITHMS:
        raise _choice_error("op", op, COLLECTIVE_ALGORITHMS)
    if algorithm not in COLLECTIVE_ALGORITHMS[op]:
        raise _choice_error(f"algorithm for {op}", algorithm, COLLECTIVE_ALGORITHMS[op])
    _check_positive_int(world_size=world_size)
    _check_nonnegative(nbytes=nbytes, alpha=alpha, beta=beta, gamma=gamma)
    p, n = int(world_size), float(nbytes)
    share = (p - 1) / p  # the part of the buffer each rank must exchange
    steps = math.ceil(math.log2(p))  # lg p, rounded up to whole steps

    if op == "all_gather":
        return (p - 1) * alpha + share * n * beta
    if op == "reduce_scatter":
        return (p - 1) * alpha + share * n * beta + share * n * gamma
    if op == "all_to_all":
        return (p - 1) * alpha + share * n * beta
    if op == "sendrecv":
        return alpha + n * beta if p > 1 else 0.0
    if op == "broadcast":
        if algorithm == "binomial_tree":
            return steps * (alpha + n * beta)
        return (p - 1) * alpha + (n * beta if p > 1 else 0.0)
    # all_reduce
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * share * n * beta + share * n * gamma
    if algorithm == "recursive_doubling":
        return steps * alpha + n * steps * beta + n * steps * gamma
    # rabenseifner and the double-binary-tree approximation share the formula
    return 2 * steps * alpha + 2 * share * n * beta + share * n * gamma


def ring_bytes_per_rank(op: str, nbytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives as many) in a ring collective on an ``nbytes`` buffer.

    all_reduce 2(p-1)/p n (the lower bound, hence nccl-tests' busbw factor),
    all_gather, reduce_scatter and all_to_all (p-1)/p n, sendrecv n (the message).
    broadcast n: the bytes on the busiest link, which is what sets the time. In a pipelined
    ring every rank but the last forwards the whole buffer (the last sends nothing), so this
    is not what every rank sends.
    """
    if op not in COLLECTIVE_ALGORITHMS:
        raise _choice_error("op", op, COLLECTIVE_ALGORITHMS)
    _check_positive_int(world_size=world_size)
    _check_nonnegative(nbytes=nbytes)
    p = int(world_size)
    if p == 1:
        return 0.0
    factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p,
              "reduce_scatter": (p - 1) / p, "all_to_all": (p - 1) / p, "broadcast": 1.0,
              "sendrecv": 1.0}[op]
    return factor * nbytes


# --------------------------------------------------------------------------------------
# Communication volume per training step, per strategy
# --------------------------------------------------------------------------------------

STRATEGIES = ("dp", "fsdp", "tp", "pp")


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
        _check_nonnegative(latency_s=latency_s)
        return self.calls_per_step * latency_s + self.bytes_per_step / (bandwidth_GBps * GB)


def _require(strategy: str, **values) -> None:
    """ValueError naming the arguments ``strategy`` needs that were left as None."""
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise ValueError(f"comm_volume({strategy!r}) needs {', '.join(missing)}")


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
      (seed 003's "2P" is the d -> infinity limit).
    * fsdp (ZeRO-3): per microbatch, all-gather the parameters in forward and again in
      backward, reduce-scatter the gradients: 3(d-1)/d x (params / (t p)) x bytes x m;
      one FSDP unit per layer, so 3 x layers/p x m calls.
    * tp (Megatron, arXiv:1909.08053): 2 all-reduces forward + 2 backward per layer
      (4 per layer, seed 003's 4L), each of b x s x h values:
      4 x (layers/p) x m calls of 2(t-1)/t x b s h x bytes. With ``sequence_parallel``
      each all-reduce becomes an all-gather + a reduce-scatter: twice the calls, same bytes.
    * pp: activations forward and their gradients backward between neighbouring stages,
      one message of b x s x h values each. An interior stage sends 2m messages
      (2 m b s h x bytes); the pipeline as a whole sends 2m(p-1) messages (seed 003's
      2M(N-1) = 448 for M = 32, N = 8).

    A dimension of size 1 (d, t or p = 1) communicates nothing: 0 bytes in 0 calls.

    Seed 003's GPT-3 table (175e9 parameters, 96 layers, h = 12288, s = 2048, fp16)
    under these definitions (its TP and PP figures both need a batch of B = 32 sequences):

    * DP 700 GB and FSDP 1050 GB: per device, the d -> infinity limit of 2(d-1)/d and
      3(d-1)/d x 350 GB (699.3 GB and 1049.0 GB at d = 1024).
    * TP 1228 GB: per device, 4L = 384 all-reduces of B s h = 32 x 2048 x 12288 fp16
      values = 1.61 GB each, moving twice that: 384 x 2 x 1.61 GB = 1237 GB; the seed's 1228.8
      rounds B s h to 0.8e9. It is the t -> infinity limit: at t = 8 the ring moves
      2 x 7/8 of the buffer, 1082 GB. It also assumes all 96 layers on one TP group
      (no PP) and one microbatch of 32 sequences per step.
    * PP 45 GB: NOT per device. 2M(N-1) = 448 messages of (B/M) s h = 1 x 2048 x 12288
      values (50.3 MB) total 22.5 GB sent in the whole pipeline; counting each byte at the
      sender and at the receiver gives 45.1 GB (fp32 activations counted once give the
      same number; the seed says fp16 elsewhere). One interior stage sends only
      2 B s h x 2 bytes = 3.2 GB per step. So the seed compares a per-device DP figure with
      a whole-pipeline PP figure; per device, PP is smaller still.
    """
    if strategy not in STRATEGIES:
        raise _choice_error("strategy", strategy, STRATEGIES)
    _check_positive_int(num_microbatches=num_microbatches, tp_size=tp_size,
                        pp_size=pp_size, dp_size=dp_size, bytes_per_value=bytes_per_value)
    t, p, d, m = int(tp_size), int(pp_size), int(dp_size), int(num_microbatches)

    if strategy in ("dp", "fsdp"):
        _require(strategy, params=params)
        if not params > 0:
            raise ValueError(f"params must be > 0, got {params!r}")
        shard_params = float(params) / (t * p)
        shard_bytes = shard_params * bytes_per_value
        where = "" if t * p == 1 else f" (this device's 1/(t p) = 1/{t * p} of the model)"
        if strategy == "dp":
            per_device = ring_bytes_per_rank("all_reduce", shard_bytes, d)
            if ddp_bucket_bytes is None:
                calls = 1
                bucket_note = "one all-reduce over all gradients (DDP actually splits them into buckets, 25 MiB by default: pass ddp_bucket_bytes)"
            else:
                if not ddp_bucket_bytes > 0:
                    raise ValueError(f"ddp_bucket_bytes must be > 0, got {ddp_bucket_bytes!r}")
                calls = math.ceil(shard_bytes / ddp_bucket_bytes)
                bucket_note = f"gradients all-reduced in buckets of {ddp_bucket_bytes:.4g} bytes"
            message = shard_bytes / calls
            calls = _calls_in_group(calls, d)
            return CommVolume(
                strategy="dp",
                bytes_per_step=per_device,
                calls_per_step=calls,
                formula=f"2(d-1)/d x params/(t p) x bytes = 2 x {d - 1}/{d} x {shard_params:.4g} x {bytes_per_value}",
                assumptions=[
                    f"ring all-reduce of the gradients{where} over d = {d} data-parallel ranks",
                    bucket_note,
                    "gradient accumulation over microbatches without sync (no_sync): one all-reduce per step",
                    f"gradients are {bytes_per_value} bytes per value on the wire",
                ],
                op="all_reduce",
                message_bytes=message,
                group_size=d,
                group_calls_per_step=calls,
                total_bytes_per_step=per_device * d,
            )
        _require(strategy, layers=layers)
        _check_positive_int(layers=layers)
        _check_divisible(layers, p, "layers", "pp_size")
        one_pass = ring_bytes_per_rank("all_gather", shard_bytes, d)
        per_device = 3 * one_pass * m
        calls = _calls_in_group(3 * (layers // p) * m, d)
        return CommVolume(
            strategy="fsdp",
            bytes_per_step=per_device,
            calls_per_step=calls,
            formula=f"3(d-1)/d x params/(t p) x bytes x m = 3 x {d - 1}/{d} x {shard_params:.4g} x {bytes_per_value} x {m}",
            assumptions=[
                f"ZeRO-3 / FSDP full shard{where} over d = {d} data-parallel ranks",
                "parameters all-gathered in forward, again in backward (reshard_after_forward=True), gradients reduce-scattered",
                f"one FSDP unit per layer: {layers // p} layers x 3 collectives x {m} microbatch(es)",
                "every microbatch gathers and reduce-scatters (no gradient accumulation without sync)",
                "ZeRO stages 1 and 2 move 2 x params x bytes like DDP; only stage 3 moves 3x (1.5x DDP)",
            ],
            op="all_gather+reduce_scatter",
            message_bytes=shard_bytes / (layers // p),
            group_size=d,
            group_calls_per_step=calls,
            total_bytes_per_step=per_device * d,
        )

    _require(strategy, hidden=hidden, seq_len=seq_len, micro_batch_size=micro_batch_size)
    _check_positive_int(hidden=hidden, seq_len=seq_len, micro_batch_size=micro_batch_size)
    activation_bytes = float(micro_batch_size) * seq_len * hidden * bytes_per_value
    if strategy == "tp":
        _require(strategy, layers=layers)
        _check_positive_int(layers=layers)
        _check_divisible(layers, p, "layers", "pp_size")
        local_layers = layers // p
        all_reduces = _calls_in_group(4 * local_layers * m, t)
        per_device = all_reduces * ring_bytes_per_rank("all_reduce", activation_bytes, t)
        calls = 2 * all_reduces if sequence_parallel else all_reduces
        pattern = ("each all-reduce split into an all-gather and a reduce-scatter (sequence parallelism): same bytes, twice the calls"
                   if sequence_parallel else "no sequence parallelism: plain all-reduces")
        return CommVolume(
            strategy="tp",
            bytes_per_step=per_device,
            calls_per_step=calls,
            formula=(f"4 x layers/p x m x 2(t-1)/t x b s h x bytes = 4 x {local_layers} x {m} x 2 x {t - 1}/{t}"
                     f" x {micro_batch_size} x {seq_len} x {hidden} x {bytes_per_value}"),
            assumptions=[
                "Megatron pattern: column- then row-parallel in attention and MLP, 2 all-reduces forward + 2 backward per layer",
                f"{local_layers} layers on this device's pipeline stage, {m} microbatch(es) of {micro_batch_size} sequence(s) per step",
                f"ring all-reduce over t = {t} tensor-parallel ranks; activations {bytes_per_value} bytes per value",
                pattern,
                "the embedding and the output layer's communication are left out",
            ],
            op="reduce_scatter+all_gather" if sequence_parallel else "all_reduce",
            message_bytes=activation_bytes,
            group_size=t,
            group_calls_per_step=calls,
            total_bytes_per_step=per_device * t,
        )

    # pp
    sends = 2 * m if p > 1 else 0
    return CommVolume(
        strategy="pp",
        bytes_per_step=sends * activation_bytes,
        calls_per_step=sends,
        formula=f"2 m b s h x bytes = 2 x {m} x {micro_batch_size} x {seq_len} x {hidden} x {bytes_per_value} (interior stage)",
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


def _calls_in_group(calls: int, group_size: int) -> int:
    """``calls``, or 0 when the group is one rank: a collective among one rank moves nothing."""
    return calls if group_size > 1 else 0


def _check_divisible(value: int, divisor: int, value_name: str, divisor_name: str) -> None:
    if value % divisor:
        raise ValueError(f"{value_name} ({value}) must be a multiple of {divisor_name} ({divisor})")


# --------------------------------------------------------------------------------------
# ZeRO memory per GPU (arXiv:1910.02054)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZeroMemory:
    """Model-state bytes per GPU for one ZeRO stage (0 = DDP): parameters, gradients,
    optimizer states and their ``total`` (activations, buffers and fragmentation excluded)."""

    stage: int
    params: float
    grads: float
    optimizer_states: float
    total: float


def zero_memory(
    num_params: float,
    world_size: int,
    stage: int,
    optimizer_bytes_per_param: float = 12,
    param_bytes_per_param: float = 2,
    grad_bytes_per_param: float = 2,
) -> ZeroMemory:
    """Bytes per GPU of the model states under ZeRO ``stage`` over ``world_size`` (N) ranks.

    Mixed-precision Adam (arXiv:1910.02054, section 3.1): fp16 parameters 2 Psi, fp16
    gradients 2 Psi, optimizer states K Psi with K = 12 (fp32 master weights, momentum,
    variance). Stage 0 (DDP) keeps all; stage 1 shards the optimizer states (4 Psi + 12 Psi/N);
    stage 2 also the gradients (2 Psi + 14 Psi/N); stage 3 also the parameters (16 Psi/N).
    Psi = 7.5e9, N = 64 gives 120 / 31.4 / 16.6 / 1.9 GB (GB = 1e9 B).
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    _check_positive_int(world_size=world_size)
    _check_nonnegative(optimizer_bytes_per_param=optimizer_bytes_per_param,
                       param_bytes_per_param=param_bytes_per_param,
                       grad_bytes_per_param=grad_bytes_per_param)
    n = int(world_size)
    params = num_params * param_bytes_per_param / (n if stage >= 3 else 1)
    grads = num_params * grad_bytes_per_param / (n if stage >= 2 else 1)
    optimizer = num_params * optimizer_bytes_per_param / (n if stage >= 1 else 1)
    return ZeroMemory(stage, params, grads, optimizer, params + grads + optimizer)


def zero_memory_table(num_params: float, world_size: int, **bytes_per_param) -> list[ZeroMemory]:
    """:func:`zero_memory` for stages 0 (DDP), 1, 2 and 3, in that order."""
    return [zero_memory(num_params, world_size, stage, **bytes_per_param) for stage in range(4)]


def zero_comm_bytes(num_params: float, world_size: int, stage: int, bytes_per_value: int = 2) -> float:
    """Bytes one GPU sends per step under ZeRO ``stage`` (arXiv:1910.02054, section 7).

    DDP, stage 1 and stage 2: 2(N-1)/N Psi values (an all-reduce, or a reduce-scatter of
    the gradients plus an all-gather of the updated parameters); stage 3: 3(N-1)/N Psi
    (parameters gathered in forward and in backward, gradients reduce-scattered): 1.5x.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    buffer = num_params * bytes_per_value
    passes = 3 if stage == 3 else 2
    return passes * ring_bytes_per_rank("all_gather", buffer, world_size)


# --------------------------------------------------------------------------------------
# Utilisation and scaling
# --------------------------------------------------------------------------------------


def model_flops_per_token(num_params: float, layers: int, hidden: int, seq_len: int) -> float:
    """Training FLOPs per token, PaLM's 6N + 12 L H Q T (arXiv:2204.02311, appendix B).

    N parameters, L layers, H Q = ``hidden`` (heads x head dim), T = ``seq_len``. 6N is the
    matmuls' forward (2N) plus backward (4N); 12 L H Q T the attention scores and values.
    (PaLM counts the full T x T attention; Megatron today halves it for causal masks.)
    """
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    _check_positive_int(layers=layers, hidden=hidden, seq_len=seq_len)
    return 6 * num_params + 12 * layers * hidden * seq_len


def mfu(
    tokens_per_second: float,
    *,
    num_params: float,
    layers: int,
    hidden: int,
    seq_len: int,
    peak_flops: float,
    num_gpus: int = 1,
) -> float:
    """Model FLOPs utilisation: tokens/s x (6N + 12 L H Q T) / (num_gpus x peak FLOP/s).

    ``tokens_per_second`` of the whole job, ``peak_flops`` the *dense* peak of one GPU in
    the training dtype (e.g. 989e12 for H100 SXM bf16; never the sparse figure, and V100 has
    no bf16). Recomputed activations do not count: MFU uses the model's FLOPs only. Hardware
    FLOPs utilisation (HFU, arXiv:2205.05198) counts the FLOPs the GPU actually ran,
    recomputation included, so HFU >= MFU.
    """
    _check_nonnegative(tokens_per_second=tokens_per_second)
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be > 0 (dense FLOP/s of one GPU), got {peak_flops!r}")
    _check_positive_int(num_gpus=num_gpus)
    flops = tokens_per_second * model_flops_per_token(num_params, layers, hidden, seq_len)
    return flops / (num_gpus * peak_flops)


def scaling_efficiency(throughput_n: float, n: int, throughput_1: float) -> float:
    """Scaling efficiency = actual throughput on n GPUs / (n x throughput on 1 GPU).

    1.0 is linear scaling. (Seed 002 prints the ratio upside down; and Megatron's "52% at
    3072 GPUs" is a share of peak FLOP/s, MFU-like, not scaling efficiency.)
    """
    _check_nonnegative(throughput_n=throughput_n)
    _check_positive_int(n=n)
    if not throughput_1 > 0:
        raise ValueError(f"throughput_1 must be > 0, got {throughput_1!r}")
    return throughput_n / (n * throughput_1)


# --------------------------------------------------------------------------------------
# Fitting alpha and beta to measured points
# --------------------------------------------------------------------------------------


#: how :func:`fit_alpha_beta` weighs the points: errors in seconds, or relative errors (1/t^2)
FIT_WEIGHTINGS = ("absolute", "relative")


@dataclass(frozen=True)
class AlphaBetaFit:
    """A least-squares fit of the alpha-beta model to measured collective times.

    ``alpha`` seconds per message, ``beta`` seconds per byte, ``bandwidth_GBps`` = 1/beta
    in GB/s (for a ring all-reduce this is the bus bandwidth, nccl-tests' busbw), ``r2`` the
    coefficient of determination of the fit, in the ``weighting`` it was fitted with
    ("absolute": on seconds; "relative": weighted by 1/t^2, i.e. on relative errors).
    """

    alpha: float
    beta: float
    bandwidth_GBps: float
    r2: float
    op: str = "all_reduce"
    algorithm: str = "ring"
    world_size: int = 2
    weighting: str = "absolute"

    def predict(self, nbytes: float) -> float:
        """Seconds the fitted model gives for a buffer of ``nbytes`` bytes."""
        return collective_time(self.op, self.algorithm, nbytes, self.world_size, self.alpha, self.beta)


def fit_alpha_beta(
    sizes_bytes,
    times_s,
    op: str = "all_reduce",
    algorithm: str = "ring",
    *,
    world_size: int,
    weighting: str = "absolute",
) -> AlphaBetaFit:
    """Fit alpha (s) and beta (s/B) to measured (size in bytes, seconds) points.

    The model time is linear in alpha and beta, t = A alpha + B(n) beta, with A and B(n)
    taken from :func:`collective_time` for ``op``/``algorithm`` on ``world_size`` ranks
    (gamma is folded into beta). Least squares with both constrained to be >= 0.

    ``weighting``: "absolute" minimises the sum of squared errors in seconds, so the
    largest messages dominate and alpha (the small-message time) can come out far off;
    "relative" minimises the sum of squared relative errors ((fit - t) / t)^2, i.e.
    weights 1/t^2, so a 10 us error on a 20 us point counts as much as 10 ms on 20 ms:
    use it when alpha matters (a sweep from 8 B up). Every time must then be > 0.
    """
    sizes = [float(s) for s in sizes_bytes]
    times = [float(t) for t in times_s]
    if len(sizes) != len(times):
        raise ValueError(f"sizes_bytes and times_s differ in length ({len(sizes)} vs {len(times)})")
    if len(set(sizes)) < 2:
        raise ValueError("fit_alpha_beta needs at least two distinct message sizes")
    _check_positive_int(world_size=world_size)
    if world_size < 2:
        raise ValueError("fit_alpha_beta needs world_size >= 2 (one rank communicates nothing)")
    if weighting not in FIT_WEIGHTINGS:
        raise _choice_error("weighting", weighting, FIT_WEIGHTINGS)
    for s, t in zip(sizes, times):
        _check_nonnegative(size=s, time=t)
    if weighting == "relative" and min(times) <= 0:
        raise ValueError("weighting='relative' divides by each time: every time must be > 0 seconds")
    a_coef = [collective_time(op, algorithm, s, world_size, alpha=1.0, beta=0.0) for s in sizes]
    b_coef = [collective_time(op, algorithm, s, world_size, alpha=0.0, beta=1.0) for s in sizes]
    # Weighted least squares: scaling row i by sqrt(w_i) = 1/t_i minimises sum w_i (fit_i - t_i)^2.
    scale = [1.0 / t for t in times] if weighting == "relative" else [1.0] * len(times)
    alpha, beta = _nonnegative_least_squares_2([a * k for a, k in zip(a_coef, scale)],
                                               [b * k for b, k in zip(b_coef, scale)],
                                               [t * k for t, k in zip(times, scale)])
    fitted = [alpha * a + beta * b for a, b in zip(a_coef, b_coef)]
    weights = [k * k for k in scale]
    mean = sum(w * t for w, t in zip(weights, times)) / sum(weights)
    ss_tot = sum(w * (t - mean) ** 2 for w, t in zip(weights, times))
    ss_res = sum(w * (t - f) ** 2 for w, t, f in zip(weights, times, fitted))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    bandwidth = 1.0 / beta / GB if beta > 0 else math.inf
    return AlphaBetaFit(alpha, beta, bandwidth, r2, op, algorithm, int(world_size), weighting)


def _nonnegative_least_squares_2(x1: list[float], x2: list[float], y: list[float]) -> tuple[float, float]:
    """min ||c1 x1 + c2 x2 - y|| with c1, c2 >= 0 (two unknowns: try the interior, then each edge)."""
    s11 = sum(a * a for a in x1)
    s22 = sum(b * b for b in x2)
    s12 = sum(a * b for a, b in zip(x1, x2))
    s1y = sum(a * v for a, v in zip(x1, y))
    s2y = sum(b * v for b, v in zip(x2, y))
    det = s11 * s22 - s12 * s12
    if det > 0:
        c1 = (s1y * s22 - s2y * s12) / det
        c2 = (s2y * s11 - s1y * s12) / det
        if c1 >= 0 and c2 >= 0:
            return c1, c2

    def residual(c1: float, c2: float) -> float:
        return sum((c1 * a + c2 * b - v) ** 2 for a, b, v in zip(x1, x2, y))

    edges = [(max(s1y / s11, 0.0) if s11 > 0 else 0.0, 0.0),
             (0.0, max(s2y / s22, 0.0) if s22 > 0 else 0.0)]
    return min(edges, key=lambda c: residual(*c))


# --------------------------------------------------------------------------------------
# Mixture of experts (Switch Transformer, arXiv:2101.03961; Megatron-LM moe_utils.py)
# --------------------------------------------------------------------------------------


def expert_capacity(tokens: int, num_experts: int, top_k: int = 1, capacity_factor: float = 1.0) -> int:
    """Tokens one expert accepts per batch: ceil(T k / E x capacity_factor).

    ``tokens`` T routed in the batch (on this expert-parallel group), ``num_experts`` E,
    ``top_k`` k experts per token, ``capacity_factor`` the head-room over a perfectly even
    split (1.0 = exactly even; the Switch paper compares 1.0, 1.25 and 2.0). Tokens routed to an
    expert beyond its capacity are dropped: they skip the expert and only the residual
    connection carries them.

    The classic mistake is ceil(T / E x capacity_factor), forgetting k: with top-2 routing
    every token makes two assignments, so that capacity is half what the even split needs
    and about half the assignments are dropped even when routing is perfectly balanced
    (T = 4096, E = 8, k = 2, factor 1.0: 1024 per expert, not 512).

    The product is computed exactly (the factor as the decimal it prints as): 1000 tokens,
    10 experts, factor 1.1 give 110, where floating point (1000 / 10 x 1.1 =
    110.00000000000001) would round up to 111.

    >>> expert_capacity(tokens=4096, num_experts=8, top_k=2, capacity_factor=1.25)
    1280
    """
    from fractions import Fraction

    _check_positive_int(tokens=tokens, num_experts=num_experts, top_k=top_k)
    if top_k > num_experts:
        raise ValueError(f"top_k ({top_k}) cannot exceed num_experts ({num_experts}): a token picks distinct experts")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or not math.isfinite(capacity_factor) or capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be a number > 0 (e.g. 1.25), got {capacity_factor!r}")
    exact = Fraction(int(tokens) * int(top_k), int(num_experts)) * Fraction(repr(float(capacity_factor)))
    return math.ceil(exact)


def load_balancing_loss(router_probs, expert_index, alpha: float = 1e-2):
    """Switch Transformer's auxiliary load-balancing loss: alpha x E x sum_i f_i P_i (a torch scalar).

    ``router_probs``: (T, E) tensor, each row the router's softmax over the E experts.
    ``expert_index``: (T,) or (T, k) integer tensor, the expert(s) each token was sent to.
    f_i = share of the T k assignments that went to expert i; P_i = mean of column i of
    ``router_probs``. ``alpha`` = 1e-2 as in the paper (arXiv:2101.03961, section 2.2).

    Only P carries gradient: f_i counts the argmax / top-k choices and is a constant here
    (detached). Backpropagating through f_i (say, computing it from a soft or
    straight-through mask) is the classic mistake.
    Under uniform routing (every P_i = f_i = 1/E) the loss equals ``alpha``; it grows as the
    routing concentrates on fewer experts. For k > 1, f sums to 1 over experts as
    Megatron-LM's switch_load_balancing_loss_func normalises it (by T k).
    """
    import torch

    if not isinstance(router_probs, torch.Tensor) or router_probs.dim() != 2 \
            or not router_probs.is_floating_point():
        raise ValueError("router_probs must be a floating (tokens, experts) tensor of router probabilities")
    tokens, num_experts = router_probs.shape
    if tokens == 0:
        raise ValueError("router_probs has no tokens: pass at least one row")
    if not isinstance(expert_index, torch.Tensor) or expert_index.is_floating_point() \
            or expert_index.dim() not in (1, 2) or expert_index.shape[0] != tokens:
        raise ValueError(f"expert_index must be an integer tensor of shape ({tokens},) or ({tokens}, k): "
                         "the expert(s) each token was routed to")
    if expert_index.numel() and (int(expert_index.min()) < 0 or int(expert_index.max()) >= num_experts):
        raise ValueError(f"expert_index values must lie in 0..{num_experts - 1} (router_probs has {num_experts} experts)")
    _check_nonnegative(alpha=alpha)
    assignments = expert_index.reshape(-1).long()
    counts = torch.bincount(assignments, minlength=num_experts).to(router_probs.dtype)
    token_share = (counts / assignments.numel()).detach()  # f_i: not differentiated
    mean_prob = router_probs.mean(dim=0)                      # P_i: carries the gradient
    return alpha * num_experts * torch.sum(token_share * mean_prob)
