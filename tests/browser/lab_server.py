"""A throwaway JupyterLab server for the browser tests: started by Popen, stopped by its PID.

    server = LabServer.start(root_dir, state_dir, log_path)
    page.goto(server.url("lab/tree/notebooks/00_start_here.ipynb"))
    server.stop()

The server listens on 127.0.0.1 on a free port with a random token. Every Jupyter, IPython
and matplotlib folder points into ``state_dir`` or a throwaway folder, so the tests never read
or write the user's settings, workspaces or kernels' runtime files. Its kernels are the ipykernel
of the interpreter running the tests (the course's venv): jupyter_client replaces a
kernelspec's ``python`` with the server's own interpreter. They talk to the server over Unix
sockets in a short runtime folder of the server's own (jupyter's IPC transport): over TCP, a
kernel binds ports its manager found free a second before, and a test launching ranks at the
same time sometimes took one first ("Address already in use").
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from free_ports import free_port

#: Seconds the server may take to answer /api/status after start (2 busy cores: about 5 s).
START_TIMEOUT_S = 90.0
#: Seconds the server gets to shut its kernels down after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 20.0

#: JupyterLab user settings for an unattended browser: no news or update pop-ups, every
#: cell kept in the page (no windowing) so outputs can be read without scrolling, and no
#: autosave: the server writes a notebook in place, so a read while a save the test did not ask
#: for is under way finds half a file ("Unreadable Notebook", 400).
USER_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def throwaway_environment(state_dir: Path) -> dict[str, str]:
    """This process's environment with Jupyter, IPython and matplotlib state under ``state_dir``."""
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        folder = state_dir / name.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[name] = str(folder)
    env.pop("JUPYTER_PATH", None)
    return env


def write_user_settings(config_dir: Path) -> None:
    """Write :data:`USER_SETTINGS` where JupyterLab reads them (``$JUPYTER_CONFIG_DIR/lab/user-settings``)."""
    for relative, settings in USER_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))


#: Seconds a listing of kernels or sessions may keep failing with 500 while a kernel starts (``_listing``).
LISTING_RETRY_S = 30.0


@dataclass
class LabServer:
    """A running ``jupyter lab`` process: its pid, address, token and the folder it serves."""

    process: subprocess.Popen
    port: int
    token: str
    root_dir: Path
    log_path: Path
    runtime_dir: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, path: str) -> str:
        """Address of ``path`` (e.g. "lab/tree/x.ipynb") on this server, token included."""
        separator = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}{separator}token={self.token}"

    @classmethod
    def start(cls, root_dir: Path, state_dir: Path, log_path: Path, command: list[str] | None = None) -> "LabServer":
        """Start ``jupyter lab`` serving ``root_dir`` and wait until it answers.

        ``command`` is how JupyterLab is started (default: this interpreter's, serving ``root_dir``;
        the test of ``make lab`` passes the Makefile's command, run in ``root_dir``); the options
        for an unattended server on 127.0.0.1 with a token are appended to it.
        """
        env = throwaway_environment(state_dir)
        write_user_settings(Path(env["JUPYTER_CONFIG_DIR"]))
        # Short enough for the kernels' socket names (108 bytes at most): not under state_dir.
        env["JUPYTER_RUNTIME_DIR"] = runtime_dir = tempfile.mkdtemp(prefix="lab-runtime-", dir="/tmp")
        port, token = free_port(), secrets.token_hex(16)
        command = command or [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root_dir}"]
        command = [
            *command, "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            "--KernelManager.transport=ipc",
            f"--IdentityProvider.token={token}",
            "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if os.geteuid() == 0:
            command.append("--allow-root")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, env=env, cwd=root_dir, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT)
        server = cls(process, port, token, root_dir, log_path, runtime_dir)
        try:
            server._wait_until_answering()
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_until_answering(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with status {self.process.returncode}; "
                                   f"its log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        raise TimeoutError(f"jupyter lab did not answer within {START_TIMEOUT_S:.0f} s; "
                           f"its log:\n{self.log_tail()}")

    def printed_url(self, timeout_s: float = 30) -> str:
        """The address the server printed for the user to open, with the token (which it prints
        as "..." when the token was given on its command line)."""
        pattern = re.compile(rf"http://127\.0\.0\.1:{self.port}/(\S*)\?token=")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = pattern.search(self.log_tail(100_000))
            if found:
                return self.url(found.group(1))
            time.sleep(0.25)
        raise AssertionError(f"jupyter lab printed no address within {timeout_s:.0f} s; its log:\n{self.log_tail()}")

    def kernels(self) -> list[dict]:
        """The server's running kernels, as its REST API lists them (id, execution_state, ...)."""
        return self._listing("api/kernels")

    def sessions(self) -> list[dict]:
        """The server's sessions, as its REST API lists them (path, kernel with execution_state and
        connections: the number of open websockets to that kernel)."""
        return self._listing("api/sessions")

    def _listing(self, path: str) -> list[dict]:
        """GET ``path`` (a list of kernels or sessions). Asked while a kernel is starting, the server
        answers 500 (its model of that kernel has no ``last_activity`` yet: a TraitError in its log),
        so a 500 is asked again until ``LISTING_RETRY_S`` have passed."""
        deadline = time.monotonic() + LISTING_RETRY_S
        while True:
            try:
                with urllib.request.urlopen(self.url(path), timeout=10) as response:
                    return json.load(response)
            except urllib.error.HTTPError as error:
                if error.code != 500 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def notebook(self, path: str) -> dict:
        """The notebook at ``path`` as saved on the server (nbformat JSON: cells, outputs, metadata)."""
        with urllib.request.urlopen(self.url(f"api/contents/{path}?content=1"), timeout=30) as response:
            return json.load(response)["content"]

    def shutdown_kernels(self) -> None:
        """Shut every kernel down through the REST API (as File > Shut Down All Kernels does)."""
        for kernel in self.kernels():
            request = urllib.request.Request(self.url(f"api/kernels/{kernel['id']}"), method="DELETE")
            with urllib.request.urlopen(request, timeout=30):
                pass

    def log_tail(self, num_bytes: int = 4000) -> str:
        """The end of the server's log, for error messages."""
        try:
            return self.log_path.read_bytes()[-num_bytes:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the server by its pid (it shuts its kernels down), SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
