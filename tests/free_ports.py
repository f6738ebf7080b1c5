"""Ports for the servers the tests start (the hub, JupyterLab, Slurm's daemons, a torchrun rendezvous).

A port the kernel handed out for ``bind(("127.0.0.1", 0))`` and that was then released is in the
kernel's ephemeral range (``net.ipv4.ip_local_port_range``): until the server binds it, any
outgoing connection on the machine may take it as its own port, and with gloo's ranks, Chromium
and Jupyter kernels connecting all the time it sometimes does ("Address already in use"). The
ports here come from below that range, where only a program that names the port can take it;
each one was free when it was picked.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

#: The lowest port handed out: above the well-known and common development ports.
LOWEST_PORT = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_pick = random.Random()  # seeded from the OS: test workers started together pick different ports


def _below_ephemeral() -> int:
    """The first port of the kernel's ephemeral range (32768 on Linux unless changed)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def is_free(port: int) -> bool:
    """Whether a server could bind ``127.0.0.1:port`` now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_block(size: int = 1) -> int:
    """A port ``p`` with ``p .. p + size - 1`` all free on 127.0.0.1, below the ephemeral range."""
    highest = _below_ephemeral() - size
    if highest <= LOWEST_PORT:
        raise RuntimeError(f"no room below the ephemeral range ({_EPHEMERAL_RANGE}) for test servers")
    for _ in range(200):
        base = _pick.randrange(LOWEST_PORT, highest)
        if all(is_free(base + k) for k in range(size)):
            return base
    raise RuntimeError(f"no block of {size} free ports between {LOWEST_PORT} and {highest + size}")


def free_port() -> int:
    """One free port on 127.0.0.1, below the ephemeral range."""
    return free_port_block(1)
