"""The roofline model: device peaks (sourced), arithmetic intensity of common ops.

attainable FLOP/s = min(peak FLOP/s, intensity x memory bandwidth), and the ridge point
peak / bandwidth (FLOP/B) separates memory-bound from compute-bound ops (Williams,
Waterman, Patterson, "Roofline", CACM 2009). Units: FLOP/s, bytes/s, FLOP/B.

    from labutils.costmodel import roofline as rf
    op = rf.gemm(8192, 8192, 8192, "bf16")          # OpCost(flops, bytes, intensity)
    rf.attainable(op.intensity, rf.DEVICES["h100"], "bf16")
    rf.ridge_point(rf.DEVICES["a100"], "bf16")        # about 153 FLOP/B

Byte counts are the ideal minimum: every input read once, every output written once
(perfect on-chip reuse). Real kernels move more, so real intensities are lower.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labutils.machine.hardware import GiB

#: bytes per element of each dtype name the helpers accept (torch names as aliases)
DTYPE_BYTES = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1,
}
_DTYPE_ALIASES = {
    "float64": "fp64", "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "float8": "fp8",
}


def canonical_dtype(dtype) -> str:
    """'bf16' for 'bf16', 'bfloat16' or torch.bfloat16; ValueError listing the choices otherwise."""
    name = str(dtype).lower().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPE_BYTES)}")
    return name


def dtype_bytes(dtype) -> int:
    """Bytes per element of ``dtype`` (2 for bf16)."""
    return DTYPE_BYTES[canonical_dtype(dtype)]


@dataclass(frozen=True)
class Device:
    """One accelerator's roofline.

    ``peak_flops``: dtype -> dense peak FLOP/s (tensor cores where they apply; never the
    2:4-sparse figure). ``mem_bandwidth``: memory bandwidth in bytes/s.
    ``memory_bytes``: memory capacity in bytes where the source gives it, else None; see
    :func:`datasheet_memory` for how a datasheet's "80GB" becomes bytes.
    ``nvlink_bidirectional``: NVLink bandwidth per GPU in bytes/s, both directions added
    (half of it per direction), or None. ``max_power_w``: the datasheet's maximum power
    (TDP) in watts, or None. ``source``: where the numbers come from.
    """

    name: str
    peak_flops: dict[str, float]
    mem_bandwidth: float
    source: str
    notes: str = ""
    memory_bytes: float | None = None
    nvlink_bidirectional: float | None = None
    max_power_w: float | None = None

    def peak(self, dtype) -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError naming the dtypes this device has."""
        name = canonical_dtype(dtype)
        if name not in self.peak_flops:
            raise ValueError(
                f"{self.name} has no {name} peak listed; choose one of: {', '.join(self.peak_flops)}"
                + (f" ({self.notes})" if self.notes else "")
            )
        return self.peak_flops[name]


def datasheet_memory(marketed_gb: float) -> float:
    """Bytes of GPU memory behind a datasheet's "80GB": ``marketed_gb`` x 2**30 (GiB).

    NVIDIA's datasheets write HBM capacity as "GB", but HBM stacks come in binary sizes and
    the figure is GiB: ``nvidia-smi --query-gpu=memory.total`` reports an A100 80GB as
    81920 MiB (80 GiB = 85.9 GB), an H100 80GB HBM3 as 81559 MiB (what the driver leaves
    visible, just under 80 GiB) and an H200 as 143771 MiB (140.4 GiB; 141 on the
    datasheet). ``labutils.machine.hardware`` (NVML) reads the same bytes on a real GPU, so the
    course uses one convention: datasheet figure x GiB, printed in GB (1e9 B) as 85.9 GB.
    """
    return marketed_gb * GiB


def _datasheet(document: str) -> str:
    """The ``source`` of a datasheet device: the document, and what was read from it."""
    return f"{document}: dense tensor-core peak, HBM bandwidth and capacity, NVLink per GPU, max power (TDP)"


#: The GPUs the course quotes. Dense BF16/FP16 tensor peaks (the H100 also FP64, FP32, TF32 and FP8),
#: HBM bandwidth, NVLink per GPU, maximum power (SXM / HGX TDP, W).
DEVICES: dict[str, Device] = {
    "v100": Device(
        name="V100 SXM2",
        peak_flops={"fp16": 125e12},
        mem_bandwidth=900e9,
        source=_datasheet("NVIDIA Tesla V100 datasheet, SXM2 column"),
        notes="Volta has FP16 tensor cores and no BF16; 32 GB variant (a 16 GB one exists)",
        memory_bytes=datasheet_memory(32),
        nvlink_bidirectional=300e9,
        max_power_w=300,
    ),
    "a100": Device(
        name="A100 80GB SXM",
        peak_flops={"bf16": 312e12, "fp16": 312e12},
        mem_bandwidth=2039e9,
        source=_datasheet("NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column"),
        notes="624 TFLOP/s is the 2:4-sparse figure",
        memory_bytes=datasheet_memory(80),
        nvlink_bidirectional=600e9,
        max_power_w=400,
    ),
    "h100": Device(
        name="H100 SXM",
        # the datasheet prints TF32, BF16/FP16 and FP8 with sparsity (989, 1,979, 3,958 TFLOP/s):
        # dense is half; FP64 (tensor cores) and FP32 (CUDA cores) are dense, 67 TFLOP/s each
        peak_flops={"fp64": 67e12, "fp32": 67e12, "tf32": 989e12 / 2, "bf16": 989e12, "fp16": 989e12,
                    "fp8": 3958e12 / 2},
        mem_bandwidth=3.35e12,
        source=_datasheet("NVIDIA H100 Tensor Core GPU datasheet, SXM column"),
        notes="1,979 TFLOP/s is the 2:4-sparse BF16 figure; fp64 is the tensor-core figure, fp32 the "
        "CUDA cores' (no tensor cores)",
        memory_bytes=datasheet_memory(80),
        nvlink_bidirectional=900e9,
        max_power_w=700,
    ),
    "h200": Device(
        name="H200 SXM",
        peak_flops={"bf16": 989e12, "fp16": 989e12},
        mem_bandwidth=4.8e12,
        source=_datasheet("NVIDIA H200 Tensor Core GPU datasheet, SXM column"),
        notes="same compute as H100 SXM, more and faster HBM3e; 1,979 TFLOP/s is sparse",
        memory_bytes=datasheet_memory(141),
        nvlink_bidirectional=900e9,
        max_power_w=700,
    ),
    "b200": Device(
        name="B200 (HGX)",
        peak_flops={"bf16": 2250e12, "fp16": 2250e12},
        mem_bandwidth=8e12,
        source=_datasheet("NVIDIA HGX B200 datasheet, per GPU"),
        notes="4,500 TFLOP/s is the 2:4-sparse figure; 180 GB per GPU from the DGX B200 "
        "user guide (1,440 GB for 8 GPUs)",
        memory_bytes=datasheet_memory(180),
        nvlink_bidirectional=1.8e12,
        max_power_w=1000,
    ),
}


def get_device(name: str) -> Device:
    """The :data:`DEVICES` entry for ``name`` ('h100', 'H100', 'H100 SXM' all work)."""
    key = str(name).lower().split()[0] if str(name).strip() else ""
    if key not in DEVICES:
        raise ValueError(f"unknown GPU {name!r}; choose one of: {', '.join(DEVICES)}")
    return DEVICES[key]


def device_from_measurements(
    name: str,
    peak_flops: dict[str, float] | float,
    mem_bandwidth: float,
    source: str = "measured",
    notes: str = "",
) -> Device:
    """A :class:`Device` from numbers measured in a notebook (e.g. with ``labutils.measure.bench``).

    ``peak_flops``: dtype -> FLOP/s, or one number taken as the fp32 peak;
    ``mem_bandwidth``: bytes/s (count a copy's read and write both).
    """
    if not isinstance(peak_flops, dict):
        peak_flops = {"fp32": peak_flops}
    peaks = {canonical_dtype(dtype): float(value) for dtype, value in peak_flops.items()}
    for dtype, value in peaks.items():
        if not value > 0:
            raise ValueError(f"peak_flops[{dtype!r}] must be > 0 FLOP/s, got {value!r}")
    if not mem_bandwidth > 0:
        raise ValueError(f"mem_bandwidth must be > 0 bytes/s, got {mem_bandwidth!r}")
    return Device(name=name, peak_flops=peaks, mem_bandwidth=float(mem_bandwidth), source=source, notes=notes)


def measured_cpu_device(matmul_size: int = 512, copy_bytes: int = 32 * 2**20, repeats: int = 5) -> Device:
    """Measure this machine's CPU with torch: fp32 matmul FLOP/s and copy bandwidth (B/s).

    Best of ``repeats`` runs of an ``matmul_size``^3 fp32 matmul (2 n^3 FLOPs) and of a copy of
    ``copy_bytes`` bytes (counted as read + write, 2 x copy_bytes). Small defaults so that it
    takes well under a second; these are lower bounds of the true peaks. Points measured
    on tensors much smaller than ``copy_bytes`` run from the caches and can land above this
    memory roof (``labutils.measure.bench.op_throughput``'s CPU default is as large as its copy).
    """
    import time

    import torch

    if matmul_size < 1 or copy_bytes < 4 or repeats < 1:
        raise ValueError("matmul_size >= 1, copy_bytes >= 4 and repeats >= 1 are required")
    a = torch.randn(matmul_size, matmul_size)
    b = torch.randn(matmul_size, matmul_size)
    src = torch.empty(copy_bytes // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)

    def best_seconds(fn) -> float:
        fn()  # warm-up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        return best

    flops = 2 * matmul_size**3 / best_seconds(lambda: torch.mm(a, b))
    bandwidth = 2 * src.numel() * 4 / best_seconds(lambda: dst.copy_(src))
    return device_from_measurements(
        "this CPU (measured)", {"fp32": flops}, bandwidth,
        source=f"measured now: best of {repeats}, {matmul_size}^3 fp32 matmul, {copy_bytes} B copy",
        notes=f"torch threads: {torch.get_num_threads()}",
    )


# --------------------------------------------------------------------------------------
# Operations and their arithmetic intensity
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes moved (ideal minimum) of one op; ``intensity`` = flops / bytes (FLOP/B)."""

    name: str
    flops: float
    bytes: float
    intensity: float = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "intensity", self.flops / self.bytes if self.bytes else float("inf"))


def _check_dims(**dims) -> None:
    for name, value in dims.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def gemm(M: int, N: int, K: int, dtype="bf16", out_dtype=None) -> OpCost:
    """C[M,N] = A[M,K] @ B[K,N]: 2MNK FLOPs, (MK + KN) elements of ``dtype`` and MN of ``out_dtype`` moved.

    A square N x N x N GEMM in a 2-byte type has intensity 2N^3 / (2 x 3N^2) = N/3 FLOP/B;
    FP8 inputs with a BF16 output (``torch._scaled_mm``'s usual ``out_dtype``) give
    2N^3 / (N^2 + N^2 + 2N^2) = N/2. ``out_dtype`` defaults to ``dtype``.
    """
    _check_dims(M=M, N=N, K=K)
    size, out_size = dtype_bytes(dtype), dtype_bytes(dtype if out_dtype is None else out_dtype)
    name = canonical_dtype(dtype) + ("" if out_dtype is None else f"->{canonical_dtype(out_dtype)}")
    return OpCost(f"gemm {M}x{N}x{K} {name}", 2.0 * M * N * K, float(M * K + K * N) * size + float(M * N) * out_size)


def elementwise(n: int, dtype="bf16", reads: int = 2, writes: int = 1, flops_per_element: float = 1) -> OpCost:
    """An elementwise op on ``n`` elements: reads + writes tensors of n elements, flops_per_element each.

    Default: c = a + b (2 reads, 1 write, 1 FLOP): intensity 1/6 FLOP/B in bf16.
    """
    _check_dims(n=n)
    if reads < 0 or writes < 0 or reads + writes == 0 or flops_per_element < 0:
        raise ValueError("need reads, writes >= 0 (not both 0) and flops_per_element >= 0")
    size = dtype_bytes(dtype)
    return OpCost(f"elementwise n={n} {canonical_dtype(dtype)}", float(n) * flops_per_element, float(n) * (reads + writes) * size)


def softmax(rows: int, cols: int, dtype="bf16") -> OpCost:
    """Row softmax of a rows x cols tensor, fused: read once, write once.

    FLOPs counted as 5 per element (max, subtract, exp, sum, divide; exp counted as one).
    """
    _check_dims(rows=rows, cols=cols)
    n = float(rows) * cols
    return OpCost(f"softmax {rows}x{cols} {canonical_dtype(dtype)}", 5 * n, 2 * n * dtype_bytes(dtype))


def layernorm(rows: int, cols: int, dtype="bf16") -> OpCost:
    """LayerNorm over the last dim of a rows x cols tensor, fused: read x, weight, bias once, write y.

    FLOPs counted as 8 per element (mean 1, variance 3, normalise 2, scale and shift 2).
    """
    _check_dims(rows=rows, cols=cols)
    n = float(rows) * cols
    size = dtype_bytes(dtype)
    return OpCost(f"layernorm {rows}x{cols} {canonical_dtype(dtype)}", 8 * n, (2 * n + 2 * cols) * size)


def attention(batch: int, heads: int, seq_len: int, head_dim: int, dtype="bf16", fused: bool = True) -> OpCost:
    """Attention scores and values, softmax(Q K^T) V, forward, no causal mask.

    FLOPs: 4 b a s^2 d (Q K^T and P V, 2 b a s^2 d each; the softmax's s^2 terms left out).
    Bytes: fused (FlashAttention-style) reads Q, K, V and writes O, 4 b a s d elements;
    ``fused=False`` also writes and reads back the s x s scores and probabilities
    (4 b a s^2 more elements), which is why unfused attention is memory-bound.
    """
    _check_dims(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim)
    b, a, s, d = float(batch), float(heads), float(seq_len), float(head_dim)
    elements = 4 * b * a * s * d + (0 if fused else 4 * b * a * s * s)
    kind = "fused" if fused else "unfused"
    return OpCost(f"attention b={batch} heads={heads} s={seq_len} d={head_dim} {kind} {canonical_dtype(dtype)}",
                  4 * b * a * s * s * d, elements * dtype_bytes(dtype))


# --------------------------------------------------------------------------------------
# The roofline itself
# --------------------------------------------------------------------------------------


def attainable(intensity: float, device: Device, dtype="bf16") -> float:
    """Attainable FLOP/s = min(peak FLOP/s, intensity (FLOP/B) x memory bandwidth (B/s))."""
    if not intensity >= 0:
        raise ValueError(f"intensity must be >= 0 FLOP/B, got {intensity!r}")
    return min(device.peak(dtype), intensity * device.mem_bandwidth)


def ridge_point(device: Device, dtype="bf16") -> float:
    """Intensity (FLOP/B) where the roofs meet: peak FLOP/s / bandwidth (B/s)."""
    return device.peak(dtype) / device.mem_bandwidth


def bound(op: OpCost, device: Device, dtype="bf16") -> str:
    """'memory' if the op's intensity is below the ridge point, else 'compute'."""
    return "memory" if op.intensity < ridge_point(device, dtype) else "compute"


def min_time(op: OpCost, device: Device, dtype="bf16") -> float:
    """Lower bound on the op's seconds: max(flops / peak, bytes / bandwidth)."""
    return max(op.flops / device.peak(dtype), op.bytes / device.mem_bandwidth)
