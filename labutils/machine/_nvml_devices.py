"""NVML, opened safely: the physical GPUs, their UUIDs, MIG mode and MIG devices.

``labutils.devices.backend`` and ``labutils.machine.hardware`` read the machine through this module, so a
machine without the NVIDIA driver or without nvidia-ml-py gives a reason, never an
exception. Memory in bytes.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


class NoGpu(Exception):
    """NVML cannot be used here; the message is the reason, for people to read."""


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance with its compute instance): its UUID ("MIG-..."),
    its own memory in bytes (``None`` where NVML does not say) and its name."""

    uuid: str
    memory_total_bytes: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class NvmlGpu:
    """A physical GPU: NVML index, UUID ("GPU-..."), MIG mode (``None``: the GPU has no MIG)."""

    index: int
    uuid: str | None
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()


@contextmanager
def open_nvml():
    """pynvml, initialised; raises :class:`NoGpu` with a reason when NVML cannot be used."""
    try:
        import pynvml
    except ImportError:
        raise NoGpu("no GPU: nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NoGpu("no GPU: the NVML library was not found (no NVIDIA driver on this machine)") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise NoGpu("no GPU: the NVIDIA driver is not loaded") from None
    except pynvml.NVMLError as exc:
        raise NoGpu(f"no GPU: NVML could not start ({exc})") from None
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def ask(pynvml, name: str, *args):
    """``pynvml.<name>(*args)``, or ``None`` when NVML says the value is not supported or not
    available, or this nvidia-ml-py has no such function."""
    query = getattr(pynvml, name, None)
    if query is None:
        return None
    try:
        return query(*args)
    except pynvml.NVMLError:
        return None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def cuda_version_text(version: int | None) -> str | None:
    """NVML's CUDA version number as text: 12040 -> "12.4"."""
    return f"{version // 1000}.{version % 1000 // 10}" if version else None


def mig_devices(pynvml, handle) -> tuple[MigDevice, ...]:
    """The MIG devices of a GPU in MIG mode (empty slots skipped), each with its own memory."""
    slots = ask(pynvml, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    devices = []
    for slot in range(slots):
        mig = ask(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:
            continue
        memory = ask(pynvml, "nvmlDeviceGetMemoryInfo", mig)
        total = getattr(memory, "total", None)
        devices.append(MigDevice(
            uuid=_text(ask(pynvml, "nvmlDeviceGetUUID", mig)) or f"MIG slot {slot}",
            memory_total_bytes=int(total) if total is not None else None,
            name=_text(ask(pynvml, "nvmlDeviceGetName", mig)),
        ))
    return tuple(devices)


def read_gpu(pynvml, index: int, handle) -> NvmlGpu:
    """UUID and MIG state of the GPU at NVML ``index``."""
    mode = ask(pynvml, "nvmlDeviceGetMigMode", handle)
    enabled = None if mode is None else bool(mode[0] == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1))
    return NvmlGpu(
        index=index,
        uuid=_text(ask(pynvml, "nvmlDeviceGetUUID", handle)),
        mig_enabled=enabled,
        mig_devices=mig_devices(pynvml, handle) if enabled else (),
    )


def physical_gpus() -> tuple[list[NvmlGpu], int | None]:
    """Every physical GPU NVML lists and the driver's CUDA version (12040 for 12.4, or ``None``).

    Raises :class:`NoGpu` when NVML cannot be used.
    """
    with open_nvml() as pynvml:
        count = ask(pynvml, "nvmlDeviceGetCount") or 0
        gpus = []
        for index in range(count):
            handle = ask(pynvml, "nvmlDeviceGetHandleByIndex", index)
            gpus.append(read_gpu(pynvml, index, handle) if handle is not None else NvmlGpu(index, None))
        return gpus, ask(pynvml, "nvmlSystemGetCudaDriverVersion")
