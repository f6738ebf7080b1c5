"""The course hub under test: accounts, ports, the shared folder, and the instructors' commands as the README gives them."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from free_ports import free_port_block

REPO = Path(__file__).resolve().parents[2]
#: Throwaway accounts, named apart from any other test's so runs side by side do not meet.
ACCOUNTS = {"students": ["hubstudent1", "hubstudent2"], "instructors": ["hubteacher1"]}
SYSTEM_PYTHON = "/usr/bin/python3"
#: The students' copy and environment the hub makes; kept between runs (the hub reinstalls only
#: what changed), so only the first run waits for pip.
SHARED = Path("/var/tmp/course-students-environment")
#: The hub's own environment, as `make hub` makes it (`make hub-env HUB_VENV=...`: the course's
#: dependencies, not the course); kept between runs like the students' one.
HUB_VENV = Path("/var/tmp/course-hub-environment")
#: Seconds the hub may take to answer: the first start installs the students' environment.
HUB_START_TIMEOUT_S = 1200
#: Seconds `make hub-env` may take: the first run on a machine installs torch and JupyterHub.
HUB_ENV_TIMEOUT_S = 1500


def why_no_hub() -> str | None:
    """Why this machine cannot run the course hub's tests (None when it can): they create Unix
    accounts and run the hub as root, which makes the students' environment with Debian's Python
    and the proxy with npm."""
    if os.geteuid() != 0:
        return "the hub test creates Unix accounts and runs the hub as root: run it as root"
    for tool in ("useradd", "userdel", "chpasswd", "npm"):
        if shutil.which(tool) is None:
            return f"the hub test needs {tool}"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"the hub makes the students' environment with {SYSTEM_PYTHON}, which is missing"
    return None


def make_hub_environment() -> None:
    """The hub's own environment, made by `make hub-env` as `make hub` makes it (again only when the
    course's requirements changed)."""
    made = subprocess.run(["make", "hub-env", f"HUB_VENV={HUB_VENV}"], cwd=REPO, capture_output=True, text=True,
                          timeout=HUB_ENV_TIMEOUT_S)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]


def readme_class_flow() -> tuple[str, str]:
    """The README's class commands: (before the students hand in, after), as written there."""
    readme = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "course class release" in b)
    before, after = re.split(r"^# \.\.\. students.*$", block, maxsplit=1, flags=re.M)
    return before, after


class Hub:
    """A running hub: its URL, folders and the processes it started."""

    def __init__(self, workdir: Path, passwords: dict):
        self.workdir, self.passwords = workdir, passwords
        self.port = free_port_block(3)  # the hub, its API and the proxy's API
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchange = workdir / "exchange"
        self.class_dir = workdir / "class"
        self.config = workdir / "course_hub.toml"
        self.config.write_text(
            f'course_id = "multigpu"\nip = "127.0.0.1"\nport = {self.port}\nexchange = "{self.exchange}"\n'
            f'shared = "{SHARED}"\npython = "{SYSTEM_PYTHON}"\nclass_dir = "{self.class_dir}"\n'
            f'students = {ACCOUNTS["students"]!r}\ninstructors = {ACCOUNTS["instructors"]!r}\n'
            '[gpus]\npolicy = "round_robin"\nper_student = 1\n'.replace("'", '"'))
        self.log = workdir / "hub.log"
        self.process = None

    def start(self) -> None:
        """`course hub` from this checkout, as root, as `make hub` runs it: the hub's own environment's
        Python, isolated, importing the checkout's grading from the checkout."""
        log = open(self.log, "w")
        self.process = subprocess.Popen(
            [str(HUB_VENV / "bin" / "python"), "-E", "-s", "-m", "grading.hub", "--config", str(self.config),
             "--build-dir", str(self.workdir / "build")],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + HUB_START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the hub exited: {self.log.read_text()[-3000:]}"
            try:
                urllib.request.urlopen(f"{self.url}/hub/login", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"the hub did not answer in {HUB_START_TIMEOUT_S} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)

    def run_as_written(self, commands: str) -> str:
        """An instructor's shell in the checkout runs ``commands`` (README lines) against this hub's
        settings; their output."""
        env = {**os.environ, "COURSE_HUB_CONFIG": str(self.config)}
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=REPO, capture_output=True,
                                text=True, timeout=900, env=env)
        assert result.returncode == 0, f"{commands} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr


def hub_workdir(prefix: str) -> Path:
    """A new folder under /var/tmp for a hub's files, readable by the students' accounts."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    os.chmod(workdir, 0o755)
    return workdir


@contextmanager
def started(hub: Hub):
    """``hub`` running; afterwards stopped, and the checkout given back its mode (the hub closes it
    to other users)."""
    checkout_mode = stat.S_IMODE(REPO.stat().st_mode)
    try:
        hub.start()
        yield hub
    finally:
        hub.stop()
        os.chmod(REPO, checkout_mode)


def log_in(page, hub_url: str, name: str, password: str) -> None:
    """Submit the hub's login form as ``name``. The form is filled once the page's scripts have run
    (JupyterHub's login page sets its fields up as it loads, which could clear a field filled too
    early: a login with an empty password) and sent only when both fields hold what was typed."""
    page.goto(f"{hub_url}/hub/login", wait_until="networkidle")
    for selector, value in (("#username_input", name), ("#password_input", password)):
        page.fill(selector, value)
    for selector, value in (("#username_input", name), ("#password_input", password)):
        assert page.input_value(selector) == value, f"the login form's {selector} did not keep what was typed"
    page.click("#login_submit")
