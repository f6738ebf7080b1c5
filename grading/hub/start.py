"""`course hub`: the course's JupyterHub on a shared node, after checking what it needs.

    sudo make hub VENV=/opt/multigpu-venv PYTHON=/usr/bin/python3     # via the Makefile
    course hub --config grading/hub/course_hub.toml                   # the same, directly

Before JupyterHub starts, every precondition is checked and a missing one is one line:
running as root (each server starts as its student's Unix user), the roster's accounts
exist, the course environment and folder can be read by those users, the port is free,
and ``configurable-http-proxy`` is there (installed from npm into ``build/hub`` if not).
The exchange folder is created world-writable with the sticky bit, as nbgrader's exchange
needs. Nothing is changed when a check fails.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import labutils
from grading.hub import gpus

HUB_DIR = Path(__file__).resolve().parent
DEFAULT_CONFIG = HUB_DIR / "course_hub.toml"
PROXY_PACKAGE = "configurable-http-proxy@5"


class HubNotReady(RuntimeError):
    """A precondition of the hub is not met; the message says what to do."""


def load_settings(path: Path) -> dict:
    """The hub's TOML settings, checked: a roster, a GPU policy the course knows, a port."""
    if not path.is_file():
        raise HubNotReady(f"no hub configuration at {path}")
    try:
        settings = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise HubNotReady(f"{path} is not valid TOML: {error}") from None
    if not settings.get("students"):
        raise HubNotReady(f"{path}: list the students' Unix accounts in `students = [...]`")
    policy = settings.get("gpus", {}).get("policy", "round_robin")
    if policy not in gpus.POLICIES:
        raise HubNotReady(f"{path}: gpus.policy {policy!r} is not one of {', '.join(gpus.POLICIES)}")
    if not isinstance(settings.get("port", 8000), int):
        raise HubNotReady(f"{path}: port must be a number")
    return settings


def check_accounts(settings: dict) -> None:
    missing = [name for name in [*settings["students"], *settings.get("instructors", [])] if not _account(name)]
    if missing:
        raise HubNotReady(f"no Unix account for {', '.join(missing)}: create them (adduser NAME) or fix the roster")


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def check_readable_by_everyone(path: Path, what: str) -> None:
    """Every folder above ``path`` must let other users through (o+x), as servers run as students."""
    real = Path(os.path.realpath(path))
    for folder in [*reversed(real.parents), real if real.is_dir() else real.parent]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            raise HubNotReady(f"students' servers cannot reach {what} ({real}): {folder} is private. "
                              "Install the course environment in a shared folder, e.g. "
                              "`sudo make hub VENV=/opt/multigpu-venv PYTHON=/usr/bin/python3`")


def check_port_free(ip: str, port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind((ip, port))
        except OSError:
            raise HubNotReady(f"port {port} on {ip} is busy (another hub or server?): "
                              "free it or set another `port` in the hub configuration") from None


def find_proxy(install_dir: Path) -> str:
    """configurable-http-proxy from PATH or ``install_dir``; installed there with npm if absent."""
    local = install_dir / "node_modules" / ".bin" / "configurable-http-proxy"
    for candidate in (shutil.which("configurable-http-proxy"), local):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    npm = shutil.which("npm")
    if npm is None:
        raise HubNotReady("JupyterHub needs configurable-http-proxy from npm, and npm is missing: "
                          "install Node.js and npm (Debian: apt-get install npm), then run again")
    install_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([npm, "install", "--silent", "--prefix", str(install_dir), PROXY_PACKAGE],
                            capture_output=True, text=True)
    if result.returncode != 0 or not local.exists():
        raise HubNotReady(f"npm could not install {PROXY_PACKAGE}: {result.stderr.strip()[-300:]}")
    return str(local)


def prepare_exchange(folder: Path) -> None:
    """nbgrader's exchange: a folder every account may write, files kept by their owner (1777)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o1777)


def hub_environment(settings_path: Path, state_dir: Path, proxy: str) -> dict:
    """The environment jupyterhub_config.py reads."""
    return {**os.environ, "COURSE_HUB_CONFIG": str(settings_path),
            "COURSE_HUB_STATE": str(state_dir), "COURSE_HUB_PYTHON": sys.executable,
            "COURSE_HUB_PROXY": proxy}


def prepare(settings_path: Path, build_dir: Path) -> tuple[list[str], dict]:
    """Check everything, prepare the exchange and state folders; return (command, environment)."""
    settings = load_settings(settings_path)
    if os.geteuid() != 0:
        raise HubNotReady("the hub starts each student's server as that student: run it as root (sudo make hub)")
    check_accounts(settings)
    check_readable_by_everyone(Path(sys.executable), "the course's Python")
    check_readable_by_everyone(Path(labutils.__file__), "the labutils package")
    port = settings.get("port", 8000)
    for number in (port, settings.get("hub_api_port", port + 1), settings.get("proxy_api_port", port + 2)):
        check_port_free("127.0.0.1" if number != port else settings.get("ip", "127.0.0.1"), number)
    proxy = find_proxy(build_dir)
    prepare_exchange(Path(settings["exchange"]))
    state_dir = build_dir / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    command = [sys.executable, "-m", "jupyterhub", "-f", str(HUB_DIR / "jupyterhub_config.py")]
    return command, hub_environment(settings_path, state_dir, proxy)


def add_arguments(parser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the hub's TOML settings")
    parser.add_argument("--build-dir", type=Path, default=Path("build") / "hub",
                        help="where the proxy and the hub's state live (default build/hub)")


def main(args) -> int:
    """Check the node, then replace this process with JupyterHub (it returns only on a failed check)."""
    try:
        command, env = prepare(args.config.resolve(), args.build_dir.resolve())
    except HubNotReady as error:
        print(f"course hub: {error}", file=sys.stderr)
        return 2
    settings = load_settings(args.config.resolve())
    policy = settings.get("gpus", {}).get("policy", "round_robin")
    print(f"course hub: http://{settings.get('ip', '127.0.0.1')}:{settings.get('port', 8000)}/ "
          f"({len(settings['students'])} students, GPU policy {policy})", flush=True)
    os.execvpe(command[0], command, env)
