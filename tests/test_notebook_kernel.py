"""The kernel ``labutils check`` and the nightly run notebooks in: over Unix sockets, never ports."""
from __future__ import annotations

import gc
import json
import os

import nbformat
from nbclient import NotebookClient

from labutils.checks import notebook_kernel
from labutils.checks.notebook_kernel import UnixSocketKernelManager

CONNECTION = ("import json, ipykernel.connect\n"
              "info = ipykernel.connect.get_connection_info(unpack=True)\n"
              "print(json.dumps({k: v for k, v in info.items() if k == 'ip' or k.endswith(('transport', '_port'))}))")


def test_a_notebook_runs_in_a_kernel_that_listens_on_unix_sockets_in_a_folder_removed_after(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CONNECTION)]
    client = NotebookClient(nb, timeout=60, kernel_name="python3", kernel_manager_class=UnixSocketKernelManager,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    info = json.loads(nb.cells[0].outputs[0].text)
    assert info["transport"] == "ipc"
    socket_dir = os.path.dirname(info["ip"])
    assert os.path.basename(socket_dir).startswith("kernel-")
    assert len(f"{info['ip']}-{max(info[k] for k in info if k.endswith('_port'))}".encode()) < 108
    client.km = None
    del client
    gc.collect()
    assert not os.path.exists(socket_dir), "the sockets' folder outlives its kernel manager"


def test_the_sockets_go_to_tmp_when_the_temporary_directory_leaves_no_room_for_their_names(monkeypatch, tmp_path):
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setattr(notebook_kernel.tempfile, "tempdir", str(deep))
    assert notebook_kernel._socket_base() == "/tmp"
    monkeypatch.setattr(notebook_kernel.tempfile, "tempdir", "/var/tmp")
    assert notebook_kernel._socket_base() == "/var/tmp"
