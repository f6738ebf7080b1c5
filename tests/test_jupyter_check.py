"""The "Check my lab" button's set-up and server side (labutils/command/jupyter_check.py): the course's
Jupyter configuration enables both halves, and the prebuilt JupyterLab extension is built from
the source beside it; a Jupyter server started with that configuration answers
POST /labutils/check, refuses paths outside its folder, and passes on labutils check's own
message for a notebook that is not a lab; a check that runs too long, or whose request is
dropped, is stopped with its process group.

:func:`button_setup` is shared with the tests of the students' copy and of the hub."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest
from free_ports import free_port

from labutils.command import jupyter_check
from labutils.command.jupyter_check import COURSE_JUPYTER_CONFIG, NotebookOutsideRoot, resolve_inside, run_check

ROOT = Path(__file__).resolve().parents[1]
#: Seconds the server may take to answer /api/status (2 busy cores: a few seconds).
START_TIMEOUT_S = 90
#: Server extensions these tests do not need, left out to start faster (ours is enabled by the
#: course's jupyter_server_config.d, which adds to this list, never replaced by it).
UNUSED_EXTENSIONS = ("jupyterlab", "notebook", "jupyter_lsp", "nbgrader.server_extensions.formgrader",
                     "nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list",
                     "nbgrader.server_extensions.validate_assignment")

BUILT = COURSE_JUPYTER_CONFIG / "labextensions" / "labutils-check"
SOURCE = ROOT / "labutils" / "data" / "check_button"


def button_setup(config_dirs: list[Path]) -> dict:
    """What a Jupyter server whose JUPYTER_CONFIG_PATH is ``config_dirs`` gets of the button, read
    as jupyter_server and JupyterLab read it: {"jpserver_extensions": the server extensions the
    folders' JSON files enable or disable, "labextensions": {name: folder} found on the
    ``LabApp.extra_labextensions_path`` their jupyter_server_config.py files set}."""
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyterlab_server.config import get_federated_extensions
    from traitlets.config.loader import PyFileConfigLoader

    folders = [str(folder) for folder in config_dirs]
    enabled = ExtensionConfigManager(read_config_path=folders).get_jpserver_extensions()
    paths = []
    for folder in folders:
        if (Path(folder) / "jupyter_server_config.py").is_file():
            config = PyFileConfigLoader("jupyter_server_config.py", path=folder).load_config()
            if "extra_labextensions_path" in config.LabApp:
                paths = config.LabApp.extra_labextensions_path.get_value(paths)
    found = get_federated_extensions(paths)
    return {"jpserver_extensions": enabled, "labextensions": {name: Path(ext["ext_path"]) for name, ext in found.items()}}


def test_the_course_configuration_enables_the_server_side_and_finds_the_button():
    setup = button_setup([COURSE_JUPYTER_CONFIG])
    assert setup["jpserver_extensions"] == {"labutils.command.jupyter_check": True}
    assert setup["labextensions"] == {"labutils-check": BUILT}
    built = json.loads((BUILT / "package.json").read_text())
    assert (BUILT / built["jupyterlab"]["_build"]["load"]).is_file()
    schema = json.loads((BUILT / "schemas" / "labutils-check" / "plugin.json").read_text())
    assert schema["jupyter.lab.toolbars"]["Notebook"][0]["command"] == "labutils:check-lab"
    assert schema["jupyter.lab.menus"]["main"][0]["id"] == "jp-mainmenu-run"


def test_the_course_configuration_hides_the_instructors_panels_and_the_news(monkeypatch):
    """JupyterLab reads labconfig/page_config.json in every folder of JUPYTER_CONFIG_PATH, as `make lab` sets it."""
    from jupyterlab_server.config import get_static_page_config

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(COURSE_JUPYTER_CONFIG))
    page = get_static_page_config(level="all")
    disabled = {name for name, off in page.get("disabledExtensions", {}).items() if off}
    assert {"@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:formgrader",
            "@jupyterlab/apputils-extension:announcements"} <= disabled, page


def test_the_prebuilt_extension_is_built_from_the_source_beside_it():
    """Edit labutils/data/check_button, then run `make labextension`: this fails until then."""
    recorded = {}
    for line in (BUILT / "source.sha256").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        recorded[name.removeprefix("./")] = digest
    present = {str(path.relative_to(SOURCE)): hashlib.sha256(path.read_bytes()).hexdigest()
               for path in sorted(SOURCE.rglob("*")) if path.is_file()}
    assert present == recorded, "the button's source changed since it was built: run `make labextension`"


def test_paths_are_resolved_inside_the_root_and_refused_outside(tmp_path):
    root = tmp_path / "root"
    (root / "labs").mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path)
    assert resolve_inside(root, "labs/lab.ipynb") == (root / "labs" / "lab.ipynb").resolve()
    assert resolve_inside(root, "labs/../lab.ipynb") == (root / "lab.ipynb").resolve()
    for outside in ("../secret.ipynb", "labs/../../secret.ipynb", "escape/secret.ipynb"):
        with pytest.raises(NotebookOutsideRoot, match="outside the folder this server serves"):
            resolve_inside(root, outside)
    with pytest.raises(NotebookOutsideRoot, match="absolute path"):
        resolve_inside(root, str(root / "labs" / "lab.ipynb"))
    with pytest.raises(NotebookOutsideRoot, match="relative to the server's folder"):
        resolve_inside(root, " ")


def _sleeper(ignore_sigint: bool) -> list[str]:
    code = ("import signal, time\n"
            + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if ignore_sigint else "")
            + "print('started', flush=True)\ntime.sleep(120)\n")
    return [sys.executable, "-c", code]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_check_past_its_time_is_stopped_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(jupyter_check, "STOP_GRACE_S", 0.5)
    for ignore_sigint in (False, True):  # SIGINT ends it; else SIGKILL after the grace period
        started = time.monotonic()
        result = asyncio.run(run_check(_sleeper(ignore_sigint), tmp_path, timeout_s=3.0))  # time to print, even when busy
        assert result["timed_out"] and result["exit_code"] is None, result
        assert result["stdout"] == "started\n" and 3.0 <= result["seconds"] < 15, result
        assert time.monotonic() - started < 15


def test_a_cancelled_check_stops_its_process(tmp_path):
    async def cancel_after_start():
        task = asyncio.ensure_future(run_check(_sleeper(False), tmp_path, timeout_s=60))
        def sleepers():  # only the check's process: other tests may have left children of their own
            return [p.pid for p in psutil.Process().children() if "time.sleep(120)" in " ".join(p.cmdline())]

        while not sleepers():
            await asyncio.sleep(0.05)
        pids = sleepers()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pids

    pids = asyncio.run(cancel_after_start())
    assert pids and all(_gone(pid) for pid in pids)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Jupyter server with the course's configuration (as `make lab` sets it), on a free port."""
    root, state = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("state")
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "labutils" / "data" / "jupyter")}
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env[name] = str(state / name.lower())
    port, token = free_port(), secrets.token_hex(8)
    log = open(state / "server.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         "--no-browser", *(["--allow-root"] if os.geteuid() == 0 else []),
         *(f"--ServerApp.jpserver_extensions={name}=False" for name in UNUSED_EXTENSIONS)],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert process.poll() is None, (state / "server.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the Jupyter server did not answer"
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.25)
    yield {"url": f"{base}/labutils/check", "token": token, "root": root}
    process.send_signal(signal.SIGTERM)
    process.wait(30)
    log.close()


def _post(server, body: bytes, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(server["url"], data=body, method="POST",
                                     headers={"Authorization": f"token {token or server['token']}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_the_server_refuses_bad_requests_and_paths_outside_its_folder(server):
    assert _post(server, json.dumps({"path": "../../etc/passwd"}).encode()) == (
        403, {"message": "../../etc/passwd is outside the folder this server serves"})
    status, reply = _post(server, json.dumps({"path": "/etc/passwd"}).encode())
    assert status == 403 and "absolute path" in reply["message"]
    for body in (b"", b"not json", b'["a.ipynb"]', b'{"path": 3}'):
        status, reply = _post(server, body)
        assert status == 400 and '{"path": "NOTEBOOK.ipynb"}' in reply["message"], (body, reply)
    assert _post(server, b'{"path": "a.ipynb"}', token="wrong")[0] == 403


def test_labutils_check_says_what_is_wrong_with_a_missing_or_foreign_notebook(server):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nbformat.write(notebook, server["root"] / "notes.ipynb")
    status, reply = _post(server, json.dumps({"path": "notes.ipynb"}).encode())
    assert status == 200 and reply["exit_code"] == 2 and not reply["timed_out"], reply
    assert reply["command"] == "labutils check notes.ipynb"
    assert "notes.ipynb is not a graded lab" in reply["stderr"], reply
    status, reply = _post(server, json.dumps({"path": "labs/missing.ipynb"}).encode())
    assert status == 200 and reply["exit_code"] == 2 and "no such notebook" in reply["stderr"], reply
