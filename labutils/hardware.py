"""What is in this machine: GPUs (through NVML), CPUs and NUMA nodes, the GPU topology.

    from labutils import hardware
    hardware.inventory()          # everything below, shown as a readable report in a notebook
    hardware.list_gpus()          # [GpuInfo(...), ...]; [] on a machine without GPUs
    hardware.cpu_info()           # CPU model, cores, NUMA nodes
    hardware.live_topology()      # `nvidia-smi topo -m` parsed (labutils.topology); None without it
    hardware.peer_access()        # which GPU can read which GPU's memory directly (P2P)

Nothing here raises on a machine without GPUs, without the NVIDIA driver or without
nvidia-ml-py: the answer is an empty list, ``None``, or a result whose ``reason`` says
"no GPU: ..." and why. Units: bytes for memory (GB = 1e9 B when printed), PCIe links as
generation and lane count.

GPUs are listed in NVML order (PCI bus order, all physical GPUs); CUDA numbers the
GPUs it may use (``CUDA_VISIBLE_DEVICES``) on its own, so ``visible_gpus`` is counted
separately, with :func:`labutils.backend.visible_gpu_count`.
"""
from __future__ import annotations

import html
import os
import platform
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labutils.backend import visible_gpu_count
from labutils.topology import Topology, format_cpu_list, parse_cpu_list, parse_topology

GB = 1e9  # bytes, for printing memory sizes
GiB = 2**30  # bytes: GPU memory is built in binary sizes ("80GB" H100 = 80 GiB = 85.9 GB)
_TOPO_TIMEOUT_S = 10.0


def memory_text(nbytes: int) -> str:
    """A GPU memory size both ways: 85_899_345_920 -> "85.9 GB (80.0 GiB)"."""
    return f"{nbytes / GB:.1f} GB ({nbytes / GiB:.1f} GiB)"


class _NoGpu(Exception):
    """NVML cannot be used here; the message is the reason, for people to read."""


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it; a field is ``None`` where NVML or sysfs cannot tell.

    ``index``: NVML index (PCI bus order). ``memory_total_bytes``: device memory in bytes.
    ``compute_capability``: (major, minor), e.g. (9, 0) for Hopper. ``pci_bus_id``: sysfs
    form "0000:18:00.0". ``pcie_*``: PCIe generation and lane count, the maximum the GPU
    and slot support and the current one (an idle GPU drops to a lower generation to save
    power). ``nvlinks_up``: NVLinks in the active state (``None``: the GPU has no NVLink).
    ``numa_node``: the NUMA node of the GPU's PCIe slot (``None`` on single-node machines
    that report -1). ``cpus``: CPUs local to the GPU (pin its rank's threads there).
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

    def summary(self) -> str:
        """One line: "GPU0 NVIDIA H100 80GB HBM3, 85.9 GB (80.0 GiB), compute capability 9.0,
        PCIe Gen5 x16 (now Gen5 x16), 18 NVLinks up, NUMA node 0, CPUs 0-47"."""
        parts = [f"GPU{self.index} {self.name}"]
        if self.memory_total_bytes is not None:
            parts.append(memory_text(self.memory_total_bytes))
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
        return ", ".join(parts)


@dataclass(frozen=True)
class GpuReport:
    """All GPUs NVML sees. ``reason`` is set ("no GPU: ...") exactly when ``gpus`` is empty.

    ``driver_version``: e.g. "580.159.04". ``cuda_driver_version``: the newest CUDA the
    driver supports, e.g. "13.0". ``visible_gpus``: GPUs this process's CUDA may use.
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
        return "\n".join([head] + [f"  {gpu.summary()}" for gpu in self.gpus])

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its id, its CPUs, and its memory in bytes (``None`` if unknown)."""

    node_id: int
    cpus: tuple[int, ...]
    memory_bytes: int | None = None


@dataclass(frozen=True)
class CpuInfo:
    """The host CPUs. ``logical_cpus`` counts hardware threads; ``physical_cores`` and
    ``sockets`` are ``None`` where /proc/cpuinfo does not say; ``usable_cpus`` are the CPUs
    this process may run on (its affinity mask, smaller in containers and under taskset)."""

    model: str
    logical_cpus: int
    physical_cores: int | None
    sockets: int | None
    usable_cpus: tuple[int, ...]
    numa_nodes: tuple[NumaNode, ...] = ()

    def summary(self) -> str:
        parts = [f"{self.model}: {self.logical_cpus} logical CPUs"]
        if self.physical_cores is not None:
            parts.append(f"{self.physical_cores} physical cores")
        if self.sockets is not None:
            parts.append(f"{self.sockets} socket{'s' if self.sockets != 1 else ''}")
        parts.append(f"{len(self.usable_cpus)} usable by this process")
        lines = [", ".join(parts)]
        for node in self.numa_nodes:
            memory = f", {node.memory_bytes / GB:.1f} GB" if node.memory_bytes is not None else ""
            lines.append(f"  NUMA node {node.node_id}: CPUs {format_cpu_list(node.cpus) or 'none'}{memory}")
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


@dataclass(frozen=True)
class Inventory:
    """Everything :func:`inventory` found; ``str()`` or a notebook cell shows it as a report."""

    gpus: GpuReport
    cpu: CpuInfo
    topology: Topology | None
    topology_reason: str | None
    peer_access: PeerAccess

    def summary(self) -> str:
        topology = self.topology.summary() if self.topology is not None else self.topology_reason
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


@contextmanager
def _nvml():
    """pynvml, initialised; raises :class:`_NoGpu` with a reason when NVML cannot be used."""
    try:
        import pynvml
    except ImportError:
        raise _NoGpu("no GPU: nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise _NoGpu("no GPU: the NVML library was not found (no NVIDIA driver on this machine)") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise _NoGpu("no GPU: the NVIDIA driver is not loaded") from None
    except pynvml.NVMLError as exc:
        raise _NoGpu(f"no GPU: NVML could not start ({exc})") from None
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _ask(pynvml, query, *args):
    """``query(*args)``, or ``None`` when NVML says the value is not supported or not available."""
    try:
        return query(*args)
    except pynvml.NVMLError:
        return None


def gpu_report(sys_root: str | os.PathLike = "/") -> GpuReport:
    """All GPUs through NVML, with NUMA node and local CPUs from sysfs under ``sys_root``.

    Never raises for a missing driver, library or GPU: ``reason`` says what is missing.
    """
    visible = visible_gpu_count()
    try:
        with _nvml() as pynvml:
            count = _ask(pynvml, pynvml.nvmlDeviceGetCount) or 0
            if count == 0:
                return GpuReport(visible_gpus=visible, reason="no GPU: NVML found no NVIDIA GPU")
            gpus = tuple(_gpu_info(pynvml, index, Path(sys_root)) for index in range(count))
            cuda = _ask(pynvml, pynvml.nvmlSystemGetCudaDriverVersion)
            return GpuReport(
                gpus=gpus,
                driver_version=_ask(pynvml, pynvml.nvmlSystemGetDriverVersion),
                cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
                visible_gpus=visible,
            )
    except _NoGpu as exc:
        return GpuReport(visible_gpus=visible, reason=str(exc))


def list_gpus() -> list[GpuInfo]:
    """The GPUs of :func:`gpu_report` as a list; ``[]`` without GPUs."""
    return list(gpu_report().gpus)


def _gpu_info(pynvml, index: int, sys_root: Path) -> GpuInfo:
    handle = _ask(pynvml, pynvml.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return GpuInfo(index=index, name="unavailable (NVML could not open this GPU)")
    memory = _ask(pynvml, pynvml.nvmlDeviceGetMemoryInfo, handle)
    capability = _ask(pynvml, pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    pci = _ask(pynvml, pynvml.nvmlDeviceGetPciInfo, handle)
    try:
        bus_id = sysfs_pci_address(pci.busId) if pci is not None else None
    except ValueError:  # a bus id in a form this code does not know: skip the sysfs look-ups
        bus_id = None
    numa_node = pci_numa_node(bus_id, sys_root) if bus_id else None
    cpus = pci_local_cpus(bus_id, sys_root) if bus_id else ()
    if not cpus:
        mask = _ask(pynvml, pynvml.nvmlDeviceGetCpuAffinity, handle, _mask_words())
        cpus = cpus_from_mask_words(mask) if mask is not None else ()
    return GpuInfo(
        index=index,
        name=_ask(pynvml, pynvml.nvmlDeviceGetName, handle) or "unknown GPU",
        memory_total_bytes=int(memory.total) if memory is not None else None,
        compute_capability=tuple(capability) if capability is not None else None,
        pci_bus_id=bus_id,
        pcie_generation_max=_ask(pynvml, pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width_max=_ask(pynvml, pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        pcie_generation_current=_ask(pynvml, pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_width_current=_ask(pynvml, pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        nvlinks_up=_nvlinks_up(pynvml, handle),
        numa_node=numa_node,
        cpus=cpus,
    )


def _nvlinks_up(pynvml, handle) -> int | None:
    """Active NVLinks; ``None`` when no link answers (the GPU has no NVLink)."""
    answered = up = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _ask(pynvml, pynvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            continue
        answered += 1
        up += int(state == pynvml.NVML_FEATURE_ENABLED)
    return up if answered else None


def _mask_words() -> int:
    """64-bit words NVML needs to describe every CPU of this machine."""
    return max(1, -(-(os.cpu_count() or 1) // 64))


def cpus_from_mask_words(words) -> tuple[int, ...]:
    """CPU numbers set in a bitmask given as 64-bit words, lowest CPUs in the first word."""
    return tuple(
        64 * position + bit for position, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1
    )


def sysfs_pci_address(bus_id) -> str:
    """NVML's bus id ("00000000:18:00.0", str or bytes) in sysfs form ("0000:18:00.0")."""
    text = (bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)).strip().lower()
    match = re.fullmatch(r"([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2}\.[0-7])", text)
    if not match:
        raise ValueError(f"{text!r} is not a PCI bus id: expected the form 00000000:18:00.0")
    return f"{int(match.group(1), 16):04x}:{match.group(2)}:{match.group(3)}"


def pci_numa_node(pci_address: str, sys_root: str | os.PathLike = "/") -> int | None:
    """NUMA node of a PCI device from ``/sys/bus/pci/devices/<address>/numa_node``; ``None``
    when unknown (the file is missing, or says -1 as single-node machines do)."""
    text = _read(Path(sys_root) / "sys/bus/pci/devices" / pci_address / "numa_node")
    if text is None or not text.strip().lstrip("-").isdigit():
        return None
    node = int(text)
    return node if node >= 0 else None


def pci_local_cpus(pci_address: str, sys_root: str | os.PathLike = "/") -> tuple[int, ...]:
    """CPUs close to a PCI device, from ``/sys/bus/pci/devices/<address>/local_cpulist``."""
    text = _read(Path(sys_root) / "sys/bus/pci/devices" / pci_address / "local_cpulist")
    try:
        return parse_cpu_list(text) if text else ()
    except ValueError:
        return ()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


# ----------------------------------------------------------------------------- CPUs


def cpu_info(root: str | os.PathLike = "/") -> CpuInfo:
    """CPU model, counts and NUMA nodes from ``<root>/proc/cpuinfo`` and
    ``<root>/sys/devices/system/node`` (``root`` lets tests use a fake tree)."""
    root = Path(root)
    entries = _cpuinfo_entries(_read(root / "proc/cpuinfo") or "")
    model = next(
        (entry["model name"] for entry in entries if "model name" in entry),
        platform.processor() or platform.machine() or "unknown CPU",
    )
    cores = {(entry["physical id"], entry["core id"]) for entry in entries if "physical id" in entry and "core id" in entry}
    sockets = {entry["physical id"] for entry in entries if "physical id" in entry}
    if hasattr(os, "sched_getaffinity"):
        usable = tuple(sorted(os.sched_getaffinity(0)))
    else:  # macOS and Windows have no affinity mask: a process may use every CPU
        usable = tuple(range(os.cpu_count() or 1))
    return CpuInfo(
        model=model,
        logical_cpus=len(entries) or os.cpu_count() or 0,
        physical_cores=len(cores) or None,
        sockets=len(sockets) or None,
        usable_cpus=usable,
        numa_nodes=numa_nodes(root),
    )


def _cpuinfo_entries(text: str) -> list[dict[str, str]]:
    """One dict per "processor" block of /proc/cpuinfo."""
    entries: list[dict[str, str]] = []
    for block in text.split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entry[key.strip()] = value.strip()
        if "processor" in entry:
            entries.append(entry)
    return entries


def numa_nodes(root: str | os.PathLike = "/") -> tuple[NumaNode, ...]:
    """NUMA nodes from ``<root>/sys/devices/system/node/node<N>/{cpulist,meminfo}``, by id."""
    base = Path(root) / "sys/devices/system/node"
    nodes = []
    try:
        candidates = [path for path in base.iterdir() if path.name[4:].isdigit() and path.name.startswith("node")]
    except OSError:
        return ()
    for path in sorted(candidates, key=lambda p: int(p.name[4:])):
        try:
            cpus = parse_cpu_list(_read(path / "cpulist") or "")
        except ValueError:
            cpus = ()
        nodes.append(NumaNode(int(path.name[4:]), cpus, _node_memory_bytes(_read(path / "meminfo") or "")))
    return tuple(nodes)


def _node_memory_bytes(meminfo: str) -> int | None:
    """``Node 0 MemTotal:  131072000 kB`` -> bytes (the kernel's kB is 1024 B)."""
    for line in meminfo.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "MemTotal:" and fields[3].isdigit():
            return int(fields[3]) * 1024
    return None


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
