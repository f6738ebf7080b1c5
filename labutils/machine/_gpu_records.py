"""What :mod:`labutils.machine.hardware` reports about GPUs: one record per GPU, the whole report, peer access.

Re-exported by :mod:`labutils.machine.hardware`. Memory in bytes (GB = 1e9 B, GiB = 2^30 B when printed).
"""
from __future__ import annotations

from dataclasses import dataclass

from labutils.machine._nvml_devices import MigDevice
from labutils.machine.topology import format_cpu_list

GB = 1e9  # bytes, for printing memory sizes
GiB = 2**30  # bytes: GPU memory is built in binary sizes ("80GB" H100 = 80 GiB = 85.9 GB)


def memory_text(nbytes: int | None) -> str:
    """A GPU memory size both ways: 85_899_345_920 -> "85.9 GB (80.0 GiB)"; ``None`` -> "memory unknown"."""
    if nbytes is None:
        return "memory unknown"
    return f"{nbytes / GB:.1f} GB ({nbytes / GiB:.1f} GiB)"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it; a field is ``None`` where NVML or sysfs cannot tell.

    ``index``: NVML index (PCI bus order, what ``nvidia-smi`` and its ``topo -m`` call GPU<index>).
    ``memory_total_bytes``: device memory in bytes. ``compute_capability``: (major, minor),
    e.g. (9, 0) for Hopper. ``pci_bus_id``: sysfs form "0000:18:00.0". ``pcie_*``: PCIe
    generation and lane count, the maximum the GPU and slot support and the current one (an
    idle GPU drops to a lower generation to save power). ``nvlinks_up``: NVLinks in the
    active state (``None``: the GPU has no NVLink). ``numa_node``: the NUMA node of the
    GPU's PCIe slot (``None`` on single-node machines that report -1). ``cpus``: CPUs local
    to the GPU (pin its rank's threads there). ``uuid``: "GPU-...". ``cuda_ordinal``: the
    CUDA device number this process gives the GPU (or its visible MIG device,
    ``visible_mig_uuid``) under ``CUDA_VISIBLE_DEVICES``; ``None``: not visible here.
    ``mig_enabled``: MIG mode (``None``: the GPU has no MIG); ``mig_devices``: its MIG
    devices, each with its own memory.
    """

    index: int
    name: str
    memory_total_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    pci_bus_id: str | None = None
    pcie_generation_max: int | None = None
    pcie_width_max: int | None = None
    pcie_generation_current: int | None = None
    pcie_width_current: int | None = None
    nvlinks_up: int | None = None
    numa_node: int | None = None
    cpus: tuple[int, ...] = ()
    uuid: str | None = None
    cuda_ordinal: int | None = None
    visible_mig_uuid: str | None = None
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()

    @property
    def visibility(self) -> str:
        """"cuda:0", "cuda:0 = MIG-..." or "not visible" (to this process's CUDA)."""
        if self.cuda_ordinal is None:
            return "not visible"
        if self.visible_mig_uuid is not None:
            return f"cuda:{self.cuda_ordinal} = {self.visible_mig_uuid}"
        return f"cuda:{self.cuda_ordinal}"

    def summary(self) -> str:
        """One line: "GPU4 [cuda:0] NVIDIA H100 80GB HBM3, 85.9 GB (80.0 GiB), compute capability 9.0,
        PCIe Gen5 x16 (now Gen5 x16), 18 NVLinks up, NUMA node 0, CPUs 0-47"; a GPU in MIG
        mode adds one line per MIG device with its own memory."""
        parts = [f"GPU{self.index} [{self.visibility}] {self.name}", memory_text(self.memory_total_bytes)]
        if self.compute_capability is not None:
            parts.append(f"compute capability {self.compute_capability[0]}.{self.compute_capability[1]}")
        if self.pcie_generation_max is not None and self.pcie_width_max is not None:
            pcie = f"PCIe Gen{self.pcie_generation_max} x{self.pcie_width_max}"
            if self.pcie_generation_current is not None and self.pcie_width_current is not None:
                pcie += f" (now Gen{self.pcie_generation_current} x{self.pcie_width_current})"
            parts.append(pcie)
        parts.append("no NVLink" if self.nvlinks_up is None else f"{self.nvlinks_up} NVLinks up")
        if self.numa_node is not None:
            parts.append(f"NUMA node {self.numa_node}")
        if self.cpus:
            parts.append(f"CPUs {format_cpu_list(self.cpus)}")
        if self.mig_enabled:
            parts.append(f"MIG mode on, {len(self.mig_devices)} MIG device{'s' if len(self.mig_devices) != 1 else ''}"
                         " (a rank gets one MIG device, not this whole GPU)")
        lines = [", ".join(parts)]
        for mig in self.mig_devices:
            mark = f" [cuda:{self.cuda_ordinal}]" if mig.uuid == self.visible_mig_uuid else ""
            lines.append(f"  {mig.uuid}{mark} {mig.name or 'MIG device'}, {memory_text(mig.memory_total_bytes)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class GpuReport:
    """All GPUs NVML sees. ``reason`` is set ("no GPU: ...") exactly when ``gpus`` is empty.

    ``driver_version``: e.g. "580.159.04". ``cuda_driver_version``: the newest CUDA the
    driver supports, e.g. "13.0". ``visible_gpus``: CUDA devices this process may use.
    """

    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    visible_gpus: int = 0
    reason: str | None = None

    def summary(self) -> str:
        if not self.gpus:
            return self.reason or "no GPU"
        head = f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}"
        head += f" (driver {self.driver_version or 'unknown'}, supports CUDA {self.cuda_driver_version or 'unknown'}"
        head += f", {self.visible_gpus} visible to CUDA here)"
        lines = [head]
        for gpu in self.gpus:
            lines.extend(f"  {line}" for line in gpu.summary().splitlines())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class PeerAccess:
    """``can_access[i][j]``: CUDA device i can read and write device j's memory directly
    (peer-to-peer over NVLink or PCIe). The diagonal is True (a GPU reaches its own memory).
    Empty with ``reason`` ("no GPU: ...") when it cannot be asked."""

    can_access: tuple[tuple[bool, ...], ...] = ()
    reason: str | None = None

    def summary(self) -> str:
        if self.reason is not None:
            return self.reason
        count = len(self.can_access)
        if count == 1:
            return "1 GPU: no peer to access"
        missing = [
            f"cuda:{i}->cuda:{j}"
            for i in range(count)
            for j in range(count)
            if i != j and not self.can_access[i][j]
        ]
        if not missing:
            return f"every pair of the {count} GPUs has peer-to-peer access"
        return f"no peer-to-peer access for {', '.join(missing)} (copies go through host memory)"

    def __str__(self) -> str:
        return self.summary()
