"""Ports for the servers the tests start (the hub, JupyterLab, Slurm's daemons, a torchrun rendezvous):
from below the kernel's ephemeral range, as the hub picks its students' servers' ports
(``grading.hub.server_ports``). A port from ``bind(("127.0.0.1", 0))`` that was then released is
in that range: until the server binds it, any outgoing connection or ``bind`` to port 0 on the
machine may take it, and with gloo's ranks, Chromium and Jupyter kernels connecting all the time
one sometimes does ("Address already in use").
"""
from __future__ import annotations

from grading.hub.server_ports import free_port_block

__all__ = ["free_port", "free_port_block"]


def free_port() -> int:
    """One free port on 127.0.0.1, below the ephemeral range."""
    return free_port_block(1)
