"""GPUs in EXCLUSIVE_PROCESS compute mode, and a notebook kernel that would block its own ranks.

On many clusters each GPU admits one process (``nvidia-smi -c EXCLUSIVE_PROCESS``). A
kernel that has used a GPU (a single-GPU measurement in a chapter, ``x.cuda()``) holds a
CUDA context there, and the rank later given that GPU cannot create its own: under NCCL,
rank 0 fails on ``cuda:0``. Everything here reads NVML only, so asking never creates a
CUDA context in the caller; :func:`check_ranks_can_own` fails before any rank starts, with
the way out.
"""
from __future__ import annotations

import os

from labutils.machine._nvml_devices import NoGpu, ask, open_nvml

#: NVML's compute modes (``nvmlDeviceGetComputeMode``) by name
MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


class GpuTakenByThisProcess(RuntimeError):
    """A GPU the ranks need is exclusive and this process already holds a CUDA context on it."""


def compute_modes() -> dict[int, str]:
    """{NVML index: "DEFAULT" / "EXCLUSIVE_PROCESS" / "PROHIBITED"} of every GPU; {} without NVML."""
    try:
        with open_nvml() as pynvml:
            modes = {}
            for index in range(ask(pynvml, "nvmlDeviceGetCount") or 0):
                handle = ask(pynvml, "nvmlDeviceGetHandleByIndex", index)
                mode = ask(pynvml, "nvmlDeviceGetComputeMode", handle) if handle is not None else None
                if mode is not None:
                    modes[index] = MODES.get(mode, str(mode))
            return modes
    except NoGpu:
        return {}


def _holders(pynvml, handle) -> set[int]:
    """Process ids with a CUDA context on the GPU (NVML's running compute processes)."""
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3"):
        found = ask(pynvml, name, handle)
        if found is not None:
            return {int(p.pid) for p in found}
    return set()


def exclusive_gpus_held_here(gpu_indexes) -> list[int]:
    """Those of ``gpu_indexes`` (NVML indexes) in EXCLUSIVE_PROCESS mode where this process holds a context."""
    me, held = os.getpid(), []
    try:
        with open_nvml() as pynvml:
            for index in gpu_indexes:
                handle = ask(pynvml, "nvmlDeviceGetHandleByIndex", index)
                if handle is None or ask(pynvml, "nvmlDeviceGetComputeMode", handle) != 3:
                    continue
                if me in _holders(pynvml, handle):
                    held.append(index)
    except NoGpu:
        return []
    return held


def check_ranks_can_own(world_size: int) -> None:
    """Raise :class:`GpuTakenByThisProcess` when a GPU of ranks 0..world_size-1 is exclusive and
    already held by this process (the notebook kernel); nothing otherwise."""
    from labutils.devices.backend import visible_cuda_devices

    visible = visible_cuda_devices()[:world_size]
    held = exclusive_gpus_held_here(sorted({device.gpu_index for device in visible}))
    if not held:
        return
    ranks = [device.cuda_ordinal for device in visible if device.gpu_index in held]
    raise GpuTakenByThisProcess(
        f"GPU{', GPU'.join(map(str, held))} {'is' if len(held) == 1 else 'are'} in EXCLUSIVE_PROCESS mode and "
        f"this kernel already holds a CUDA context there, so rank{'s' if len(ranks) > 1 else ''} "
        f"{', '.join(map(str, ranks))} could not use it. Restart the kernel and launch the ranks before "
        "using the GPU in the kernel (run GPU work inside the ranks), or use backend='gloo'.")
