"""When does a parallelism strategy become communication-bound?

For each strategy, one GPU's step is split into what grows with the tokens it processes
and what does not, in the alpha-beta model of :mod:`labutils.costmodel.collectives`::

    compute  T_comp(D_GPU) = F D_GPU / P
    comm     T_comm(D_GPU) = M alpha + (S0 + S1 D_GPU) beta

``D_GPU`` tokens on this GPU per step (the course's ``D`` is a whole run's training tokens),
``F`` FLOP per token on this GPU of the compute the communication runs beside, ``P`` its
FLOP/s, ``M`` message latencies paid per step (the course's ``m`` is microbatches), ``S0,
S1`` bytes each rank sends per step and per token, ``alpha`` seconds per message, ``beta``
seconds per byte (1 / link bandwidth, per direction). The step is communication-bound
where ``T_comm > T_comp``; the crossover (:func:`crossover_tokens`) is

    D_GPU* = (M alpha + S0 beta) / (F / P - S1 beta)

(infinite when the denominator is <= 0: no number of tokens hides the communication).
With ``alpha = 0`` this is the "How to Scale Your Model" analysis (Austin et al., Google
DeepMind, 2025, jax-ml.github.io/scaling-book, "How to Parallelize a Transformer for
Training"): compute must beat the bytes at the ratio ``P / BW`` FLOP per byte of the link.

Counting (bf16 weights, gradients and activations, 2 bytes; a transformer layer has
``12 h^2`` weights, forward plus backward is ``6`` FLOP per weight and token, ``2`` of them
forward and ``4`` backward; attention's ``s^2`` terms and the vocabulary are left out; the
collectives are rings):

===========  ============================================  ==========================================
strategy     per step on one GPU                           communication-bound when
===========  ============================================  ==========================================
DP           all-reduce of 2N bytes beside the backward's   D_GPU < (d-1)/d x P/BW
             4N D_GPU FLOP (gradients exist only there)
FSDP         2 all-gathers + 1 reduce-scatter of 2N bytes   D_GPU < (d-1)/d x P/BW
             beside 6N D_GPU FLOP (one gather forward)
TP           4L all-reduces of 2 D_GPU h bytes,             h < (2/9)(t-1) x P/BW
             72 L h^2 D_GPU / t FLOP
PP           sends 2 D_GPU h bytes each way,                h L/p < (1/18) x P/BW
             72 (L/p) h^2 D_GPU FLOP
EP           4 all-to-alls of 2 D_GPU k h bytes,            f < (2/3)(e-1)/e x P/BW
             12 k h f D_GPU FLOP
===========  ============================================  ==========================================

DP and FSDP share one bound, as the scaling book says of both ("bandwidth bound ... when the
batch size per device is less than C/W"): FSDP sends 1.5 times DP's bytes but hides its
forward all-gather behind the forward, where DP's all-reduce has only the backward.
``f`` is one expert's hidden width (its two matrices are ``h x f``), ``k`` experts per
token. For TP, PP and EP both sides grow with ``D_GPU``: the tokens cancel and the condition
is on the model's shape, not the batch (without alpha; with it, small ``D_GPU`` is always
latency-bound). Units: FLOP/s, bytes, seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labutils.costmodel._checks import check_nonnegative, check_positive_int
from labutils.costmodel.collectives import collective_time

#: bytes per element of bf16 weights, gradients and activations
BF16_BYTES = 2
#: FLOP per parameter and token of one training step: 2 forward, 4 backward
TRAIN_FLOPS_PER_PARAM = 6
#: FLOP per parameter and token of the backward pass, where the gradients are made
BACKWARD_FLOPS_PER_PARAM = 4
#: the algorithm of every collective here (``costmodel.collective_time``): the bandwidth-optimal ring
_RING = "ring"


@dataclass(frozen=True)
class StepCosts:
    """One GPU's compute and communication per step, split into per-step and per-token parts.

    ``flops_per_token`` (FLOP of the whole step), ``overlap_flops_per_token`` F (FLOP of the
    compute the communication runs beside; ``None``: the whole step; ``overlap_label`` names
    it), ``messages_per_step`` M
    (alpha terms), ``bytes_per_step`` S0 and ``bytes_per_token`` S1 (bytes this rank sends,
    beta terms), ``condition``: the alpha = 0 crossover in words, ``D_GPU`` the tokens on one
    GPU per step.
    """

    strategy: str
    flops_per_token: float
    messages_per_step: float
    bytes_per_step: float
    bytes_per_token: float = 0.0
    condition: str = ""
    overlap_flops_per_token: float | None = None
    overlap_label: str = "compute"

    def compute_s(self, tokens: float, peak_flops: float) -> float:
        """Seconds of compute for ``tokens`` tokens at ``peak_flops`` FLOP/s."""
        check_nonnegative(tokens=tokens)
        _check_positive(peak_flops=peak_flops)
        return self.flops_per_token * tokens / peak_flops

    def overlap_s(self, tokens: float, peak_flops: float) -> float:
        """Seconds of the compute the communication runs beside, for ``tokens`` tokens at ``peak_flops``."""
        flops = self.flops_per_token if self.overlap_flops_per_token is None else self.overlap_flops_per_token
        return self.compute_s(tokens, peak_flops) * flops / self.flops_per_token

    def comm_s(self, tokens: float, alpha: float, beta: float) -> float:
        """Seconds of communication for ``tokens`` tokens: alpha s per message, beta s per byte."""
        check_nonnegative(tokens=tokens, alpha=alpha, beta=beta)
        return self.messages_per_step * alpha + (self.bytes_per_step + self.bytes_per_token * tokens) * beta


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _collective_terms(op: str, algorithm: str, nbytes: float, ranks: int) -> tuple[float, float]:
    """(alpha count, bytes sent per rank) of one collective, read off ``collective_time``."""
    return (collective_time(op, algorithm, nbytes, ranks, alpha=1.0, beta=0.0),
            collective_time(op, algorithm, nbytes, ranks, alpha=0.0, beta=1.0))


def dp_step_costs(params: float, dp_size: int, grad_bytes: int = BF16_BYTES) -> StepCosts:
    """DP: one ring all-reduce of the ``params`` x ``grad_bytes`` gradient bytes per step.

    Compute 6N FLOP per token, of which the backward's 4N make the gradients: the all-reduce
    can only run beside those (bucket by bucket, as DDP does). Communication 2(d-1)/d x 2N
    bytes, independent of ``D_GPU``: 4N D_GPU / P = 4N (d-1)/d / BW at D_GPU = (d-1)/d P/BW.
    """
    _check_positive(params=params)
    check_positive_int(dp_size=dp_size, grad_bytes=grad_bytes)
    latency, sent = _collective_terms("all_reduce", _RING, params * grad_bytes, dp_size)
    return StepCosts("DP", TRAIN_FLOPS_PER_PARAM * params, latency, sent,
                     condition="D_GPU < (d-1)/d x P/BW tokens",
                     overlap_flops_per_token=BACKWARD_FLOPS_PER_PARAM * params, overlap_label="backward compute")


def fsdp_step_costs(params: float, dp_size: int, layers: int = 1, param_bytes: int = BF16_BYTES) -> StepCosts:
    """FSDP / ZeRO-3: per layer, all-gather the weights twice (forward, backward), reduce-scatter the gradients.

    ``layers`` unit(s) of ``params / layers`` weights each (one collective each per unit):
    3 x (d-1)/d x 2N bytes per step, 1.5 x DP's, beside the whole step's 6N FLOP per token
    (the forward gather beside the forward's 2N, the backward's gather and reduce-scatter
    beside its 4N): the same bound as DP, D_GPU < (d-1)/d P/BW.
    """
    _check_positive(params=params)
    check_positive_int(dp_size=dp_size, layers=layers, param_bytes=param_bytes)
    unit = params * param_bytes / layers
    gather_latency, gather_sent = _collective_terms("all_gather", _RING, unit, dp_size)
    scatter_latency, scatter_sent = _collective_terms("reduce_scatter", _RING, unit, dp_size)
    return StepCosts("FSDP", TRAIN_FLOPS_PER_PARAM * params,
                     layers * (2 * gather_latency + scatter_latency), layers * (2 * gather_sent + scatter_sent),
                     condition="D_GPU < (d-1)/d x P/BW tokens")


def tp_step_costs(hidden: int, tp_size: int, layers: int = 1, act_bytes: int = BF16_BYTES) -> StepCosts:
    """TP (Megatron-LM): 4 all-reduces of the D x h activations per layer (2 forward, 2 backward).

    Compute 6 x 12 h^2 / t = 72 h^2 / t FLOP per token and layer; each all-reduce sends
    2(t-1)/t x 2 D_GPU h bytes. Both grow with D_GPU: the condition is h < (2/9)(t-1) P/BW.
    """
    check_positive_int(hidden=hidden, tp_size=tp_size, layers=layers, act_bytes=act_bytes)
    latency, sent_per_token = _collective_terms("all_reduce", _RING, hidden * act_bytes, tp_size)
    return StepCosts("TP", 6 * 12 * hidden**2 * layers / tp_size, 4 * layers * latency, 0.0,
                     bytes_per_token=4 * layers * sent_per_token,
                     condition="h < (2/9)(t-1) x P/BW")


def pp_step_costs(hidden: int, layers: int, pp_size: int, act_bytes: int = BF16_BYTES) -> StepCosts:
    """PP: an interior stage sends its D x h activations forward and their gradients back.

    Compute 72 h^2 (L/p) FLOP per token; 2 x 2 D_GPU h bytes sent (one message each way per
    microbatch: ``D_GPU`` is one microbatch's tokens). Condition h L/p < (1/18) P/BW.
    """
    check_positive_int(hidden=hidden, layers=layers, pp_size=pp_size, act_bytes=act_bytes)
    if pp_size < 2:
        raise ValueError("pipeline needs pp_size >= 2 stages (one stage sends nothing)")
    if layers % pp_size:
        raise ValueError(f"layers ({layers}) must be a multiple of pp_size ({pp_size})")
    latency, sent_per_token = _collective_terms("sendrecv", "point_to_point", hidden * act_bytes, 2)
    return StepCosts("PP", 6 * 12 * hidden**2 * layers / pp_size, 2 * latency, 0.0, bytes_per_token=2 * sent_per_token,
                     condition="h L/p < (1/18) x P/BW")


def ep_step_costs(hidden: int, expert_hidden: int, ep_size: int, top_k: int = 2,
                    act_bytes: int = BF16_BYTES) -> StepCosts:
    """EP: dispatch and combine all-to-alls, forward and backward (4), of D k rows of h values.

    Compute 3 x k x 2 x 2 h f = 12 k h f FLOP per token (the experts' two h x f matrices);
    each all-to-all sends (e-1)/e x 2 D_GPU k h bytes. k and h cancel: f < (2/3)(e-1)/e P/BW.
    """
    check_positive_int(hidden=hidden, expert_hidden=expert_hidden, ep_size=ep_size, top_k=top_k,
                       act_bytes=act_bytes)
    latency, sent_per_token = _collective_terms("all_to_all", "pairwise", top_k * hidden * act_bytes, ep_size)
    return StepCosts("EP", 12 * top_k * hidden * expert_hidden, 4 * latency, 0.0,
                     bytes_per_token=4 * sent_per_token, condition="f < (2/3)(e-1)/e x P/BW")


def crossover_tokens(costs: StepCosts, peak_flops: float, alpha: float, beta: float) -> float:
    """Tokens D_GPU* on one GPU per step where communication time equals the time of the compute it runs beside.

    Fewer tokens: communication-bound; more: compute-bound. 0.0 when the step is never
    communication-bound, ``math.inf`` when it always is (the per-token communication
    outgrows the per-token compute).
    """
    _check_positive(peak_flops=peak_flops)
    check_nonnegative(alpha=alpha, beta=beta)
    fixed = costs.messages_per_step * alpha + costs.bytes_per_step * beta
    margin = costs.overlap_s(1.0, peak_flops) - costs.bytes_per_token * beta
    if margin <= 0:
        return math.inf
    return fixed / margin


def tp_min_hidden(tp_size: int, peak_flops: float, bandwidth: float) -> float:
    """Smallest hidden size h for which TP over ``tp_size`` ranks is compute-bound (alpha = 0).

    72 h^2 / t / P = 4 x 2(t-1)/t x 2h / BW gives h = (2/9)(t-1) P / BW.
    ``bandwidth``: B/s per direction.
    """
    check_positive_int(tp_size=tp_size)
    _check_positive(peak_flops=peak_flops, bandwidth=bandwidth)
    return 2 / 9 * (tp_size - 1) * peak_flops / bandwidth


def ep_min_expert_hidden(ep_size: int, peak_flops: float, bandwidth: float) -> float:
    """Smallest expert width f for which EP over ``ep_size`` ranks is compute-bound (alpha = 0).

    12 k h f / P = 4 x (e-1)/e x 2kh / BW gives f = (2/3)(e-1)/e P / BW.
    """
    check_positive_int(ep_size=ep_size)
    _check_positive(peak_flops=peak_flops, bandwidth=bandwidth)
    return 2 / 3 * (ep_size - 1) / ep_size * peak_flops / bandwidth


@dataclass(frozen=True)
class CrossoverCurve:
    """Compute and communication seconds of one strategy over a range of tokens per GPU.

    ``compute_s``: seconds of the compute the communication runs beside (``compute_label``
    names it); ``comm_s`` and ``crossover``: link label -> seconds at each of ``tokens`` /
    D_GPU* tokens.
    """

    strategy: str
    tokens: tuple[float, ...]
    compute_s: tuple[float, ...]
    comm_s: dict[str, tuple[float, ...]]
    crossover: dict[str, float]
    condition: str
    compute_label: str = "compute"


def crossover_curve(costs: StepCosts, tokens, peak_flops: float, links: dict[str, tuple[float, float]]
                    ) -> CrossoverCurve:
    """Times of ``costs`` at each of ``tokens`` for every link label -> (alpha s, beta s/B)."""
    tokens = tuple(float(t) for t in tokens)
    if not tokens or not links:
        raise ValueError("pass at least one token count and one link (label -> (alpha, beta))")
    comm = {label: tuple(costs.comm_s(t, a, b) for t in tokens) for label, (a, b) in links.items()}
    cross = {label: crossover_tokens(costs, peak_flops, a, b) for label, (a, b) in links.items()}
    return CrossoverCurve(costs.strategy, tokens, tuple(costs.overlap_s(t, peak_flops) for t in tokens),
                          comm, cross, costs.condition, costs.overlap_label)
