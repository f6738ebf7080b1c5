"""FP8: the two OCP 8-bit formats, per-tensor scaling, and FP8 bytes on the wire.

    from labutils.kernels import fp8
    fp8.FORMATS["e4m3"].max_normal                 # 448.0
    scale = fp8.amax_scale(x.abs().max(), "e4m3")  # fp8 = saturate(x * scale)
    fp8.quantization_error(x, "e4m3", scale)       # relative RMS error, saturated and flushed shares

Formats (OCP 8-bit Floating Point Specification (OFP8), revision 1.0, 2023; Micikevicius et
al., "FP8 Formats for Deep Learning", arXiv:2209.05433): E4M3 has 4 exponent and 3
mantissa bits, no infinities and one NaN pattern per sign, so it reaches 448; E5M2 is
IEEE-like (infinities, NaNs) with 2 mantissa bits and reaches 57344. E4M3 has the finer
steps (relative spacing 2^-3), E5M2 the wider range (2^-2): training recipes use E4M3 for
weights and activations and E5M2 for gradients (NVIDIA Transformer Engine's ``HYBRID``
format). torch names them ``float8_e4m3fn`` ("finite": no inf) and ``float8_e5m2``.

Eight bits cover a narrow range, so a tensor is multiplied by a **scale** before the cast
and divided by it after: ``scale = max_normal / amax / 2**margin`` puts the largest
magnitude ``amax`` at the top of the format (NVIDIA Transformer Engine,
``transformer_engine.common.recipe.DelayedScaling``: ``margin``, ``amax_history_len``,
``amax_compute_algo="max"``). **Current** scaling takes ``amax`` of the tensor being cast;
**delayed** scaling takes the largest ``amax`` of the last ``amax_history_len`` steps, so the
scale is known before the tensor exists, and a sudden larger value saturates.
Casting here saturates: values beyond ``max_normal`` become ``+-max_normal``.

This module scales per tensor, the simplest recipe. Block scaling gives each block of values
its own scale: MXFP8 (OCP Microscaling Formats (MX) Specification v1.0) shares one E8M0
(power-of-two) scale among 32 consecutive values, natively on Blackwell; DeepSeek-V3
(arXiv:2412.19437) scales 1 x 128 activation tiles and 128 x 128 weight blocks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Fp8Format:
    """One 8-bit float format: bit layout, range and precision.

    ``max_normal``, ``min_normal``, ``min_subnormal``: magnitudes; ``spacing``: the gap
    between 1 and the next value (2^-mantissa_bits), so a value rounds with a relative
    error of at most ``spacing / 2`` in the normal range.
    """

    name: str
    torch_name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_normal: float
    min_normal: float
    min_subnormal: float
    has_infinity: bool

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype (``torch.float8_e4m3fn`` or ``torch.float8_e5m2``)."""
        return getattr(torch, self.torch_name)

    @property
    def spacing(self) -> float:
        """Relative gap between 1.0 and the next representable value: 2^-mantissa_bits."""
        return 2.0 ** -self.mantissa_bits

    @property
    def dynamic_range(self) -> float:
        """max_normal / min_subnormal: the span of magnitudes the format can hold."""
        return self.max_normal / self.min_subnormal


#: The OCP formats (OFP8 rev. 1.0; arXiv:2209.05433, Table 1). E4M3: 1.75 x 2^8 = 448 (the
#: all-ones exponent still holds numbers, only S.1111.111 is NaN); E5M2: 1.75 x 2^15 = 57344.
FORMATS = {
    "e4m3": Fp8Format("E4M3", "float8_e4m3fn", 4, 3, 7, 448.0, 2.0**-6, 2.0**-9, False),
    "e5m2": Fp8Format("E5M2", "float8_e5m2", 5, 2, 15, 57344.0, 2.0**-14, 2.0**-16, True),
}
_ALIASES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def fp8_format(fmt) -> Fp8Format:
    """The :class:`Fp8Format` for "e4m3", "E5M2", "float8_e4m3fn", a torch fp8 dtype or a format."""
    if isinstance(fmt, Fp8Format):
        return fmt
    key = str(fmt).lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown FP8 format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return FORMATS[key]


def amax_scale(amax: float, fmt="e4m3", margin: int = 0) -> float:
    """Scale that maps the magnitude ``amax`` to the format's largest normal, / 2**``margin``.

    Transformer Engine's rule: scale = (max_normal / amax) / 2^margin. An ``amax`` of 0 (an
    all-zero tensor) gives scale 1.
    """
    amax = float(amax)
    if not math.isfinite(amax) or amax < 0:
        raise ValueError(f"amax must be a finite magnitude >= 0, got {amax!r}")
    if int(margin) != margin or margin < 0:
        raise ValueError(f"margin must be a whole number >= 0, got {margin!r}")
    return 1.0 if amax == 0 else fp8_format(fmt).max_normal / amax / 2.0**margin


def quantize(x: torch.Tensor, fmt="e4m3", scale: float = 1.0) -> torch.Tensor:
    """``x * scale`` saturated to +-max_normal and cast to FP8 (one byte per element)."""
    fmt = fp8_format(fmt)
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    scaled = x.float() * scale
    return scaled.clamp(-fmt.max_normal, fmt.max_normal).to(fmt.dtype)


def dequantize(q: torch.Tensor, scale: float) -> torch.Tensor:
    """FP8 values back to float32: ``q / scale``."""
    return q.float() / scale


@dataclass(frozen=True)
class QuantError:
    """What a cast to FP8 and back did to a tensor, at one ``scale``.

    ``relative_rmse``: ||x - x_hat|| / ||x|| (the largest values dominate it);
    ``median_relative``: the median over non-zero elements of |x_hat - x| / |x| (what the
    bulk of the values suffers); ``saturated``: share of elements with |x scale| >
    max_normal (clipped; one part in a million of slack for float32 rounding of x scale);
    ``flushed``: share of non-zero elements that became 0.
    """

    fmt: str
    scale: float
    relative_rmse: float
    median_relative: float
    saturated: float
    flushed: float


def quantization_error(x: torch.Tensor, fmt="e4m3", scale: float = 1.0) -> QuantError:
    """Round-trip ``x`` through FP8 at ``scale`` and measure the damage (see :class:`QuantError`)."""
    fmt = fp8_format(fmt)
    x = x.float()
    if x.numel() == 0 or not bool(x.abs().sum() > 0):
        raise ValueError("x must hold at least one non-zero element")
    back = dequantize(quantize(x, fmt, scale), scale)
    nonzero = x != 0
    elementwise = ((back - x).abs() / x.abs())[nonzero]
    return QuantError(fmt.name, float(scale),
                      float((back - x).norm() / x.norm()),
                      float(elementwise.median()),
                      float(((x * scale).abs() > fmt.max_normal * (1 + 1e-6)).float().mean()),
                      float((nonzero & (back == 0)).sum() / nonzero.sum()))


def tensor_with_outliers(numel: int, outlier_every: int = 1000, outlier_size: float = 100.0,
                         std: float = 1.0, seed: int = 0) -> torch.Tensor:
    """Normal float32 values of standard deviation ``std``, every ``outlier_every``-th one
    multiplied by ``outlier_size``.

    A stand-in for activations with a few large channels: the outliers set ``amax``, the
    bulk of the values sits far below it.
    """
    if numel < 1 or outlier_every < 1 or not outlier_size > 0 or not std > 0:
        raise ValueError("numel >= 1, outlier_every >= 1, outlier_size > 0 and std > 0 are required")
    x = std * torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    x[::outlier_every] *= outlier_size
    return x


def history_scales(amaxes, fmt="e4m3", history_len: int = 16, margin: int = 0, delayed: bool = True) -> list[float]:
    """The scale used at each step for tensors whose amax per step is ``amaxes``.

    ``delayed=True``: from the largest amax of the previous ``history_len`` steps (the first
    step, with no history, uses its own); ``False``: current scaling, each step's own amax.
    """
    amaxes = [float(a) for a in amaxes]
    if history_len < 1:
        raise ValueError(f"history_len must be >= 1, got {history_len!r}")
    scales = []
    for step, amax in enumerate(amaxes):
        seen = amaxes[max(0, step - history_len):step] if delayed and step else [amax]
        scales.append(amax_scale(max(seen), fmt, margin))
    return scales


def accumulation_error(parts: list[torch.Tensor], storage: str) -> float:
    """Relative error of summing ``parts`` in turn (as a ring reduce does) with every partial
    sum stored in ``storage``: "fp32", "bf16", or an FP8 format with a per-tensor current scale.

    Against the float64 sum; relative RMS error. Shows why gradients are usually reduced in
    BF16/FP32, and what an FP8 reduction must manage (FP8-LM, arXiv:2310.18313, does it with one
    scale shared by the ranks).
    """
    if len(parts) < 2:
        raise ValueError("pass at least two tensors to sum")

    def stored(t: torch.Tensor) -> torch.Tensor:
        if storage in ("fp32", "bf16"):
            return t.to(torch.float32 if storage == "fp32" else torch.bfloat16).double()
        scale = amax_scale(float(t.abs().max()), storage)
        return dequantize(quantize(t, storage, scale), scale).double()

    if storage not in ("fp32", "bf16"):
        fp8_format(storage)
    exact = torch.stack([p.double() for p in parts]).sum(0)
    total = stored(parts[0])
    for part in parts[1:]:
        total = stored(total + stored(part))
    return float((total - exact).norm() / exact.norm())


def fp8_all_gather(shard: torch.Tensor, fmt="e4m3") -> dict:
    """All-gather ``shard`` (this rank's slice of a weight) as FP8 bytes; call on every rank.

    As FSDP's FP8 all-gather does: the ranks agree on one scale (an all-reduce MAX of each
    shard's amax), cast their shard to FP8, gather the bytes (a ``uint8`` view, so any
    backend carries them) and dequantise. For comparison the same shard is gathered in
    BF16. Returns the gathered tensors' per-rank input bytes for each (``fp8_bytes``,
    ``bf16_bytes``), the scale, and the relative RMS error of each gathered result against
    the float32 weight (``fp8_error``, ``bf16_error``).
    """
    import torch.distributed as dist

    fmt = fp8_format(fmt)
    world_size = dist.get_world_size()
    exact = shard.float()
    amax = exact.abs().max().reshape(1)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX)
    scale = amax_scale(float(amax), fmt)
    wire = quantize(exact, fmt, scale).view(torch.uint8)
    gathered = [torch.empty_like(wire) for _ in range(world_size)]
    dist.all_gather(gathered, wire)
    full_fp8 = torch.cat([dequantize(g.view(fmt.dtype), scale) for g in gathered])
    bf16 = exact.to(torch.bfloat16)
    gathered_bf16 = [torch.empty_like(bf16) for _ in range(world_size)]
    dist.all_gather(gathered_bf16, bf16)
    full_bf16 = torch.cat(gathered_bf16).float()
    full_exact = [torch.empty_like(exact) for _ in range(world_size)]
    dist.all_gather(full_exact, exact)
    reference = torch.cat(full_exact)
    return {"fp8_bytes": wire.numel() * wire.element_size(), "bf16_bytes": bf16.numel() * bf16.element_size(),
            "scale": scale, "world_size": world_size,
            "fp8_error": float((full_fp8 - reference).norm() / reference.norm()),
            "bf16_error": float((full_bf16 - reference).norm() / reference.norm())}


def fp8_matmul_unavailable(device) -> str:
    """Why ``device`` has no FP8 tensor-core matmul ("" when it has one).

    FP8 tensor cores arrived with compute capability 8.9 (Ada) and 9.0 (Hopper);
    ``torch._scaled_mm`` also runs on a CPU, but there it is an emulation, not a fast path.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return f"{device.type} has no FP8 tensor cores (torch._scaled_mm runs there as an emulation)"
    if not hasattr(torch, "_scaled_mm"):
        return "this torch has no torch._scaled_mm"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"FP8 tensor cores need compute capability 8.9 or newer; this GPU is {major}.{minor}"
    return ""


def scaled_matmul(a: torch.Tensor, b: torch.Tensor, fmt="e4m3") -> tuple[torch.Tensor, float]:
    """``a @ b`` through ``torch._scaled_mm``: both cast to FP8 with per-tensor current scales.

    ``a`` is (m, k), ``b`` (k, n), dimensions multiples of 16; ``_scaled_mm`` wants the second
    operand column-major and takes the *dequantisation* scales (1 / scale). Returns the BF16
    product and its relative RMS error against the float32 product of ``a`` and ``b``.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need (m, k) @ (k, n) matrices, got {tuple(a.shape)} and {tuple(b.shape)}")
    if any(size % 16 for size in (*a.shape, b.shape[1])):
        raise ValueError(f"torch._scaled_mm needs every dimension a multiple of 16, "
                         f"got {tuple(a.shape)} @ {tuple(b.shape)}")
    scale_a = amax_scale(float(a.abs().max()), fmt)
    scale_b = amax_scale(float(b.abs().max()), fmt)
    a8 = quantize(a, fmt, scale_a)
    b8 = quantize(b, fmt, scale_b).t().contiguous().t()          # column-major
    inverse = [torch.tensor(1.0 / s, dtype=torch.float32, device=a.device) for s in (scale_a, scale_b)]
    out = torch._scaled_mm(a8, b8, scale_a=inverse[0], scale_b=inverse[1], out_dtype=torch.bfloat16)
    exact = a.float() @ b.float()
    return out, float((out.float() - exact).norm() / exact.norm())
