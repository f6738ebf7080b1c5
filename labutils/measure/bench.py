"""Single-device measurements: copy bandwidth, host<->device transfers, matmul and op throughput.

    from labutils.measure import bench
    print(bench.memcpy_bandwidth())                  # device-to-device copy (host memory on CPU)
    print(bench.host_device_bandwidth(pinned=True))  # "no GPU: ..." on a CPU machine
    for r in bench.matmul_throughput():             # FLOP/s per size and dtype
        print(r)
    points = bench.op_throughput()                  # add / softmax / layernorm, for a roofline

Every function warms up first, then takes timing samples: on a GPU a batch of calls between
CUDA events (long enough that launch cost does not count; when the working set fits in L2,
the cache is flushed before every call and each call is timed alone), on the CPU one call per sample with
``time.perf_counter``. Results keep every sample (seconds) and report the
median and the spread (min, max). Units: bytes, seconds, GB/s = 1e9 B/s, TFLOP/s =
1e12 FLOP/s. The defaults are small on the CPU (each call well under 2 s on 2 cores) and
large enough on a GPU to approach its peak. Collective benchmarks live in
``labutils.measure.collectives_bench``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from labutils.measure._cuda_timing import (DEFAULT_L2_BYTES, MAX_CALLS_PER_BATCH, MIN_BATCH_S,  # noqa: F401 (re-exported)
                                           calls_per_batch, l2_cache_bytes)
from labutils.measure._timing import (DTYPE_NAMES, Timing, check_counts, dtype_name,  # noqa: F401 (re-exported)
                                      resolve_device, resolve_dtype, time_iterations)

#: Elementwise / normalisation ops that ``op_throughput`` can time.
OPS = ("add", "softmax", "layernorm")

# On the CPU the op tensors (2048 x 2048 fp32 = 16 MiB) are as large as the copy, so both
# measure the same memory level and op points sit under a roof drawn from the copy.
_CPU_DEFAULTS = {"memcpy_bytes": 16 * 2**20, "iters": 10, "warmup": 2,
                 "matmul_sizes": (128, 256), "op_shape": (2048, 2048)}
_GPU_DEFAULTS = {"memcpy_bytes": 2**30, "iters": 20, "warmup": 5,
                 "matmul_sizes": (1024, 4096, 8192), "op_shape": (8192, 8192)}


def _defaults(device: torch.device) -> dict:
    return _GPU_DEFAULTS if device.type == "cuda" else _CPU_DEFAULTS


@dataclass(frozen=True)
class CopyBandwidth:
    """A buffer copy of ``nbytes`` bytes on ``device``, timed per iteration.

    Two conventions, both reported: ``copied_gb_per_s`` counts each byte once (bytes
    copied per second); ``read_write_gb_per_s`` counts it twice, read once and written
    once, as STREAM's Copy and quoted memory-bandwidth figures do (an H100's ~3 TB/s copy
    is read + write).
    """

    device: str
    nbytes: int
    timing: Timing

    @property
    def copied_gb_per_s(self) -> float:
        return self.nbytes / self.timing.median_s / 1e9

    @property
    def read_write_gb_per_s(self) -> float:
        return 2 * self.nbytes / self.timing.median_s / 1e9

    def __str__(self) -> str:
        return (f"copy of {self.nbytes / 1e6:,.1f} MB on {self.device}: {self.copied_gb_per_s:,.1f} GB/s copied, "
                f"{self.read_write_gb_per_s:,.1f} GB/s read+write (median of {len(self.timing.samples_s)}, "
                f"spread {self.timing.spread:.0%})")


def memcpy_bandwidth(nbytes: int | None = None, device=None, iters: int | None = None,
                     warmup: int | None = None) -> CopyBandwidth:
    """Copy bandwidth of ``device`` memory: ``dst.copy_(src)`` of ``nbytes`` bytes.

    ``device``: "cpu", "cuda", "cuda:N" or None (the current GPU, else the CPU: then it
    measures host memory). ``nbytes`` defaults to 16 MiB on the CPU, 1 GiB on a GPU.
    """
    device = resolve_device(device)
    defaults = _defaults(device)
    nbytes = defaults["memcpy_bytes"] if nbytes is None else nbytes
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes!r}")
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    timing = time_iterations(lambda: dst.copy_(src), device,
                             defaults["iters"] if iters is None else iters,
                             defaults["warmup"] if warmup is None else warmup, working_set_bytes=2 * nbytes)
    return CopyBandwidth(str(device), nbytes, timing)


@dataclass(frozen=True)
class TransferBandwidth:
    """A host<->device copy: ``direction`` "h2d" or "d2h", from/to ``pinned`` or pageable host memory.

    ``timing`` is None when nothing could be measured; ``reason`` then says why.
    """

    direction: str
    pinned: bool
    nbytes: int
    timing: Timing | None
    reason: str = ""

    @property
    def measured(self) -> bool:
        return self.timing is not None

    @property
    def gb_per_s(self) -> float | None:
        """Bytes moved across the link per second, in GB/s (None when not measured)."""
        return self.nbytes / self.timing.median_s / 1e9 if self.measured else None

    def __str__(self) -> str:
        memory = "pinned" if self.pinned else "pageable"
        if not self.measured:
            return f"{self.direction} ({memory}): {self.reason}"
        return (f"{self.direction} ({memory}) {self.nbytes / 1e6:,.1f} MB: {self.gb_per_s:,.2f} GB/s "
                f"(median of {len(self.timing.samples_s)}, spread {self.timing.spread:.0%})")


def host_device_bandwidth(nbytes: int = 256 * 2**20, pinned: bool = True, direction: str = "h2d",
                          device=None, iters: int = 10, warmup: int = 2) -> TransferBandwidth:
    """Bandwidth of one host->device ("h2d") or device->host ("d2h") copy of ``nbytes`` bytes.

    ``pinned=True`` uses page-locked host memory (DMA straight from/to it, the fast path);
    ``pinned=False`` pageable memory (the driver stages it through a pinned buffer). Compare
    with the PCIe per-direction figure (Gen4 x16: 31.5 GB/s, Gen5: 63 GB/s). Without a GPU
    the result is not measured and says so (no exception).
    """
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' (host to device) or 'd2h' (device to host), got {direction!r}")
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes!r}")
    check_counts(iters, warmup)
    if (device is None or torch.device(device).type == "cuda") and not torch.cuda.is_available():
        return TransferBandwidth(direction, pinned, nbytes, None, "no GPU: host-device copy not measurable")
    device = resolve_device(device)
    if device.type != "cuda":
        return TransferBandwidth(direction, pinned, nbytes, None,
                                 f"device {device} is not a GPU: host-device copy not measurable")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if direction == "h2d":
        copy = lambda: gpu.copy_(host, non_blocking=pinned)  # noqa: E731
    else:
        copy = lambda: host.copy_(gpu, non_blocking=pinned)  # noqa: E731
    return TransferBandwidth(direction, pinned, nbytes, time_iterations(copy, device, iters, warmup))


@dataclass(frozen=True)
class MatmulThroughput:
    """``(m x k) @ (k x n)`` in ``dtype`` on ``device``: 2*m*n*k FLOP per product.

    ``timing`` is None when the device cannot run this dtype; ``skipped`` says why.
    """

    device: str
    m: int
    n: int
    k: int
    dtype: str
    timing: Timing | None
    skipped: str = ""

    @property
    def flops(self) -> int:
        """Floating-point operations of one product: a multiply and an add per (i, j, l)."""
        return 2 * self.m * self.n * self.k

    @property
    def flop_per_s(self) -> float | None:
        return self.flops / self.timing.median_s if self.timing else None

    @property
    def tflop_per_s(self) -> float | None:
        return self.flop_per_s / 1e12 if self.timing else None

    def __str__(self) -> str:
        shape = f"{self.m}x{self.n}x{self.k} {self.dtype} on {self.device}"
        if self.timing is None:
            return f"matmul {shape}: skipped ({self.skipped})"
        return (f"matmul {shape}: {self.tflop_per_s:,.3f} TFLOP/s "
                f"({self.timing.median_s * 1e3:,.3f} ms median, spread {self.timing.spread:.0%})")


def unsupported_reason(dtype: torch.dtype, device: torch.device) -> str:
    """Why ``device`` cannot multiply matrices of ``dtype`` ("" when it can)."""
    if device.type == "cuda" and dtype == torch.bfloat16:
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:  # bf16 tensor cores arrived with Ampere; older GPUs only emulate it
            return f"bfloat16 needs compute capability 8.0 or newer; this GPU is {major}.{minor}"
    try:
        a = torch.ones(2, 2, dtype=dtype, device=device)
        a @ a
    except RuntimeError as exc:
        return f"{dtype_name(dtype)} matmul not available on {device}: {str(exc).splitlines()[0]}"
    return ""


def _mnk(size) -> tuple[int, int, int]:
    if isinstance(size, int):
        size = (size, size, size)
    if not isinstance(size, (tuple, list)) or len(size) != 3 or not all(isinstance(x, int) and x > 0 for x in size):
        raise ValueError(f"a matmul size is an int N (square) or a tuple (m, n, k) of positive ints, got {size!r}")
    return tuple(size)


def matmul_throughput(sizes: Sequence | None = None, dtypes: Sequence | None = None, device=None,
                      iters: int | None = None, warmup: int | None = None) -> list[MatmulThroughput]:
    """Achieved FLOP/s of ``torch.matmul`` for each size and dtype.

    ``sizes``: ints N (N x N x N) or (m, n, k) tuples; default 128 and 256 on the CPU,
    1024, 4096 and 8192 on a GPU. ``dtypes``: default float32 and bfloat16 on the CPU,
    float32, bfloat16 and float16 on a GPU; a dtype the device cannot run is reported as
    skipped. On a GPU, float32 uses TF32 tensor cores only if
    ``torch.backends.cuda.matmul.allow_tf32`` is set (off by default).
    """
    device = resolve_device(device)
    defaults = _defaults(device)
    sizes = [_mnk(s) for s in (defaults["matmul_sizes"] if sizes is None else sizes)]
    if dtypes is None:
        dtypes = ("float32", "bfloat16") if device.type == "cpu" else ("float32", "bfloat16", "float16")
    dtypes = [resolve_dtype(d) for d in dtypes]
    iters = defaults["iters"] if iters is None else iters
    warmup = defaults["warmup"] if warmup is None else warmup
    check_counts(iters, warmup)
    results = []
    for dtype in dtypes:
        reason = unsupported_reason(dtype, device)
        for m, n, k in sizes:
            if reason:
                results.append(MatmulThroughput(str(device), m, n, k, dtype_name(dtype), None, reason))
                continue
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            touched = (m * k + k * n + m * n) * a.element_size()
            timing = time_iterations(lambda: torch.matmul(a, b), device, iters, warmup, working_set_bytes=touched)
            results.append(MatmulThroughput(str(device), m, n, k, dtype_name(dtype), timing))
    return results


@dataclass(frozen=True)
class OpThroughput:
    """One memory-bound op timed on ``device``, as a point for a roofline plot.

    ``flops`` and ``nbytes`` are the op's counts from ``labutils.costmodel.roofline`` (ideal
    minimum traffic: every input read once, every output written once).
    """

    op: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    flops: float
    nbytes: float
    timing: Timing

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of memory traffic."""
        return self.flops / self.nbytes

    @property
    def flop_per_s(self) -> float:
        return self.flops / self.timing.median_s

    @property
    def bytes_per_s(self) -> float:
        return self.nbytes / self.timing.median_s

    def __str__(self) -> str:
        return (f"{self.op} {'x'.join(map(str, self.shape))} {self.dtype} on {self.device}: "
                f"{self.flop_per_s / 1e9:,.2f} GFLOP/s, {self.bytes_per_s / 1e9:,.2f} GB/s, "
                f"intensity {self.intensity:.3f} FLOP/B")


def op_cost(op: str, shape: tuple[int, int], dtype: torch.dtype):
    """``labutils.costmodel.roofline``'s OpCost (flops, bytes) of one ``op`` on a (rows, cols) tensor.

    "add" is roofline's elementwise op with 2 reads, 1 write and 1 FLOP per element;
    "softmax" and "layernorm" are roofline's fused counts (5 and 8 FLOP per element).
    """
    from labutils.costmodel import roofline

    rows, cols = shape
    if op == "add":
        return roofline.elementwise(rows * cols, dtype_name(dtype), reads=2, writes=1, flops_per_element=1)
    if op == "softmax":
        return roofline.softmax(rows, cols, dtype_name(dtype))
    if op == "layernorm":
        return roofline.layernorm(rows, cols, dtype_name(dtype))
    raise ValueError(f"unknown op {op!r}: choose from {', '.join(OPS)}")


def _op_function(op: str, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The op, moving the bytes :func:`op_cost` counts: read x (and y) once, write one output.

    "add" and "softmax" write into an output allocated once (a fresh output per call would
    time the allocator: on the CPU, outputs over 32 MiB are mmapped and page-faulted every
    call). "layernorm" is ``torch.nn.functional.layer_norm``, the fused kernel: its ``.out``
    form (``aten.native_layer_norm.out``) computes into a new tensor and copies it, about
    twice the bytes counted. Its output comes from the allocator each call, which on a GPU
    reuses a cached block.
    """
    if op == "add":
        out, y = torch.empty_like(x), torch.ones_like(x)
        return lambda: torch.add(x, y, out=out)
    if op == "softmax":
        out = torch.empty_like(x)
        return lambda: torch.ops.aten._softmax.out(x, -1, False, out=out)
    weight = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    bias = torch.zeros_like(weight)
    return lambda: torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, 1e-5)


def op_throughput(ops: Sequence[str] = OPS, shape: tuple[int, int] | None = None, dtype="float32",
                  device=None, iters: int | None = None, warmup: int | None = None) -> list[OpThroughput]:
    """Time ``ops`` ("add": x + y; "softmax" and "layernorm" over the last dim) on a (rows, cols) tensor.

    Returns achieved FLOP/s and B/s with the op's intensity, so a notebook can place each
    op on the device's roofline. ``shape`` defaults to (2048, 2048) on the CPU (16 MiB per
    fp32 tensor, like ``memcpy_bandwidth``'s copy: a tensor that fits the caches measures
    cache bandwidth and lands above a roof drawn from a larger copy), (8192, 8192) on a GPU.
    """
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {unknown}: choose from {', '.join(OPS)}")
    device = resolve_device(device)
    defaults = _defaults(device)
    shape = tuple(defaults["op_shape"] if shape is None else shape)
    if len(shape) != 2 or not all(isinstance(s, int) and s > 0 for s in shape):
        raise ValueError(f"shape must be (rows, cols) of positive ints, got {shape!r}")
    dtype = resolve_dtype(dtype)
    if not dtype.is_floating_point:
        raise ValueError(f"op_throughput needs a floating dtype, got {dtype_name(dtype)}")
    iters = defaults["iters"] if iters is None else iters
    warmup = defaults["warmup"] if warmup is None else warmup
    x = torch.randn(shape, device=device).to(dtype)
    results = []
    for op in ops:
        cost = op_cost(op, shape, dtype)
        timing = time_iterations(_op_function(op, x), device, iters, warmup, working_set_bytes=int(cost.bytes))
        results.append(OpThroughput(op, shape, dtype_name(dtype), str(device), cost.flops, cost.bytes, timing))
    return results
