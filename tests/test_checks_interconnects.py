"""labutils.checks.interconnects: the right answer passes, each named mistake gets its message."""
from __future__ import annotations

from check_verdicts import verdict, verdict_test

from labutils.machine import topology
from labutils.checks import interconnects as check

PCIE5 = 32 * 16 * 128 / 130 / 8  # GB/s per direction


test_pcie5_x16 = verdict_test(check.pcie5_x16, [
    (63.02, "correct: 32 GT/s x 16 lanes x 128/130 / 8 bits = 63.02 GB/s"),
    (126.03, "both directions added"),
    (64, "you left out the encoding"),
    (PCIE5 * 8, "in Gb/s (bits)"),
    (PCIE5 / 16, "that is one lane"),
    (50, "not quite"),
    (None, "not answered yet"),
    ("63", "give a finite number of GB/s"),
])


def test_tp_group_one_socket_uses_the_shipped_matrix(capsys):
    pcie = topology.example(check.PCIE_TWO_SOCKETS).topology
    node0 = [gpu for gpu in pcie.gpus if pcie.affinity[gpu].numa_affinity == pcie.affinity["GPU0"].numa_affinity]
    assert len(node0) == 4
    assert verdict(capsys, check.tp_group_one_socket, node0).startswith("correct: all 4 GPUs sit on one socket")
    assert "the slowest path inside the group is PHB" in verdict(capsys, check.tp_group_one_socket, node0)


test_tp_group_one_socket = verdict_test(check.tp_group_one_socket, [
    (["GPU4", "GPU5", "GPU6", "GPU7"], "correct"),
    (("GPU0", "GPU1", "GPU2", "GPU7"), "GPU0-GPU7, GPU1-GPU7, GPU2-GPU7 cross the sockets (SYS)"),
    (["GPU0", "GPU1", "GPU2", "GPU9"], "GPU9 is not in this matrix"),
    (["GPU0", "GPU1", "GPU1", "GPU2"], "you gave 3"),
    ("GPU0,GPU1", "give a list of GPU names"),
    ([0, 1, 2, 3], "give a list of GPU names"),
    (None, "not answered yet"),
])


test_ndr_transfer_seconds = verdict_test(check.ndr_transfer_seconds, [
    (0.2, "correct: 1e+10 B / (400 Gb/s / 8) = 0.20 s"),
    (0.025, "you read 400 Gb/s as 400 GB/s"),
    (0.4, "do not halve it"),
    (1.6, "use the same unit on both sides"),
    (3.0, "not quite"),
    (None, "not answered yet"),
    ("0.2", "give a finite number of seconds"),
])


test_gpudirect_nic = verdict_test(check.gpudirect_nic, [
    ("NIC2", "correct: NIC2 is PIX from GPU3"),
    ("mlx5_2", "correct: NIC2 is PIX from GPU3"),
    ("NIC0", "NIC0 is NODE from GPU3"),
    ("NIC9", "is not a NIC of this matrix"),
    (2, "as a string"),
    (None, "not answered yet"),
])
