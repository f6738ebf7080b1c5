"""Read the matrix that ``nvidia-smi topo -m`` prints, and say in plain words what it means.

    from labutils.machine import topology
    topo = topology.parse_topology(open("topo.txt").read())
    topo.link("GPU0", "GPU1")      # "NV18"
    print(topo.summary())          # "all 8 GPUs on NVSwitch: NV18 everywhere" ...
    topology.explain_link("PHB")   # one sentence, for the chapter on interconnects
    topology.example("02").topology.summary()   # twelve real outputs ship with labutils

The matrix gives, for every pair of devices (GPUs, and NICs named NIC0.. or mlx5_N), the
best path between them. From fastest to slowest (bandwidth order):

    NV#  >  PIX  >  PXB  >  PHB  >  NODE  >  SYS

NV# is a bonded set of # NVLinks; the others are PCIe paths that cross, in turn, one PCIe
switch (PIX), several switches (PXB), the CPU's host bridge (PHB), several host bridges of
one NUMA node (NODE), and the interconnect between CPU sockets (SYS). Older drivers print
SOC for SYS; it is read as SYS.

The parser copes with what pasting does to this output: tabs or spaces, CRLF line ends,
ANSI escape codes, a header without its leading indent, the Legend cut off or missing,
missing NUMA columns, NIC rows without their trailing empty cells. Each GPU row may end
with "CPU Affinity" (a Linux CPU list such as "0-31,64-95" or "6,14,22,30"),
"NUMA Affinity" and "GPU NUMA ID" cells, any of which may be blank or "N/A".

:func:`examples` and :func:`example` give twelve real outputs, pasted in public repositories
and issues (package data in ``labutils/data/topo``; their sources are in INDEX.md there and
in each example's ``source``), so the topology chapter runs on a laptop without a GPU.
"""
from __future__ import annotations

from labutils.machine._topology_examples import TopologyExample, example, example_names, examples
from labutils.machine._topology_links import (
    LINK_TYPES_FASTEST_FIRST,
    explain_link,
    link_rank,
    link_types_explained,
    nvlink_count,
)
from labutils.machine._topology_parse import (
    AFFINITY_COLUMNS,
    GpuAffinity,
    Topology,
    format_cpu_list,
    parse_cpu_list,
    parse_topology,
)
from labutils.machine._topology_summary import rank_use_line, summarize

__all__ = [
    "AFFINITY_COLUMNS", "LINK_TYPES_FASTEST_FIRST", "GpuAffinity", "Topology", "TopologyExample",
    "example", "example_names", "examples", "explain_link", "format_cpu_list", "link_rank",
    "link_types_explained", "nvlink_count", "parse_cpu_list", "parse_topology", "rank_use_line", "summarize",
]
