"""`course hub`: the course's JupyterHub on a shared node, after checking what it needs.

    sudo make hub                                                     # via the Makefile
    build/hub/venv/bin/python -E -s -m grading.hub --config FILE      # the same, from the checkout

Every prerequisite is checked at once and each missing one is a line with its fix (root, the
roster's accounts and their passwords, a system Python for the students' environment, npm, free
ports); nothing is changed while one is missing. Then the hub makes what it can: nbgrader's
exchange (world-writable, sticky), the class folder, ``configurable-http-proxy`` (from npm into
``build/hub``), the students' copy and its environment (``grading.hub.shared``), and sets the
permissions a shared node needs (``grading.hub.permissions``): homes, the checkout and the class
folder closed to other users. Students' servers run the students' copy's environment and can
read nothing of the checkout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from grading.hub import checks, permissions, shared
from grading.hub.checks import HubNotReady, load_settings
from grading.paths import COURSE_ROOT, isolated_module
from grading.student_copy import LeakError

HUB_DIR = Path(__file__).resolve().parent
DEFAULT_CONFIG = HUB_DIR / "course_hub.toml"
PROXY_PACKAGE = "configurable-http-proxy@5"

__all__ = ["HubNotReady", "load_settings", "main"]


def config_path(given: Path | None) -> Path:
    """The hub's settings: ``--config``, else ``$COURSE_HUB_CONFIG``, else grading/hub/course_hub.toml."""
    return Path(given or os.environ.get("COURSE_HUB_CONFIG") or DEFAULT_CONFIG).resolve()


def find_proxy(install_dir: Path) -> str:
    """configurable-http-proxy from PATH or ``install_dir``; installed there with npm if absent."""
    local = install_dir / "node_modules" / ".bin" / "configurable-http-proxy"
    for candidate in (shutil.which("configurable-http-proxy"), local):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    npm = shutil.which("npm")
    if npm is None:
        raise HubNotReady(checks.proxy_problems(install_dir)[0])
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


def secure(settings: dict, course_root: Path = Path(COURSE_ROOT)) -> list[str]:
    """Close homes, the checkout, the hub's own environment (when it lives outside the checkout:
    ``make hub VENV=...``) and the class folder to other users; the lines of what changed.
    Raises HubNotReady when a student could still read the checkout through its group."""
    class_dir = Path(settings["class_dir"])
    class_dir.mkdir(parents=True, exist_ok=True)
    owner = course_root.stat()
    os.chown(class_dir, owner.st_uid, owner.st_gid)  # the checkout's instructors run `course class`
    changed = permissions.close_homes(checks.accounts(settings))
    changed += permissions.close_folder(course_root, "the course checkout")
    environment = Path(sys.prefix).resolve()  # the hub's own venv (`make hub`'s HUB_VENV): the course's dependencies
    if sys.prefix != sys.base_prefix and not environment.is_relative_to(course_root.resolve()):
        changed += permissions.close_folder(environment, "the hub's environment")
    changed += permissions.close_to_others(class_dir, "the class folder")
    group = permissions.students_in_group(course_root, settings["students"])
    group += permissions.students_in_group(class_dir, settings["students"])
    if group:
        raise HubNotReady("; ".join(group))
    return changed


def prepare(settings_path: Path, build_dir: Path) -> tuple[list[str], dict]:
    """Check everything, make and secure what the hub needs; return (command, environment)."""
    settings = load_settings(settings_path)
    found = checks.problems(settings, build_dir)
    if found:
        raise HubNotReady("\n".join(found))
    proxy = find_proxy(build_dir)
    prepare_exchange(Path(settings["exchange"]))
    try:
        made = shared.prepare(Path(settings["shared"]), settings["python"])
    except (LeakError, ValueError) as error:
        raise HubNotReady(f"the students' copy cannot be served: {error}") from None
    for line in secure(settings) + made:
        print(f"course hub: {line}", flush=True)
    state_dir = build_dir / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    command = isolated_module("jupyterhub", "-f", str(HUB_DIR / "jupyterhub_config.py"))  # run from COURSE_ROOT
    return command, {**os.environ, "COURSE_HUB_CONFIG": str(settings_path), "COURSE_HUB_STATE": str(state_dir),
                     "COURSE_HUB_PROXY": proxy}


def add_arguments(parser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="the hub's TOML settings (default $COURSE_HUB_CONFIG, else grading/hub/course_hub.toml)")
    parser.add_argument("--build-dir", type=Path, default=Path("build") / "hub",
                        help="where the proxy and the hub's state live (default build/hub)")


def main(args) -> int:
    """Check the node, then replace this process with JupyterHub (it returns only on a failed check)."""
    settings_path = config_path(args.config)
    try:
        command, env = prepare(settings_path, args.build_dir.resolve())
    except HubNotReady as error:
        for line in str(error).splitlines():
            print(f"course hub: {line}", file=sys.stderr)
        return 2
    settings = load_settings(settings_path)
    policy = settings.get("gpus", {}).get("policy", "round_robin")
    print(f"course hub: http://{settings.get('ip', '127.0.0.1')}:{settings.get('port', 8000)}/ "
          f"({len(settings['students'])} students, GPU policy {policy})", flush=True)
    os.chdir(COURSE_ROOT)  # where `-m` finds the checkout's grading, which jupyterhub_config.py imports
    os.execvpe(command[0], command, env)
