"""Which torch.distributed backend a launch uses, and why.

``backend="auto"`` picks NCCL with one GPU per rank when at least ``world_size`` CUDA GPUs
are visible, otherwise gloo on CPU. GPUs are counted through NVML (honouring
``CUDA_VISIBLE_DEVICES``) so that deciding never initialises CUDA in the caller, and a
kernel without torch imported stays light.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

BACKENDS = ("auto", "gloo", "nccl")


class BackendUnavailableError(ValueError):
    """The backend asked for cannot run here (e.g. NCCL with fewer GPUs than ranks)."""


@dataclass(frozen=True)
class BackendChoice:
    """The outcome of choosing: ``backend`` is "gloo" or "nccl", ``device_type`` "cpu" or "cuda"."""

    backend: str
    device_type: str
    reason: str


def _nvml_gpu_count() -> int:
    """Number of GPUs NVML reports (0 without a driver or without nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def visible_gpu_count() -> int:
    """CUDA GPUs this process may use: NVML's count restricted by ``CUDA_VISIBLE_DEVICES``.

    An empty or ``-1``-prefixed ``CUDA_VISIBLE_DEVICES`` hides every GPU, as CUDA does.
    """
    physical = _nvml_gpu_count()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if physical == 0 or mask is None:
        return physical
    visible = 0
    for item in mask.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break  # CUDA stops enumerating at the first invalid entry
        if item.isdigit() and int(item) >= physical:
            break
        visible += 1
    return visible


def _torch_has_cuda_and_nccl() -> bool:
    """Whether the installed torch is a CUDA build with NCCL (imports torch; call only with GPUs)."""
    import torch
    import torch.distributed as dist

    return torch.version.cuda is not None and dist.is_nccl_available()


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
        if not _torch_has_cuda_and_nccl():
            raise BackendUnavailableError(
                "backend='nccl' needs a CUDA build of torch with NCCL; this torch is a CPU build. "
                "Install the CUDA build (pip install torch==2.13.0 on a GPU node) or use backend='gloo'."
            )
        return BackendChoice("nccl", "cuda", f"NCCL, one GPU per rank ({gpus} visible)")
    # auto
    if gpus == 0:
        return BackendChoice("gloo", "cpu", "gloo on CPU: no CUDA GPU visible")
    if gpus < world_size:
        return BackendChoice(
            "gloo", "cpu", f"gloo on CPU: {world_size} ranks asked but only {gpus} GPU(s) visible"
        )
    if not _torch_has_cuda_and_nccl():
        return BackendChoice("gloo", "cpu", "gloo on CPU: this torch is a CPU build (no NCCL)")
    return BackendChoice("nccl", "cuda", f"NCCL, one GPU per rank ({gpus} visible)")
