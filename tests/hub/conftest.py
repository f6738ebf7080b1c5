"""A real course hub on localhost: Unix accounts, the students' environment, JupyterHub.

The hub runs as root with PAM logins and spawns each server as its Unix user, as on a
shared GPU node. What it needs and how this sets it up:

- three throwaway accounts (two students, one instructor) with random passwords, removed
  afterwards with their homes and every process they left;
- the hub's own environment (``make hub-env``, under /var/tmp and kept between runs: the course's
  dependencies with JupyterHub, not the course): the hub runs from the checkout, as `make hub` runs it;
- the students' environment, which the hub itself makes from Debian's Python in a shared
  folder under /var/tmp (kept between runs: the hub reinstalls it only when labutils changed);
  both environments are made before the suite starts, with the rest of what it installs
  (tests/prepare_environments.py, run by `make test`), so the tests find them made;
- configurable-http-proxy from npm, and nbgrader's exchange in a fresh folder.

The hub closes the checkout to other users, as on a shared node; the test gives it back its
mode afterwards. The tests skip with the reason where the machine cannot do this (not root,
no useradd, no npm, no Debian python3 with venv, no Chromium).
"""
from __future__ import annotations

import secrets
import shutil
import subprocess
import time

import headless_chromium
import pytest
from course_hub import ACCOUNTS, REPO, Hub, hub_workdir, make_hub_environment, started, why_no_hub


def _skip_unless_possible() -> None:
    reason = why_no_hub()
    if reason:
        pytest.skip(reason)
    reason = headless_chromium.why_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def hub_installed() -> None:
    """The hub's own environment (made before the suite by tests/prepare_environments.py; here
    again only when the course's requirements changed since)."""
    _skip_unless_possible()
    make_hub_environment()


def _remove_account(name: str, timeout_s: float = 60.0) -> None:
    """Kill ``name``'s processes and delete the account with its home, until it is gone (userdel
    refuses while a process of the account is still exiting; a parallel test worker can tear the
    session's accounts down and make them again)."""
    deadline = time.monotonic() + timeout_s
    while subprocess.run(["id", name], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, f"the account {name} could not be removed"
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        time.sleep(0.2)


@pytest.fixture(scope="session")
def accounts():
    """{name: password} for the throwaway students and instructor; removed afterwards."""
    _skip_unless_possible()
    passwords = {}
    for name in ACCOUNTS["students"] + ACCOUNTS["instructors"]:
        _remove_account(name)
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
        passwords[name] = secrets.token_urlsafe(12)
        subprocess.run(["chpasswd"], input=f"{name}:{passwords[name]}", text=True, check=True)
    yield passwords
    for name in passwords:
        _remove_account(name)


@pytest.fixture(scope="module")
def hub(hub_installed, accounts):
    workdir = hub_workdir("course-hub-")
    running = Hub(workdir, accounts)
    try:
        with started(running):
            yield running
    finally:
        artifacts = REPO / "test-artifacts" / "hub"
        artifacts.mkdir(parents=True, exist_ok=True)
        shutil.copy(running.log, artifacts / "hub.log")
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = headless_chromium.launch(playwright)
        yield chromium
        chromium.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: runs the course hub with real Unix accounts (tests/hub)")
