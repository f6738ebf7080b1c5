"""What is in this machine: GPUs (through NVML), CPUs and NUMA nodes, the GPU topology.

    from labutils.machine import hardware
    hardware.inventory()          # everything below, shown as a readable report in a notebook
    hardware.list_gpus()          # [GpuInfo(...), ...]; [] on a machine without GPUs
    hardware.cpu_info()           # CPU model, cores, NUMA nodes
    hardware.live_topology()      # `nvidia-smi topo -m` parsed (labutils.machine.topology); None without it
    hardware.peer_access()        # which GPU can read which GPU's memory directly (P2P)

Nothing here raises on a machine without GPUs, without the NVIDIA driver or without
nvidia-ml-py: the answer is an empty list, ``None``, or a result whose ``reason`` says
"no GPU: ..." and why. Units: bytes for memory (GB = 1e9 B when printed), PCIe links as
generation and lane count.

GPUs are listed in NVML order (PCI bus order, all physical GPUs, as ``nvidia-smi`` numbers
them). CUDA numbers only the devices this process may use (``CUDA_VISIBLE_DEVICES``), so
each GPU carries its CUDA ordinal ("cuda:0") or "not visible": with
``CUDA_VISIBLE_DEVICES=4,5,6,7``, rank 0's ``cuda:0`` is GPU4. A GPU in MIG mode lists its
MIG devices, each with its own memory.
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from labutils.devices.backend import visible_gpu_count
from labutils.devices.cuda_visible import ENV, visible_devices
from labutils.machine._gpu_records import GB, GiB, GpuInfo, GpuReport, PeerAccess, memory_text
from labutils.machine._host_cpu import (
    CpuInfo,
    NumaNode,
    cpu_info,
    cpus_from_mask_words,
    numa_nodes,
    pci_local_cpus,
    pci_numa_node,
    sysfs_pci_address,
)
from labutils.machine._nvml_devices import MigDevice, NoGpu, ask, cuda_version_text, open_nvml, read_gpu
from labutils.machine.topology import Topology, format_cpu_list, parse_cpu_list, parse_topology

__all__ = [
    "GB", "GiB", "CpuInfo", "GpuInfo", "GpuReport", "Inventory", "MigDevice", "NumaNode", "PeerAccess",
    "cpu_info", "cpus_from_mask_words", "format_cpu_list", "gpu_report", "inventory", "list_gpus", "live_topology",
    "live_topology_and_reason", "memory_text", "numa_nodes", "parse_cpu_list", "parse_topology",
    "pci_local_cpus", "pci_numa_node", "peer_access", "sysfs_pci_address", "visible_gpu_count",
]

_TOPO_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Inventory:
    """Everything :func:`inventory` found; ``str()`` or a notebook cell shows it as a report."""

    gpus: GpuReport
    cpu: CpuInfo
    topology: Topology | None
    topology_reason: str | None
    peer_access: PeerAccess

    def summary(self) -> str:
        if self.topology is not None:
            ordinals = {f"GPU{gpu.index}": gpu.cuda_ordinal for gpu in self.gpus.gpus}
            topology = self.topology.summary(cuda_ordinals=ordinals if ordinals else None)
        else:
            topology = self.topology_reason
        sections = [
            ("GPUs", self.gpus.summary()),
            ("CPU", self.cpu.summary()),
            ("Topology (nvidia-smi topo -m)", topology),
            ("Peer-to-peer access", self.peer_access.summary()),
        ]
        return "\n".join(
            f"{title}:\n" + "\n".join(f"  {line}" for line in (text or "").splitlines())
            for title, text in sections
        )

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"


# ----------------------------------------------------------------------------- GPUs (NVML)


def gpu_report(sys_root: str | os.PathLike = "/") -> GpuReport:
    """All GPUs through NVML, with NUMA node and local CPUs from sysfs under ``sys_root``,
    each tagged with its CUDA ordinal in this process (``CUDA_VISIBLE_DEVICES`` applied).

    Never raises for a missing driver, library or GPU: ``reason`` says what is missing.
    """
    try:
        with open_nvml() as pynvml:
            count = ask(pynvml, "nvmlDeviceGetCount") or 0
            if count == 0:
                return GpuReport(reason="no GPU: NVML found no NVIDIA GPU")
            gpus = _with_cuda_ordinals([_gpu_info(pynvml, index, Path(sys_root)) for index in range(count)])
            driver = ask(pynvml, "nvmlSystemGetDriverVersion")
            return GpuReport(
                gpus=gpus,
                driver_version=driver.decode() if isinstance(driver, bytes) else driver,
                cuda_driver_version=cuda_version_text(ask(pynvml, "nvmlSystemGetCudaDriverVersion")),
                visible_gpus=sum(gpu.cuda_ordinal is not None for gpu in gpus),
            )
    except NoGpu as exc:
        return GpuReport(reason=str(exc))


def _with_cuda_ordinals(gpus: list[GpuInfo]) -> tuple[GpuInfo, ...]:
    """The GPUs with ``cuda_ordinal`` (and the visible MIG device) set from ``CUDA_VISIBLE_DEVICES``."""
    visible = visible_devices(
        os.environ.get(ENV),
        [gpu.uuid or "" for gpu in gpus],
        [bool(gpu.mig_enabled) for gpu in gpus],
        {mig.uuid: gpu.index for gpu in gpus for mig in gpu.mig_devices},
    )
    by_index = {device.gpu_index: device for device in visible}
    return tuple(
        replace(gpu, cuda_ordinal=by_index[gpu.index].cuda_ordinal, visible_mig_uuid=by_index[gpu.index].mig_uuid)
        if gpu.index in by_index else gpu
        for gpu in gpus
    )


def list_gpus() -> list[GpuInfo]:
    """The GPUs of :func:`gpu_report` as a list; ``[]`` without GPUs."""
    return list(gpu_report().gpus)


def _gpu_info(pynvml, index: int, sys_root: Path) -> GpuInfo:
    handle = ask(pynvml, "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuInfo(index=index, name="unavailable (NVML could not open this GPU)")
    memory = ask(pynvml, "nvmlDeviceGetMemoryInfo", handle)
    total = getattr(memory, "total", None)
    capability = ask(pynvml, "nvmlDeviceGetCudaComputeCapability", handle)
    bus_id = _bus_id(ask(pynvml, "nvmlDeviceGetPciInfo", handle))
    cpus = pci_local_cpus(bus_id, sys_root) if bus_id else ()
    if not cpus:
        mask = ask(pynvml, "nvmlDeviceGetCpuAffinity", handle, _mask_words())
        cpus = cpus_from_mask_words(mask) if mask is not None else ()
    nvml = read_gpu(pynvml, index, handle)
    name = ask(pynvml, "nvmlDeviceGetName", handle)
    return GpuInfo(
        index=index,
        name=(name.decode() if isinstance(name, bytes) else name) or "unknown GPU",
        memory_total_bytes=int(total) if total is not None else None,
        compute_capability=tuple(capability) if capability is not None else None,
        pci_bus_id=bus_id,
        pcie_generation_max=ask(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_width_max=ask(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        pcie_generation_current=ask(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_width_current=ask(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        nvlinks_up=_nvlinks_up(pynvml, handle),
        numa_node=pci_numa_node(bus_id, sys_root) if bus_id else None,
        cpus=cpus,
        uuid=nvml.uuid,
        mig_enabled=nvml.mig_enabled,
        mig_devices=nvml.mig_devices,
    )


def _bus_id(pci) -> str | None:
    """The sysfs PCI address of NVML's PCI info, ``None`` when absent or in an unknown form."""
    try:
        return sysfs_pci_address(pci.busId) if pci is not None else None
    except ValueError:
        return None


def _nvlinks_up(pynvml, handle) -> int | None:
    """Active NVLinks; ``None`` when no link answers (the GPU has no NVLink)."""
    answered = up = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = ask(pynvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        answered += 1
        up += int(state == pynvml.NVML_FEATURE_ENABLED)
    return up if answered else None


def _mask_words() -> int:
    """64-bit words NVML needs to describe every CPU of this machine."""
    return max(1, -(-(os.cpu_count() or 1) // 64))


# ----------------------------------------------------------------------------- topology, P2P


def live_topology(timeout_s: float = _TOPO_TIMEOUT_S) -> Topology | None:
    """``nvidia-smi topo -m`` of this machine, parsed; ``None`` without nvidia-smi or when it fails."""
    return live_topology_and_reason(timeout_s)[0]


def live_topology_and_reason(timeout_s: float = _TOPO_TIMEOUT_S) -> tuple[Topology | None, str | None]:
    """``(topology, None)``, or ``(None, reason)`` saying why there is none ("not available: ...")."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None, "not available: nvidia-smi not found (no NVIDIA driver on this machine)"
    try:
        done = subprocess.run(
            [executable, "topo", "-m"], capture_output=True, text=True, errors="replace",
            timeout=timeout_s, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"not available: nvidia-smi topo -m failed ({exc})"
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        return None, f"not available: nvidia-smi topo -m exited {done.returncode} ({message[0] if message else 'no message'})"
    try:
        return parse_topology(done.stdout), None
    except ValueError as exc:
        return None, f"not available: could not read nvidia-smi topo -m ({exc})"


def peer_access() -> PeerAccess:
    """Peer-to-peer access between the CUDA GPUs this process sees
    (``torch.cuda.can_device_access_peer``); a ``reason`` instead when there are none."""
    count = visible_gpu_count()
    if count == 0:
        return PeerAccess(reason="no GPU: no CUDA GPU visible")
    try:
        import torch

        if not torch.cuda.is_available():
            return PeerAccess(reason="no GPU: this torch cannot use CUDA (CPU build or driver mismatch)")
        count = torch.cuda.device_count()
        matrix = tuple(
            tuple(i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(count))
            for i in range(count)
        )
    except (ImportError, RuntimeError) as exc:
        return PeerAccess(reason=f"no GPU: CUDA could not be asked ({exc})")
    return PeerAccess(can_access=matrix)


def inventory() -> Inventory:
    """GPUs, CPUs, live topology and peer access in one report (never raises for a missing GPU)."""
    topology, reason = live_topology_and_reason()
    return Inventory(
        gpus=gpu_report(),
        cpu=cpu_info(),
        topology=topology,
        topology_reason=reason,
        peer_access=peer_access(),
    )
