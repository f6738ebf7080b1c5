"""Which torch.distributed backend a launch uses, and why.

``backend="auto"`` picks NCCL with one GPU per rank when at least ``world_size`` CUDA
devices are visible and CUDA works, otherwise gloo on CPU. Devices are counted through NVML
with ``CUDA_VISIBLE_DEVICES`` applied as CUDA applies it (:mod:`labutils.devices.cuda_visible`), so
deciding never initialises CUDA in the caller; whether CUDA works (the driver new enough for
this torch, the GPUs initialisable) is probed once in a throwaway process
(:func:`labutils.devices.cuda_probe.cuda_health`) and the reason of a fall-back is in the choice.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from labutils.devices.cuda_probe import cuda_health
from labutils.devices.cuda_visible import ENV, VisibleDevice, visible_devices
from labutils.machine._nvml_devices import NoGpu, physical_gpus

BACKENDS = ("auto", "gloo", "nccl")


class BackendUnavailableError(ValueError):
    """The backend asked for cannot run here (e.g. NCCL with fewer GPUs than ranks)."""


@dataclass(frozen=True)
class BackendChoice:
    """The outcome of choosing: ``backend`` is "gloo" or "nccl", ``device_type`` "cpu" or "cuda"."""

    backend: str
    device_type: str
    reason: str


def visible_cuda_devices() -> list[VisibleDevice]:
    """The CUDA devices this process may use, each tied to its physical GPU (NVML index).

    ``CUDA_VISIBLE_DEVICES`` is applied as CUDA applies it (:mod:`labutils.devices.cuda_visible`):
    ordinals, ``GPU-`` UUIDs and ``MIG-`` UUIDs, a repeated device empties the list, the
    first invalid entry ends it, and a process gets at most one MIG device. ``[]`` without
    NVML (no driver, no nvidia-ml-py) or without GPUs.
    """
    try:
        gpus, _ = physical_gpus()
    except NoGpu:
        return []
    return visible_devices(
        os.environ.get(ENV),
        [gpu.uuid or "" for gpu in gpus],
        [bool(gpu.mig_enabled) for gpu in gpus],
        {mig.uuid: gpu.index for gpu in gpus for mig in gpu.mig_devices},
    )


def visible_gpu_count() -> int:
    """CUDA devices this process may use (:func:`visible_cuda_devices`), counted without
    initialising CUDA."""
    return len(visible_cuda_devices())


def choose_backend(backend: str, world_size: int, gpu_count: int | None = None) -> BackendChoice:
    """Resolve ``backend`` ("auto", "gloo" or "nccl") for ``world_size`` ranks on this machine.

    Raises ``ValueError`` for an unknown name and ``BackendUnavailableError`` when NCCL is
    asked for explicitly but cannot give every rank its own GPU.
    """
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    backend = backend.lower()
    gpus = visible_gpu_count() if gpu_count is None else gpu_count
    if backend == "gloo":
        return BackendChoice("gloo", "cpu", "gloo on CPU, as asked")
    if backend == "nccl":
        if gpus < world_size:
            raise BackendUnavailableError(
                f"backend='nccl' needs one GPU per rank: {world_size} ranks asked, "
                f"{gpus} GPU{'s' if gpus != 1 else ''} visible. Use at most {gpus} ranks, "
                "or backend='gloo' (CPU), or backend='auto' to fall back to gloo."
                if gpus
                else f"backend='nccl' needs one GPU per rank and no CUDA GPU is visible here "
                f"({world_size} ranks asked). Use backend='gloo' or backend='auto' to run on CPU."
            )
        health = cuda_health()
        if not health.usable:
            raise BackendUnavailableError(
                f"backend='nccl' cannot run here: {health.reason}. Use backend='gloo' (CPU), "
                "or backend='auto' to fall back to gloo."
            )
        return BackendChoice("nccl", "cuda", f"NCCL, one GPU per rank ({gpus} visible)")
    # auto
    if gpus == 0:
        return BackendChoice("gloo", "cpu", "gloo on CPU: no CUDA GPU visible")
    if gpus < world_size:
        return BackendChoice(
            "gloo", "cpu", f"gloo on CPU: {world_size} ranks asked but only {gpus} GPU(s) visible"
        )
    health = cuda_health()
    if not health.usable:
        return BackendChoice("gloo", "cpu", f"gloo on CPU: {health.reason}")
    return BackendChoice("nccl", "cuda", f"NCCL, one GPU per rank ({gpus} visible)")
