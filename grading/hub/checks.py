"""What the course hub needs before it starts, checked all at once: one line per problem, each with its fix.

``problems(settings)`` returns every unmet prerequisite (root, the hub's own environment free of
the course's editable install, the roster's accounts and their passwords, a Python every account
can run for the students' environment, npm or the proxy, free ports); ``course hub`` prints them all
and changes nothing while any is left.
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

from grading.hub import gpus
from grading.hub.shared import outside_code

#: Where the students' environment and copy live when the settings do not say (``shared``).
DEFAULT_SHARED = "/srv/multigpu"
#: The Python the students' environment is made with when the settings do not say (``python``).
DEFAULT_PYTHON = "/usr/bin/python3"
#: The instructors' course folder (nbgrader's CourseDirectory.root) when the settings do not say.
DEFAULT_CLASS_DIR = "/srv/multigpu-class"
SHADOW = Path("/etc/shadow")


class HubNotReady(RuntimeError):
    """A precondition of the hub is not met; the message says what to do."""


def load_settings(path: Path) -> dict:
    """The hub's TOML settings, checked (a roster, a GPU policy the course knows, a port), with
    ``shared``, ``python`` and ``class_dir`` filled in with their defaults."""
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
    if "exchange" not in settings:
        raise HubNotReady(f"{path}: name nbgrader's exchange folder in `exchange = \"...\"`")
    return {"shared": DEFAULT_SHARED, "python": DEFAULT_PYTHON, "class_dir": DEFAULT_CLASS_DIR,
            "course_id": "multigpu", **settings}


def accounts(settings: dict) -> list[str]:
    return [*settings["students"], *settings.get("instructors", [])]


def missing_accounts(settings: dict) -> list[str]:
    missing = [name for name in accounts(settings) if not _account(name)]
    return [f"no Unix account for {', '.join(missing)}: create them (sudo adduser NAME) or fix the roster"] if missing else []


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def without_password(names: list[str], shadow: Path = SHADOW) -> list[str]:
    """Accounts of ``names`` that cannot log in with a password (none set, or locked), read from
    ``shadow``; none when it cannot be read (not root)."""
    try:
        entries = dict(line.split(":")[:2] for line in shadow.read_text().splitlines() if line.count(":") >= 1)
    except OSError:
        return []
    return [name for name in names if name in entries and (entries[name] in ("", "*") or entries[name].startswith("!"))]


def password_problems(settings: dict, shadow: Path = SHADOW) -> list[str]:
    names = without_password([n for n in accounts(settings) if _account(n)], shadow)
    return [f"{', '.join(names)} cannot log in: the hub logs in with Unix passwords (PAM); "
            f"set one for each (sudo passwd NAME)"] if names else []


def private_on_the_way(path: Path) -> Path | None:
    """The first folder above ``path`` (or ``path`` itself, a folder) that other users cannot enter."""
    real = Path(os.path.realpath(path))
    for folder in [*reversed(real.parents), real if real.is_dir() else real.parent]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def python_problems(python: str) -> list[str]:
    """The Python the students' environment is made with: it must exist, be reachable by every
    account and make venvs (Debian: python3-venv)."""
    fix = "set `python = \"/usr/bin/python3\"` (a system Python) in the hub configuration"
    if not os.access(python, os.X_OK):
        return [f"no Python at {python} for the students' environment: {fix}"]
    folder = private_on_the_way(Path(python))
    if folder is not None:
        return [f"students cannot run {python}: {folder} is private; {fix}"]
    probe = subprocess.run([python, "-c", "import venv, ensurepip"], capture_output=True, text=True)
    if probe.returncode != 0:
        return [f"{python} cannot make a virtual environment: install its venv module (Debian: sudo apt-get install python3-venv)"]
    return []


def port_free(ip: str, port: int) -> bool:
    """Whether a server could listen on ``ip:port`` now: bound as servers bind (SO_REUSEADDR),
    so connections of a stopped server still in TIME-WAIT do not count as busy."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
            return True
        except OSError:
            return False


def port_problems(settings: dict) -> list[str]:
    port = settings.get("port", 8000)
    busy = [n for n in (port, settings.get("hub_api_port", port + 1), settings.get("proxy_api_port", port + 2))
            if not port_free("127.0.0.1" if n != port else settings.get("ip", "127.0.0.1"), n)]
    return [f"port {', '.join(map(str, busy))} is busy (another hub or server?): stop it or set another `port` "
            "in the hub configuration"] if busy else []


def proxy_problems(install_dir: Path) -> list[str]:
    if shutil.which("configurable-http-proxy") or (install_dir / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        return []
    if shutil.which("npm") is None:
        return ["JupyterHub needs configurable-http-proxy from npm, and npm is missing: "
                "install Node.js and npm (Debian: sudo apt-get install npm)"]
    return []


def environment_problems(prefix: Path) -> list[str]:
    """The hub process's own environment (``prefix``, its ``sys.prefix``) must install no code from
    outside it: an editable course there (``make lab``'s and ``make test``'s ``.venv``) maps
    ``grading`` and ``solutions/`` into an environment the checkout does not close with it."""
    found = outside_code(prefix)
    if not found:
        return []
    return [f"the hub's environment {prefix} reaches code outside it ({'; '.join(found)}): start the hub with "
            "`sudo make hub`, which makes it an environment of its own (build/hub/venv) without the course in it"]


def problems(settings: dict, build_dir: Path) -> list[str]:
    """Every unmet prerequisite of the hub, one line each with its fix; empty when it can start."""
    found = [] if os.geteuid() == 0 else [
        "the hub starts each student's server as that student: run it as root (sudo make hub)"]
    found += environment_problems(Path(sys.prefix))
    found += missing_accounts(settings) + password_problems(settings)
    found += python_problems(settings["python"]) + proxy_problems(build_dir) + port_problems(settings)
    return found
