"""The host side of the machine: CPUs, NUMA nodes, and where a PCI device sits (sysfs).

Re-exported by :mod:`labutils.machine.hardware`. ``root`` / ``sys_root`` arguments let tests use a
fake file tree. Memory in bytes (GB = 1e9 B when printed).
"""
from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from labutils.machine.topology import format_cpu_list, parse_cpu_list

GB = 1e9  # bytes, for printing memory sizes


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
