"""The ordinary account that grades in tests/test_sandbox_user.py, and a Python it can run.

Run as root, the account is a system account made once (``course-grader``: no home, no login);
run as an ordinary user, it is that user. Its Python is this interpreter when the account can run
it, else one under /var/tmp with the course's dependencies (the repository's venv may point into
/root, which is 0700), made once per pyproject.toml. ``tests/prepare_environments.py`` makes both
before the suite starts, as part of installing it; the test finds them made.
"""
from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grading.hub.shared import torch_pin

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCOUNT = "course-grader"
SYSTEM_PYTHON = "/usr/bin/python3"
#: What the account's Python must import to grade.
DEPENDENCIES = "import torch, nbgrader, nbclient, ipykernel, cloudpickle"


class Unavailable(Exception):
    """This machine cannot have what a test needs; the test skips (the reason is the message)."""


def account() -> pwd.struct_passwd:
    """This process's own account, or (as root) ``ACCOUNT``, created once."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(ACCOUNT)
    except KeyError:
        if shutil.which("useradd") is None:
            raise Unavailable("running as root, the test grades as an ordinary account, and useradd is missing")
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ACCOUNT],
                              capture_output=True, text=True)
        if done.returncode:
            raise Unavailable(f"cannot create the account {ACCOUNT}: {done.stderr.strip()}")
        return pwd.getpwnam(ACCOUNT)


def as_account(user: pwd.struct_passwd, argv: list, **kwargs) -> subprocess.CompletedProcess:
    """``argv`` run as ``user`` (as root: with its uid and gid, no other group); its output captured."""
    if os.geteuid() == 0:
        kwargs.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def _usable_by(user: pwd.struct_passwd, python: str) -> bool:
    try:
        return as_account(user, [python, "-c", DEPENDENCIES], cwd="/", timeout=120).returncode == 0
    except PermissionError:  # the interpreter, or a folder above it, is closed to the account
        return False


def shared_python(user: pwd.struct_passwd) -> str:
    """A Python with the course's dependencies that ``user`` can run (see the module docstring)."""
    if _usable_by(user, sys.executable):
        return sys.executable
    for ready in sorted(glob.glob("/var/tmp/multigpu-course-*/.installed")):
        python = os.path.join(os.path.dirname(ready), "bin", "python")
        if _usable_by(user, python):
            return python
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        raise Unavailable(f"{sys.executable} is not usable by {user.pw_name} and {SYSTEM_PYTHON} is missing")
    digest = hashlib.sha256(open(os.path.join(REPO, "pyproject.toml"), "rb").read()).hexdigest()[:12]
    venv = f"/var/tmp/multigpu-course-grading-{digest}"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [torch_pin(Path(REPO))], check=True)  # its exact pin first, as `make` installs it
    subprocess.run(pip + [f"{REPO}[course]"], check=True, cwd=tempfile.gettempdir())
    open(os.path.join(venv, ".installed"), "w").close()
    return os.path.join(venv, "bin", "python")
