"""Say in plain words what a parsed ``nvidia-smi topo -m`` matrix means (:func:`summarize`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from labutils.machine._topology_links import LINK_TYPES_FASTEST_FIRST, link_rank, nvlink_count

if TYPE_CHECKING:
    from labutils.machine._topology_parse import Topology


_PCIE_PHRASES = {
    "PIX": "share a PCIe switch (PIX)",
    "PXB": "go through several PCIe switches, not the CPU (PXB)",
    "PHB": "meet at the CPU's PCIe host bridge (PHB)",
    "NODE": "cross PCIe host bridges within one NUMA node (NODE)",
    "SYS": "only over SYS: cross-socket (between NUMA nodes)",
}


def summarize(topology: Topology, cuda_ordinals: dict[str, int | None] | None = None) -> list[str]:
    """Plain-words findings, one per line.

    The GPUs: single GPU; all on NVSwitch (NV# everywhere, 8 or more GPUs) or fully meshed
    by NVLink (fewer); NVLink-bridged pairs; a partial NVLink mesh; PCIe only. Then the
    GPU pairs left without NVLink, by PCIe path type (which share a switch, which meet at
    the host bridge, which cross sockets), then NUMA affinity (or, where the output has no
    NUMA column, the GPUs grouped by CPU affinity), then for each NIC the GPUs closest to
    it. "On NVSwitch" is inferred from the matrix (a uniform NV# among 8 or more GPUs); the
    matrix itself does not show switches.

    ``cuda_ordinals`` ({"GPU4": 0, "GPU0": None, ...}, from ``labutils.machine.hardware``) adds a
    line saying which GPUs of the matrix ranks use: the matrix numbers GPUs as NVML and
    nvidia-smi do, whatever ``CUDA_VISIBLE_DEVICES`` says, so with "4,5,6,7" rank 0's
    ``cuda:0`` is the row GPU4.
    """
    gpus, nics = topology.gpus, topology.nics
    lines = [f"{_count(len(gpus), 'GPU')}, {_count(len(nics), 'NIC') if nics else 'no NIC'}"]
    if len(gpus) == 1:
        lines.append(f"single GPU ({gpus[0]}): no GPU-to-GPU link")
    elif len(gpus) > 1:
        lines.extend(_gpu_link_lines(topology))
    lines.extend(_numa_lines(topology))
    lines.extend(_nic_lines(topology))
    if cuda_ordinals is not None:
        lines.append(rank_use_line(topology, cuda_ordinals))
    return lines


def rank_use_line(topology: Topology, cuda_ordinals: dict[str, int | None]) -> str:
    """"ranks use GPU4 (cuda:0), GPU5 (cuda:1); not visible here: GPU0, GPU1" for the matrix's GPU rows.

    With one GPU per rank, rank r of a launch on this machine uses ``cuda:r``.
    """
    used = sorted((ordinal, gpu) for gpu, ordinal in cuda_ordinals.items()
                  if ordinal is not None and gpu in topology.gpus)
    hidden = [gpu for gpu in topology.gpus if cuda_ordinals.get(gpu) is None]
    text = "ranks use " + (", ".join(f"{gpu} (cuda:{ordinal})" for ordinal, gpu in used) if used else "no GPU row")
    return text + (f"; not visible here: {', '.join(hidden)}" if hidden else "")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _gpu_link_lines(topology: Topology) -> list[str]:
    gpus = topology.gpus
    by_link = topology.gpu_pairs_by_link()
    total_pairs = len(gpus) * (len(gpus) - 1) // 2
    nvlink_types = [link for link in by_link if nvlink_count(link)]
    nvlink_pairs = [pair for link in nvlink_types for pair in by_link[link]]
    lines = []
    if len(nvlink_types) == 1 and len(nvlink_pairs) == total_pairs:
        link = nvlink_types[0]
        if len(gpus) >= 8:
            lines.append(f"all {len(gpus)} GPUs on NVSwitch: {link} everywhere")
        elif len(gpus) == 2:
            lines.append(f"{gpus[0]}-{gpus[1]} joined by NVLink: {link}")
        else:
            lines.append(f"all {len(gpus)} GPUs fully meshed by NVLink: {link} between every pair")
        return lines
    if not nvlink_pairs:
        lines.append("PCIe only: no NVLink between GPUs")
    else:
        peers = {gpu: sum(gpu in pair for pair in nvlink_pairs) for gpu in gpus}
        listing = ", ".join(f"{a}-{b} ({topology.link(a, b)})" for a, b in nvlink_pairs)
        if max(peers.values()) == 1:
            lines.append(f"NVLink-bridged pairs: {listing}")
        elif len(nvlink_pairs) == total_pairs:
            lines.append(f"NVLink on all {total_pairs} GPU pairs, with different link counts: {listing}")
        else:
            lines.append(f"partial NVLink mesh on {len(nvlink_pairs)} of {total_pairs} GPU pairs: {listing}")
    faster_pairs = list(nvlink_pairs)
    for link in LINK_TYPES_FASTEST_FIRST[1:]:
        pairs = by_link.get(link, [])
        if pairs:
            lines.append(f"{_describe_pairs(gpus, faster_pairs, pairs)} {_PCIE_PHRASES[link]}")
            faster_pairs.extend(pairs)
    return lines


def _describe_pairs(gpus, faster_pairs, pairs) -> str:
    """Name the pairs of one link type compactly.

    GPUs already joined by faster links form groups. When this type's pairs are exactly
    all pairs between the groups they merge, name the groups ("{GPU0..GPU3} and
    {GPU4..GPU7}"; "{GPU0,GPU1}, GPU2 and GPU3"); otherwise list the pairs one by one.
    """
    one_by_one = ", ".join(f"{a}-{b}" for a, b in pairs)
    groups = _components(gpus, faster_pairs)
    group_of = {gpu: index for index, group in enumerate(groups) for gpu in group}
    pair_set = {frozenset(pair) for pair in pairs}
    if any(group_of[a] == group_of[b] for a, b in pairs):
        return one_by_one
    parts = []
    for new_group in _components(gpus, list(faster_pairs) + list(pairs)):
        old_groups = [group for group in groups if group[0] in new_group]
        cross_pairs = [
            frozenset((a, b))
            for position, group in enumerate(old_groups)
            for other in old_groups[position + 1 :]
            for a in group
            for b in other
        ]
        if not all(pair in pair_set for pair in cross_pairs):
            return one_by_one
        names = [_group_text(gpus, group) for group in old_groups]
        if len(names) == 2 and all(len(group) == 1 for group in old_groups):
            parts.append(f"{names[0]}-{names[1]}")
        elif len(names) > 1:
            parts.append(", ".join(names[:-1]) + f" and {names[-1]}")
    plain_pairs = all(" " not in part for part in parts)
    return (", " if plain_pairs else "; ").join(parts)


def _components(gpus, pairs) -> list[list[str]]:
    """Groups of GPUs connected through ``pairs``, in printed order."""
    parent = {gpu: gpu for gpu in gpus}

    def root(gpu):
        while parent[gpu] != gpu:
            gpu = parent[gpu]
        return gpu

    for a, b in pairs:
        parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for gpu in gpus:
        groups.setdefault(root(gpu), []).append(gpu)
    return sorted(groups.values(), key=lambda group: gpus.index(group[0]))


def _group_text(gpus, group) -> str:
    """"GPU5", "{GPU0,GPU1}" or "{GPU0..GPU3}" (a run of consecutive GPUs in printed order)."""
    if len(group) == 1:
        return group[0]
    positions = [gpus.index(gpu) for gpu in group]
    if len(group) > 2 and positions == list(range(positions[0], positions[0] + len(group))):
        return f"{{{group[0]}..{group[-1]}}}"
    return "{" + ",".join(group) + "}"


def _gpus_by_affinity(topology: Topology, column: str) -> dict[str, list[str]]:
    """{value of the affinity ``column`` ("numa_affinity", "cpu_affinity"): its GPUs, in printed
    order}, for the GPUs the matrix gives a value."""
    groups: dict[str, list[str]] = {}
    for gpu in topology.gpus:
        value = getattr(topology.affinity[gpu], column)
        if value is not None:
            groups.setdefault(value, []).append(gpu)
    return groups


def _numa_lines(topology: Topology) -> list[str]:
    """GPUs grouped by NUMA node (with their CPUs); by CPU list alone where no NUMA node is printed."""
    nodes = _gpus_by_affinity(topology, "numa_affinity")
    if not nodes:
        return _cpu_affinity_lines(topology)
    parts = []
    for numa, members in sorted(nodes.items(), key=lambda item: topology.gpus.index(item[1][0])):
        cpu_lists = {topology.affinity[gpu].cpu_affinity for gpu in members} - {None}
        cpus = f" (CPUs {cpu_lists.pop()})" if len(cpu_lists) == 1 else ""
        parts.append(f"node {numa}: {', '.join(members)}{cpus}")
    return ["NUMA affinity: " + "; ".join(parts)]


def _cpu_affinity_lines(topology: Topology) -> list[str]:
    """"CPU affinity: GPU0, GPU1 on CPUs 0-19,40-59; ..." (older outputs have no NUMA column)."""
    groups = _gpus_by_affinity(topology, "cpu_affinity")
    if not groups:
        return []
    return ["CPU affinity: " + "; ".join(f"{', '.join(members)} on CPUs {cpus}" for cpus, members in groups.items())]


def _nic_lines(topology: Topology) -> list[str]:
    if not topology.gpus:
        return []
    lines = []
    for nic in topology.nics:
        best = min((topology.link(nic, gpu) for gpu in topology.gpus), key=link_rank)
        nearest = [gpu for gpu in topology.gpus if topology.link(nic, gpu) == best]
        if best == "SYS":
            lines.append(f"{topology.nic_label(nic)}: no GPU nearer than SYS (another NUMA node)")
        else:
            lines.append(f"{topology.nic_label(nic)} closest to {', '.join(nearest)} ({best})")
    return lines
