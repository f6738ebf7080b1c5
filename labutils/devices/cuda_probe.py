"""Whether CUDA actually works here, asked once per process and cached.

A CUDA build of torch and GPUs listed by NVML are not enough: with a driver older than the
CUDA the wheel was built for, or with NVIDIA's fabric manager down on an NVSwitch machine
(CUDA error 802, "system not yet initialized"), NVML still lists every GPU and every rank
fails in ``torch.cuda.set_device``. :func:`cuda_health` checks, in order:

1. torch is installed, is a CUDA build and has NCCL;
2. the newest CUDA the driver supports (NVML ``nvmlSystemGetCudaDriverVersion``) has at
   least the major version torch was built with (``torch.version.cuda``); within one major
   version CUDA's minor-version compatibility lets an older driver run the wheel, so that
   case is left to step 3. A mismatch (or a CPU build on a node with a driver) is reported
   with the pip command that installs the matching build (:mod:`labutils.devices.cuda_build`);
3. a throwaway Python process calls ``torch.cuda.init()`` and ``torch.cuda.device_count()``
   (CUDA is never initialised in the caller, so a notebook kernel can still fork ranks).

The answer is cached per value of ``CUDA_VISIBLE_DEVICES``; ``cuda_health.cache_clear()``
forgets it.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass

from labutils.devices.cuda_build import mismatch
from labutils.machine._nvml_devices import NoGpu, cuda_version_text, physical_gpus

#: the code the throwaway process runs: it prints the CUDA device count, or fails with CUDA's error
PROBE_CODE = "import torch; torch.cuda.init(); print(torch.cuda.device_count())"
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class CudaHealth:
    """``usable``: NCCL with CUDA devices can run here. ``reason``: why not, or what was found.
    ``device_count``: CUDA devices the probe saw (0 when not usable)."""

    usable: bool
    reason: str
    device_count: int = 0


def _torch_build() -> tuple[str | None, str | None]:
    """(torch's CUDA version, or None; a reason when torch cannot run NCCL)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None, "torch is not installed"
    if torch.version.cuda is None:
        return None, "this torch is a CPU build (no CUDA, no NCCL)"
    if not dist.is_nccl_available():
        return torch.version.cuda, f"this torch (CUDA {torch.version.cuda}) has no NCCL"
    return torch.version.cuda, None


def driver_cuda() -> str | None:
    """The newest CUDA the NVIDIA driver supports ("12.8", from NVML); None without a driver."""
    try:
        _, driver = physical_gpus()
    except NoGpu:
        return None
    return cuda_version_text(driver)


def _driver_reason(built: str | None) -> str | None:
    """Why the driver cannot run a wheel built for CUDA ``built`` (None: a CPU build), with the
    fix (:func:`labutils.devices.cuda_build.mismatch`); ``None`` when it may."""
    try:
        physical_gpus()
    except NoGpu as exc:
        return str(exc)
    return mismatch(built, driver_cuda())  # NVML not saying: the probe process decides


def _probe_process() -> CudaHealth:
    """Initialise CUDA in a throwaway process; its error, if any, is the reason."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE_CODE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False, env=dict(os.environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CudaHealth(False, f"CUDA could not be probed ({exc})")
    lines = (done.stdout or "").strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].strip().isdigit():
        errors = [line for line in (done.stderr or "").strip().splitlines() if line.strip()]
        message = errors[-1].strip() if errors else f"exit status {done.returncode}"
        return CudaHealth(False, f"CUDA cannot be initialised here ({message})")
    count = int(lines[-1])
    if count == 0:
        return CudaHealth(False, "CUDA initialised but sees no device")
    return CudaHealth(True, f"CUDA works ({count} device{'s' if count != 1 else ''})", count)


@functools.lru_cache(maxsize=None)
def _health_for(mask: str | None) -> CudaHealth:
    built, reason = _torch_build()
    if reason is not None:
        return CudaHealth(False, (mismatch(None, driver_cuda()) if built is None else None) or reason)
    reason = _driver_reason(built)
    if reason is not None:
        return CudaHealth(False, reason)
    return _probe_process()


def cuda_health() -> CudaHealth:
    """Whether NCCL on CUDA can run in this process's environment (cached; see the module doc)."""
    return _health_for(os.environ.get("CUDA_VISIBLE_DEVICES"))


cuda_health.cache_clear = _health_for.cache_clear
