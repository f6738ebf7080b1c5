"""The Jupyter kernel a notebook runs in when the course runs it unattended (``labutils check``,
the nightly): jupyter's IPC transport, over Unix sockets in a folder of its own.

Over jupyter's default TCP transport the kernel manager picks five free ports by binding port 0
and releasing it; the kernel binds them a second or so later, once Python has started. In that
window any other process on the node that binds port 0 (a gloo rank, a ``TCPStore``, another
kernel manager) may be handed the same port, and the kernel then dies at start-up with
"Address already in use". On a node where ranks start every second the window is hit now and
then. A Unix socket's name is a path in a folder no other process uses, so it cannot be taken.

    from labutils.checks.notebook_kernel import UnixSocketKernelManager
    NotebookClient(nb, kernel_manager_class=UnixSocketKernelManager, ...)

The folder (``kernel-*`` in the temporary directory, or ``/tmp`` when that one's path is too
long for a socket's name) holds the connection file and the five sockets; it is removed when the
manager is collected or the process exits.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref

from jupyter_client.manager import AsyncKernelManager

from labutils.ranks._launch_folder import LONGEST_SOCKET_PATH

#: Longest folder path that leaves room for the socket names in it: the longest name here is
#: ``/kernel-*/kernel-ipc-5`` (29 bytes) after the temporary directory.
_LONGEST_BASE = LONGEST_SOCKET_PATH - 29


def _socket_base() -> str:
    """The temporary directory, or ``/tmp`` when its path leaves no room for the sockets' names."""
    base = tempfile.gettempdir()
    return base if len(base.encode()) <= _LONGEST_BASE else "/tmp"


class UnixSocketKernelManager(AsyncKernelManager):
    """jupyter's kernel manager over the IPC transport, with its sockets in a private folder."""

    def __init__(self, **kwargs):
        self.socket_dir = tempfile.mkdtemp(prefix="kernel-", dir=_socket_base())
        self._remove_socket_dir = weakref.finalize(self, shutil.rmtree, self.socket_dir, True)
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("connection_file", os.path.join(self.socket_dir, "kernel.json"))
        super().__init__(**kwargs)
