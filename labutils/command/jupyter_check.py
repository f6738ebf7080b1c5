"""The server side of JupyterLab's "Check my lab" button: ``POST /labutils/check`` runs
``labutils check`` on a notebook the server serves and answers with what it printed.

    POST {base_url}labutils/check   {"path": "labs/lab01_tensor_parallel/lab01_tensor_parallel.ipynb"}
    -> 200 {"path": ..., "command": "labutils check ...", "exit_code": 1, "timed_out": false,
            "stdout": "lab01_tensor_parallel.ipynb: 0 of 5 parts pass ...", "stderr": "...",
            "seconds": ...}   (seconds the check took)

The path is relative to the server's root folder (as JupyterLab names files) and must stay
inside it: an absolute path, ``..`` out of the root or a symbolic link leading out of it is
refused (403) before anything runs. Whether the file exists and is one of the course's labs
is ``labutils check``'s to say: its one-line message comes back in ``stderr`` with exit code 2.

The check runs as ``python -m labutils check PATH`` with the server's own interpreter, no
shell, in its own process group. It is stopped (SIGINT, so it shuts its kernel down, then
SIGKILL) after ``LabCheck.timeout_s`` seconds, when the browser drops the request (the
dialog's Close button) and when the server exits. The course's Jupyter configuration
(``labutils/data/jupyter``) enables this extension; the button itself is the JupyterLab
extension built from ``labutils/data/check_button``.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float
from traitlets.config import Configurable

from labutils.checks.labcheck import DEFAULT_CELL_TIMEOUT_S

#: The course's Jupyter configuration: point JUPYTER_CONFIG_PATH here (``make lab``, the hub).
COURSE_JUPYTER_CONFIG = Path(__file__).resolve().parent.parent / "data" / "jupyter"
#: Seconds the check's process gets to shut its kernel down after SIGINT before SIGKILL.
STOP_GRACE_S = 10.0
#: Characters of output kept from each stream (a runaway cell could print megabytes).
MAX_OUTPUT_CHARS = 100_000
#: Checks running now, by pid (each leads its own process group); stopped when the server exits.
_RUNNING_CHECKS: set[int] = set()


class LabCheck(Configurable):
    """Limits of a check started from the button (``c.LabCheck.timeout_s = ...`` in a config file)."""

    timeout_s = Float(900.0, config=True,
                      help="seconds a whole `labutils check` run may take before it is stopped")
    cell_timeout_s = Float(DEFAULT_CELL_TIMEOUT_S, config=True,
                           help="seconds one cell may run (labutils check --timeout)")


class NotebookOutsideRoot(ValueError):
    """The requested path is not a file below the server's root folder."""


def resolve_inside(root_dir: str | os.PathLike, relative_path: str) -> Path:
    """``relative_path`` (as JupyterLab names a file) resolved below ``root_dir``, links followed.

    Raises :class:`NotebookOutsideRoot` for an absolute path or one that leads out of the root.
    """
    if not isinstance(relative_path, str) or not relative_path.strip():
        raise NotebookOutsideRoot("give the notebook's path relative to the server's folder")
    if Path(relative_path).is_absolute():
        raise NotebookOutsideRoot(f"{relative_path} is an absolute path; give it relative to the server's folder")
    root = Path(root_dir).resolve()
    target = (root / relative_path).resolve()
    if not target.is_relative_to(root):
        raise NotebookOutsideRoot(f"{relative_path} is outside the folder this server serves")
    return target


def check_command(notebook: Path, cell_timeout_s: float) -> list[str]:
    """The command the button runs: this interpreter's ``labutils check``."""
    return [sys.executable, "-m", "labutils", "check", str(notebook), "--timeout", f"{cell_timeout_s:g}"]


def _interruptible() -> None:
    """In the check's process before it starts: SIGINT back to its default, so that ``stop``'s SIGINT
    ends it at once even when the server was started with SIGINT ignored (in the background, by
    ``nohup`` or a service manager), which a child inherits."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def run_check(command: list[str], cwd: Path, timeout_s: float) -> dict:
    """Run ``command`` in ``cwd`` (no shell, own process group) for at most ``timeout_s`` seconds.

    Returns exit_code (None when stopped), timed_out, stdout, stderr and seconds it took.
    Cancelling the coroutine stops the process the same way a timeout does.
    """
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=_interruptible)
    _RUNNING_CHECKS.add(process.pid)
    communicating = asyncio.ensure_future(process.communicate())
    timed_out = False
    try:
        stdout, stderr = await asyncio.wait_for(asyncio.shield(communicating), timeout_s)
    except asyncio.TimeoutError:
        timed_out = True
        await stop(process)
        stdout, stderr = await communicating
    except asyncio.CancelledError:
        await stop(process)
        raise
    finally:
        _RUNNING_CHECKS.discard(process.pid)
    return {"exit_code": None if timed_out else process.returncode, "timed_out": timed_out,
            "stdout": stdout.decode(errors="replace")[-MAX_OUTPUT_CHARS:],
            "stderr": stderr.decode(errors="replace")[-MAX_OUTPUT_CHARS:],
            "seconds": round(time.monotonic() - started, 1)}


async def stop(process: asyncio.subprocess.Process) -> None:
    """SIGINT the check (it shuts its kernel down), then SIGKILL its process group if it lingers."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), STOP_GRACE_S)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):  # it may end at that very moment
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


def stop_running_checks() -> None:
    """When the server exits: SIGINT every check still running (it shuts its kernel down), then
    SIGKILL the process groups of those still there after ``STOP_GRACE_S`` seconds."""
    for pid in list(_RUNNING_CHECKS):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    while _RUNNING_CHECKS and time.monotonic() < deadline:
        for pid in list(_RUNNING_CHECKS):
            try:
                ended = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:  # already reaped
                ended = True
            if ended:
                _RUNNING_CHECKS.discard(pid)
        time.sleep(0.1)
    for pid in _RUNNING_CHECKS:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


class CheckHandler(APIHandler):
    """``POST /labutils/check`` with ``{"path": ...}``: run ``labutils check`` on that notebook."""

    _running: asyncio.Task | None = None

    @web.authenticated
    async def post(self):
        path = self._requested_path()
        if path is None:
            return self._refuse(400, 'send JSON {"path": "NOTEBOOK.ipynb"}, the path relative to the server\'s folder')
        try:
            notebook = resolve_inside(self.settings["server_root_dir"], path)
        except NotebookOutsideRoot as error:
            return self._refuse(403, str(error))
        limits: LabCheck = self.settings["labutils_check"]
        command = check_command(notebook, limits.cell_timeout_s)
        root = Path(self.settings["server_root_dir"])  # labutils check runs the notebook in its own folder
        self._running = asyncio.ensure_future(run_check(command, root, limits.timeout_s))
        try:
            result = await self._running
        except asyncio.CancelledError:
            self.log.info("labutils check of %s stopped: the browser closed the request", path)
            return
        self.finish({"path": path, "command": f"labutils check {path}", **result})

    def _requested_path(self) -> str | None:
        """The "path" of the request's JSON body, or None when there is no such string."""
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            return None
        path = body.get("path") if isinstance(body, dict) else None
        return path if isinstance(path, str) and path.strip() else None

    def _refuse(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish({"message": message})

    def on_connection_close(self):
        """The browser went away (the dialog was closed): stop the check it was waiting for."""
        if self._running is not None and not self._running.done():
            self._running.cancel()


def _jupyter_server_extension_points():
    return [{"module": "labutils.command.jupyter_check"}]


def _load_jupyter_server_extension(serverapp):
    """Add ``/labutils/check`` to the server (enabled by the course's jupyter_server_config)."""
    web_app = serverapp.web_app
    web_app.settings["labutils_check"] = LabCheck(parent=serverapp)
    route = url_path_join(web_app.settings["base_url"], "labutils", "check")
    web_app.add_handlers(".*$", [(route, CheckHandler)])
    atexit.register(stop_running_checks)
    serverapp.log.info("labutils: the Check my lab button runs `labutils check` at %s", route)
