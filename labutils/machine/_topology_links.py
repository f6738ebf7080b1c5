"""The link types of ``nvidia-smi topo -m`` (NV#, PIX, PXB, PHB, NODE, SYS): their order and meaning."""
from __future__ import annotations

import re

#: PCIe and NVLink path types, fastest first ("NV#" stands for NV1, NV2, ... NV18, ...).
LINK_TYPES_FASTEST_FIRST = ("NV#", "PIX", "PXB", "PHB", "NODE", "SYS")


LINK_TOKEN = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_NVLINK = re.compile(r"NV(\d+)")

_EXPLANATIONS = {
    "X": "X: the device itself (the diagonal of the matrix).",
    "PIX": (
        "PIX: the two devices sit behind one PCIe switch (at most one PCIe bridge), so "
        "peer-to-peer traffic turns around in that switch without reaching the CPU; the "
        "fastest PCIe path."
    ),
    "PXB": (
        "PXB: the path crosses several PCIe switches (bridges) but not the CPU's host bridge; "
        "still peer-to-peer below the CPU, with more hops than PIX."
    ),
    "PHB": (
        "PHB: the path goes up to a PCIe host bridge (typically the CPU's root complex) and "
        "back down, so peer traffic passes through the CPU."
    ),
    "NODE": (
        "NODE: the path crosses between PCIe host bridges within one NUMA node, i.e. between "
        "root complexes of the same CPU socket."
    ),
    "SYS": (
        "SYS: the path crosses the SMP interconnect between NUMA nodes (QPI/UPI on Intel, "
        "Infinity Fabric on AMD), i.e. from one CPU socket to the other; the slowest path."
    ),
}


def explain_link(link: str) -> str:
    """One sentence on what a link type means: ``"NV12"``, ``"PIX"``, ..., ``"SYS"`` (or ``"NV#"``).

    Bandwidth order, fastest first: NV# > PIX > PXB > PHB > NODE > SYS.
    """
    name = normalise_link(link, where="explain_link")
    nvlinks = _NVLINK.fullmatch(name)
    if nvlinks or name == "NV#":
        count = nvlinks.group(1) if nvlinks else "#"
        return (
            f"NV{count}: a bonded set of {count} NVLinks joins the two GPUs, directly or "
            "through NVSwitch; traffic never touches PCIe, so this is the fastest path "
            "(more links, more bandwidth)."
        )
    return _EXPLANATIONS[name]


def link_types_explained() -> list[tuple[str, str]]:
    """``(link type, one sentence)`` for every type, fastest first (for a table in a chapter)."""
    return [(name, explain_link(name)) for name in LINK_TYPES_FASTEST_FIRST]


def link_rank(link: str) -> tuple[int, int]:
    """Sort key, smaller is faster: NV# first (more links first), then PIX, PXB, PHB, NODE, SYS.

    ``"X"`` (a device with itself) sorts before everything.
    """
    name = normalise_link(link, where="link_rank")
    if name == "X":
        return (-1, 0)
    nvlinks = _NVLINK.fullmatch(name)
    if nvlinks:
        return (0, -int(nvlinks.group(1)))
    return (LINK_TYPES_FASTEST_FIRST.index(name), 0)


def nvlink_count(link: str) -> int:
    """Number of bonded NVLinks in ``"NV#"`` (``"NV18"`` -> 18); 0 for a PCIe path."""
    nvlinks = _NVLINK.fullmatch(normalise_link(link, where="nvlink_count"))
    return int(nvlinks.group(1)) if nvlinks else 0


def normalise_link(link: str, where: str) -> str:
    """``link`` as a link type ("SOC", an old name, as "SYS"); ``ValueError`` naming ``where`` if it is none."""
    if not isinstance(link, str) or not (LINK_TOKEN.fullmatch(link.strip()) or link.strip() == "NV#"):
        raise ValueError(f"{where}: {link!r} is not a link type; use X, NV<count>, PIX, PXB, PHB, NODE or SYS")
    name = link.strip()
    return "SYS" if name == "SOC" else name
