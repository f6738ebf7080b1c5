"""Timing one operation on one device: per-call samples in seconds, on the CPU or a CUDA GPU.

Also what every measurement shares: the device to measure on and dtypes by name. Re-exported
by :mod:`labutils.measure.bench`, which notebooks import.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from labutils.measure._cuda_timing import cuda_samples


#: Names accepted wherever a dtype is asked for (torch dtypes are accepted too).
DTYPE_NAMES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
    "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
}

def resolve_dtype(dtype) -> torch.dtype:
    """A torch dtype from a torch dtype or a name such as "bf16", "float32", "half"."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPE_NAMES:
        return DTYPE_NAMES[dtype.lower()]
    raise ValueError(f"unknown dtype {dtype!r}: use a torch dtype or one of {', '.join(DTYPE_NAMES)}")


def dtype_name(dtype: torch.dtype) -> str:
    """"bfloat16" for torch.bfloat16, and so on."""
    return str(dtype).removeprefix("torch.")


def resolve_device(device=None) -> torch.device:
    """The device to measure on: ``device`` if given, else the current CUDA device, else the CPU."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device} asked for but no CUDA GPU is visible: use device='cpu' or None")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"unsupported device {device}: use 'cpu', 'cuda' or 'cuda:N'")
    return device


def check_counts(iters: int, warmup: int) -> None:
    """``ValueError`` unless ``iters`` >= 1 and ``warmup`` >= 0, both integers."""
    if not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")


@dataclass(frozen=True)
class Timing:
    """Per-call times of one operation, in seconds (``samples_s`` in the order measured).

    On a GPU each sample is ``calls_per_sample`` calls (one batch between a pair of CUDA
    events, or cold calls each between its own), divided by the number of calls; on the CPU
    each sample is one call.
    """

    samples_s: tuple[float, ...]
    calls_per_sample: int = 1

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def spread(self) -> float:
        """(max - min) / median: 0.05 means the samples lie within 5% of the median's size."""
        return (self.max_s - self.min_s) / self.median_s if self.median_s > 0 else 0.0


def time_iterations(fn: Callable[[], object], device: torch.device, iters: int, warmup: int,
                    working_set_bytes: int | None = None, group=None) -> Timing:
    """Run ``fn`` ``warmup`` times, then take ``iters`` timing samples on ``device``.

    On CUDA each sample is a batch of calls between CUDA events, long enough
    (:func:`calls_per_batch`) that launch cost does not count; when ``working_set_bytes``
    (bytes the op touches) would fit in L2, the cache is flushed before every call and each
    call is timed alone. Inside a launched rank the calls per sample are the same on every
    rank (``fn`` may hold collectives): agreed over ``group`` when given (every rank of
    ``group`` must call this together), else one call per sample
    (:mod:`labutils.measure._cuda_timing`). On the CPU each call is timed with ``time.perf_counter``.
    """
    check_counts(iters, warmup)
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        samples, calls = cuda_samples(fn, device, iters, working_set_bytes, group)
        return Timing(tuple(samples), calls)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return Timing(tuple(samples))
