"""Bandwidth of the links a multi-GPU job crosses, with where each number comes from.

    from labutils.machine import interconnects
    interconnects.per_direction("nvlink4")     # 450e9 B/s: what busbw is compared with
    interconnects.link("ib_ndr").rate_text     # "400 Gb/s per port, per direction"
    interconnects.table()                      # every link, slowest kind first

Units: bytes per second (B/s); GB/s = 1e9 B/s. Network links are sold in gigabits per
second (Gb/s, lower-case b): 8 bits make a byte, so InfiniBand HDR's 200 Gb/s is 25 GB/s.
Gb/s and GB/s are easy to confuse; every record here keeps the marketed figure (``rate_text``)
next to the bytes.

Every link is full duplex: it carries ``per_direction_Bps`` each way at once, and
``bidirectional_Bps`` is twice that. Vendors often quote the bidirectional sum (NVLink's
"900 GB/s" for H100, PCI-SIG's "256 GB/s" for PCIe 6.0 x16); a collective's busbw is to be
compared with the per-direction figure (nccl-tests, doc/PERFORMANCE.md).

The figures are signalling rates after line coding: protocol headers, flow control and
(from PCIe 6.0) FLIT overhead take a further share, so measured transfers stay below them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

GB = 1e9  #: bytes in a GB (SI), as in GB/s = 1e9 B/s


@dataclass(frozen=True)
class Link:
    """One kind of link and its bandwidth.

    ``name``: the key :func:`link` takes ("pcie5", "nvlink4", "ib_ndr", "400gbe").
    ``label``: how a slide writes it. ``kind``: "pcie", "nvlink", "infiniband" or "ethernet".
    ``per``: what one figure covers ("x16 slot", "GPU, all its NVLinks", "port").
    ``per_direction_Bps`` / ``bidirectional_Bps``: bytes per second one way / both ways.
    ``rate_text``: the figure as the vendor states it, unit included (Gb/s or GT/s or GB/s).
    ``source``: where the number comes from.
    """

    name: str
    label: str
    kind: str
    per: str
    per_direction_Bps: float
    bidirectional_Bps: float
    rate_text: str
    source: str

    @property
    def per_direction_GBps(self) -> float:
        """``per_direction_Bps`` in GB/s (1e9 B/s)."""
        return self.per_direction_Bps / GB

    @property
    def bidirectional_GBps(self) -> float:
        """``bidirectional_Bps`` in GB/s (1e9 B/s)."""
        return self.bidirectional_Bps / GB


def _pcie(generation: int, gigatransfers: float, coding: float, coding_text: str, source: str) -> Link:
    """A PCIe x16 link: GT/s per lane x 16 lanes x line-code efficiency / 8 bits per byte."""
    per_direction = gigatransfers * 1e9 * 16 * coding / 8
    return Link(f"pcie{generation}", f"PCIe Gen{generation} x16", "pcie", "x16 slot",
                per_direction, 2 * per_direction,
                f"{gigatransfers:g} GT/s per lane, {coding_text}", source)


def _nvlink(version: int, gpu: str, bidirectional_GBps: float, source: str) -> Link:
    """NVLink of one GPU, all its links together; vendors quote the bidirectional sum."""
    return Link(f"nvlink{version}", f"NVLink{version} ({gpu})", "nvlink", f"GPU ({gpu}), all its NVLinks",
                bidirectional_GBps * GB / 2, bidirectional_GBps * GB,
                f"{bidirectional_GBps:g} GB/s bidirectional per GPU", source)


def _network(name: str, label: str, kind: str, gigabits: float, source: str) -> Link:
    """A network port sold as ``gigabits`` Gb/s each way: / 8 bits per byte."""
    per_direction = gigabits * 1e9 / 8
    return Link(name, label, kind, "port", per_direction, 2 * per_direction,
                f"{gigabits:g} Gb/s per port, per direction", source)


_PCIE_SOURCE = ("PCI-SIG base specification {rev}: {rate} GT/s per lane, {coding}; "
                "16 lanes / 8 bits per byte = {gbps} GB/s per direction")
_IBTA = "InfiniBand Trade Association roadmap (4x port); NVIDIA {adapter} adapter data"
_DATASHEET = "NVIDIA {gpu} datasheet: NVLink {figure} GB/s per GPU, bidirectional"

_LINKS = (
    _pcie(3, 8, 128 / 130, "128b/130b encoding",
          _PCIE_SOURCE.format(rev="3.0", rate=8, coding="128b/130b encoding", gbps=15.75)),
    _pcie(4, 16, 128 / 130, "128b/130b encoding",
          _PCIE_SOURCE.format(rev="4.0", rate=16, coding="128b/130b encoding", gbps=31.5)),
    _pcie(5, 32, 128 / 130, "128b/130b encoding",
          _PCIE_SOURCE.format(rev="5.0", rate=32, coding="128b/130b encoding", gbps=63)),
    _pcie(6, 64, 1.0, "PAM4, FLIT mode (no 128b/130b coding)",
          "PCI-SIG base specification 6.0: 64 GT/s per lane (PAM4), 256 GB/s bidirectional for x16, "
          "i.e. 128 GB/s per direction; FLIT overhead (236 TLP bytes per 256-byte flit) leaves about "
          "118 GB/s of payload (glennklockwood.com/garden/PCIe-Gen6)"),
    _nvlink(2, "V100", 300, _DATASHEET.format(gpu="V100 SXM2", figure=300)),
    _nvlink(3, "A100", 600, _DATASHEET.format(gpu="A100 SXM", figure=600)),
    _nvlink(4, "H100", 900, _DATASHEET.format(gpu="H100 SXM", figure=900)),
    _nvlink(5, "B200", 1800, _DATASHEET.format(gpu="HGX B200", figure="1,800")),
    _network("ib_hdr", "InfiniBand HDR", "infiniband", 200,
             _IBTA.format(adapter="ConnectX-6") + "; 200 Gb/s / 8 bits per byte = 25 GB/s per port, per direction"),
    _network("ib_ndr", "InfiniBand NDR", "infiniband", 400,
             _IBTA.format(adapter="ConnectX-7") + "; 400 Gb/s / 8 bits per byte = 50 GB/s per port, per direction"),
    _network("ib_xdr", "InfiniBand XDR", "infiniband", 800, _IBTA.format(adapter="ConnectX-8")),
    _network("100gbe", "100 Gigabit Ethernet", "ethernet", 100, "IEEE 802.3ba-2010 (40 and 100 Gb/s Ethernet)"),
    _network("200gbe", "200 Gigabit Ethernet", "ethernet", 200, "IEEE 802.3bs-2017 (200 and 400 Gb/s Ethernet)"),
    _network("400gbe", "400 Gigabit Ethernet", "ethernet", 400, "IEEE 802.3bs-2017 (200 and 400 Gb/s Ethernet)"),
)
_BY_KEY = {re.sub(r"[^a-z0-9]", "", item.name): item for item in _LINKS}


def table() -> list[Link]:
    """Every link: PCIe Gen3-6 x16, NVLink 2-5 per GPU, InfiniBand HDR/NDR/XDR, 100/200/400 GbE."""
    return list(_LINKS)


def link(name: str) -> Link:
    """The :class:`Link` called ``name`` ("pcie5", "NVLink4", "ib-ndr", "400GbE"; case, spaces,
    dashes and underscores do not matter)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower()) if isinstance(name, str) else None
    if key not in _BY_KEY:
        raise ValueError(f"unknown link {name!r}: choose one of {', '.join(item.name for item in _LINKS)}")
    return _BY_KEY[key]


def per_direction(name: str) -> float:
    """Bytes per second one way on link ``name``: the figure to compare a collective's busbw with."""
    return link(name).per_direction_Bps
