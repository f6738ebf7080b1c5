"""Ports for servers started on a node where ranks run: from below the kernel's ephemeral range.

JupyterHub's local spawner picks a student's server port by binding port 0 and releasing it
(``jupyterhub.utils.random_port``); the server binds it seconds later, once Jupyter has
imported. Such a port is in the ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999
unless changed), where every ``connect`` and every ``bind`` to port 0 on the node draws its
port: students' ranks (gloo's pairs, the ``TCPStore``) and kernels do both all the time, and one
that draws the server's port first makes the server fail to start ("Address already in use").
No program draws a port below that range; it is taken only by one that names it.

    ports = ServerPorts(hold_s=120)
    spawner.port = ports.take()   # free now, and not handed out again for 120 s
"""
from __future__ import annotations

import random
import time
from pathlib import Path

from grading.hub.checks import port_free

#: The lowest port handed out: above the well-known and common development ports.
LOWEST_PORT = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_pick = random.Random()  # seeded from the OS: processes started together pick different ports


def first_ephemeral_port() -> int:
    """The first port of the kernel's ephemeral range (32768 on Linux unless changed)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(size: int = 1, avoid=frozenset(), ip: str = "127.0.0.1") -> int:
    """A port ``p`` with ``p .. p + size - 1`` all free on ``ip`` now, below the ephemeral range,
    none of them in ``avoid``."""
    highest = first_ephemeral_port() - size
    if highest <= LOWEST_PORT:
        raise RuntimeError(f"no room below the ephemeral range ({EPHEMERAL_RANGE}) for servers' ports")
    for _ in range(200):
        base = _pick.randrange(LOWEST_PORT, highest)
        block = range(base, base + size)
        if not any(port in avoid for port in block) and all(port_free(ip, port) for port in block):
            return base
    raise RuntimeError(f"no block of {size} free ports between {LOWEST_PORT} and {highest + size}")


class ServerPorts:
    """Ports handed out to servers that bind them later: each one is free when handed out and is
    not handed out again for ``hold_s`` seconds (the longest a server may take to start)."""

    def __init__(self, hold_s: float, ip: str = "127.0.0.1"):
        self.hold_s, self.ip = hold_s, ip
        self._handed_out: dict[int, float] = {}  # port -> time.monotonic() when handed out

    def take(self) -> int:
        now = time.monotonic()
        self._handed_out = {port: at for port, at in self._handed_out.items() if now - at < self.hold_s}
        port = free_port_block(1, avoid=self._handed_out, ip=self.ip)
        self._handed_out[port] = now
        return port
