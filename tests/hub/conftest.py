"""A real course hub on localhost: Unix accounts, a shared course environment, JupyterHub.

The hub runs as root with PAM logins and spawns each server as its Unix user, as on a
shared GPU node. What it needs and how this sets it up:

- three throwaway accounts (two students, one instructor) with random passwords, removed
  afterwards with their homes and every process they left;
- a course environment every account can run: a venv made with Debian's Python in
  /var/tmp (the developers' Python may live in a private folder), with the course installed
  from this checkout (not editable, so no account needs to read the checkout); it is kept
  between runs, keyed by a hash of the installed sources;
- configurable-http-proxy from npm, and nbgrader's exchange in a fresh folder.

The tests skip with the reason where the machine cannot do this (not root, no useradd, no
npm, no Debian python3 with venv, no Chromium).
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from course_hub import ACCOUNTS, REPO, Hub

SYSTEM_PYTHON = "/usr/bin/python3"
CHROMIUM = "/usr/bin/chromium"
VENV_PARENT = Path("/var/tmp")
#: Sources whose change makes a new course environment.
INSTALLED = ("pyproject.toml", "labutils", "grading")


def _skip_unless_possible() -> None:
    if os.geteuid() != 0:
        pytest.skip("the hub test creates Unix accounts and runs the hub as root: run it as root")
    for tool in ("useradd", "userdel", "chpasswd", "npm"):
        if shutil.which(tool) is None:
            pytest.skip(f"the hub test needs {tool}")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"the hub test builds the shared environment with {SYSTEM_PYTHON}, which is missing")
    installer = REPO / "tests" / "browser" / "install_chromium.sh"
    result = subprocess.run(["bash", str(installer)], capture_output=True, text=True)
    if result.returncode == 3:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stderr


def _sources_hash() -> str:
    digest = hashlib.sha256()
    for name in INSTALLED:
        root = REPO / name
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for path in files:
            digest.update(str(path.relative_to(REPO)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def hub_python() -> str:
    """The shared course environment's python, built once per version of the sources."""
    _skip_unless_possible()
    venv = VENV_PARENT / f"multigpu-course-hub-{_sources_hash()}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        for old in VENV_PARENT.glob("multigpu-course-hub-*"):
            shutil.rmtree(old, ignore_errors=True)
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run(pip + ["torch==2.13.0"], check=True)
        subprocess.run(pip + [f"{REPO}[course,hub]"], check=True, cwd=tempfile.gettempdir())
        (venv / ".installed").touch()
    return str(python)


@pytest.fixture(scope="session")
def accounts():
    """{name: password} for the throwaway students and instructor; removed afterwards."""
    _skip_unless_possible()
    passwords = {}
    for name in ACCOUNTS["students"] + ACCOUNTS["instructors"]:
        subprocess.run(["userdel", "-r", name], capture_output=True)
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
        passwords[name] = secrets.token_urlsafe(12)
        subprocess.run(["chpasswd"], input=f"{name}:{passwords[name]}", text=True, check=True)
    yield passwords
    for name in passwords:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)


@pytest.fixture(scope="module")
def hub(hub_python, accounts):
    workdir = Path(tempfile.mkdtemp(prefix="course-hub-", dir="/var/tmp"))
    os.chmod(workdir, 0o755)
    running = Hub(hub_python, workdir, accounts)
    running.start()
    yield running
    running.stop()
    artifacts = REPO / "test-artifacts" / "hub"
    artifacts.mkdir(parents=True, exist_ok=True)
    shutil.copy(running.log, artifacts / "hub.log")
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield chromium
        chromium.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: runs the course hub with real Unix accounts (tests/hub)")
