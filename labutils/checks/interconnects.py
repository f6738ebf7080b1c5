"""Self-checks of chapter 4 (interconnects and topology): one call per exercise prints a verdict.

    from labutils.checks import interconnects as check
    check.pcie5_x16(answer_1)

The right answers come from ``labutils.machine.interconnects`` (link bandwidths with their sources) and
from the real ``nvidia-smi topo -m`` outputs shipped in ``labutils.machine.topology``; each check names
the usual mistakes (both directions added, bits for bytes, the encoding left out, SYS paths).
"""
from __future__ import annotations

from labutils.machine import interconnects, topology
from labutils.checks.answers import NOT_ANSWERED, first_match, name_problem, number_problem

#: the shipped matrices the exercises are about (labutils/data/topo, INDEX.md says where each was published)
PCIE_TWO_SOCKETS = "07"
HGX_H100 = "02"


def pcie5_x16(answer) -> None:
    """Exercise 1: GB/s (1e9 B/s) one direction of a PCIe Gen5 x16 link (32 GT/s, 128b/130b)."""
    print(_pcie5_verdict(answer))


def _pcie5_verdict(answer) -> str:
    expected = interconnects.link("pcie5").per_direction_GBps
    what = "a finite number of GB/s"
    return number_problem(answer, what, finite=what) or first_match(answer, [
        (expected, f"correct: 32 GT/s x 16 lanes x 128/130 / 8 bits = {expected:.2f} GB/s per direction"),
        (2 * expected, "that is both directions added; a transfer from A to B gets one direction only"),
        (32 * 16 / 8, "you left out the encoding: only 128 of every 130 bits carry data"),
        (8 * expected, "that is in Gb/s (bits); divide by 8 for GB/s"),
        (expected / 16, "that is one lane; an x16 link has 16 of them"),
    ], "not quite: multiply the transfer rate by the lanes and by 128/130, then divide by 8 bits per byte",
        rel_tol=0.005)


def tp_group_one_socket(answer) -> None:
    """Exercise 2: 4 GPUs of the captured two-socket PCIe server with no SYS path between any two."""
    print(_tp_group_verdict(answer, topology.example(PCIE_TWO_SOCKETS).topology))


def _tp_group_verdict(answer, topo) -> str:
    if answer is None:
        return NOT_ANSWERED
    if not isinstance(answer, (list, tuple, set)) or not all(isinstance(name, str) for name in answer):
        return 'give a list of GPU names such as ["GPU0", "GPU1", "GPU2", "GPU3"]'
    names = list(dict.fromkeys(answer))
    unknown = [name for name in names if name not in topo.gpus]
    if unknown:
        return f"{', '.join(unknown)} is not in this matrix: it has {', '.join(topo.gpus)}"
    if len(names) != 4:
        return f"a group of 4 needs 4 different GPUs; you gave {len(names)}"
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    crossing = [(a, b) for a, b in pairs if topo.link(a, b) == "SYS"]
    if crossing:
        return (f"{', '.join(f'{a}-{b}' for a, b in crossing)} cross the sockets (SYS): look at the NUMA "
                "Affinity column, and keep the group on one node")
    worst = max((topo.link(a, b) for a, b in pairs), key=topology.link_rank)
    return f"correct: all 4 GPUs sit on one socket; the slowest path inside the group is {worst}"


def ndr_transfer_seconds(answer, nbytes: float = 1e10) -> None:
    """Exercise 3: seconds to send 1e10 bytes through one InfiniBand NDR port (400 Gb/s), bandwidth only."""
    print(_ndr_verdict(answer, nbytes))


def _ndr_verdict(answer, nbytes) -> str:
    port = interconnects.link("ib_ndr")
    expected = nbytes / port.per_direction_Bps
    what = "a finite number of seconds"
    return number_problem(answer, what, finite=what) or first_match(answer, [
        (expected, f"correct: {nbytes:g} B / ({port.rate_text.split(' per')[0]} / 8) = {expected:.2f} s"),
        (expected / 8, "you read 400 Gb/s as 400 GB/s: network ports are rated in bits, divide by 8"),
        (2 * expected, "400 Gb/s is already per direction: do not halve it"),
        (8 * expected, "you counted the message in bits but the port in bytes per second: use the same unit on both sides"),
    ], f"not quite: seconds = bytes / (bytes per second); {port.rate_text.split(' per')[0]} is "
       f"{port.per_direction_GBps:g} GB/s", rel_tol=0.01)


def gpudirect_nic(answer, gpu: str = "GPU3") -> None:
    """Exercise 4: the NIC the rank driving GPU3 of the captured HGX H100 should use (e.g. "NIC0")."""
    print(_nic_verdict(answer, gpu, topology.example(HGX_H100).topology))


def _nic_verdict(answer, gpu, topo) -> str:
    problem = name_problem(answer, "the NIC's name", "NIC0")
    if problem:
        return problem
    by_device = {device: nic for nic, device in topo.nic_names.items()}  # "mlx5_2" -> "NIC2" (the NIC Legend)
    nic = by_device.get(answer, answer)
    if nic not in topo.nics:
        return f"{answer!r} is not a NIC of this matrix: it has {', '.join(topo.nics)}"
    best = min((topo.link(gpu, other) for other in topo.nics), key=topology.link_rank)
    if topo.link(gpu, nic) == best:
        return f"correct: {nic} is {best} from {gpu}, under the same PCIe switch"
    return (f"{nic} is {topo.link(gpu, nic)} from {gpu}; read {gpu}'s row and find the NIC column "
            f"with the fastest path ({best})")
