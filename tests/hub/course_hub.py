"""The course hub under test: accounts, ports, the shared environment's python, nbgrader and course commands."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ACCOUNTS = {"students": ["cstudent1", "cstudent2"], "instructors": ["cteacher1"]}
HUB_START_TIMEOUT_S = 120


def _free_port_block(size: int = 3) -> int:
    """A port p with p .. p + size - 1 all free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + size < 65535 and all(_free(base + k) for k in range(size)):
            return base
    raise RuntimeError("no block of free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Hub:
    """A running hub: its URL, folders and the processes it started."""

    def __init__(self, python: str, workdir: Path, passwords: dict):
        self.python, self.workdir, self.passwords = python, workdir, passwords
        self.port = _free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchange = workdir / "exchange"
        self.config = workdir / "course_hub.toml"
        self.config.write_text(
            f'course_id = "multigpu"\nip = "127.0.0.1"\nport = {self.port}\nexchange = "{self.exchange}"\n'
            f'students = {ACCOUNTS["students"]!r}\ninstructors = {ACCOUNTS["instructors"]!r}\n'
            '[gpus]\npolicy = "round_robin"\nper_student = 1\n'.replace("'", '"'))
        self.log = workdir / "hub.log"
        self.process = None

    def start(self) -> None:
        log = open(self.log, "w")
        self.process = subprocess.Popen(
            [self.python, "-m", "grading.hub", "--config", str(self.config), "--build-dir", str(self.workdir / "build")],
            cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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

    def environment(self) -> dict:
        """The instructor's shell: the course environment's commands first on PATH (nbgrader runs alembic)."""
        return {**os.environ, "PATH": f"{Path(self.python).parent}{os.pathsep}{os.environ['PATH']}"}

    def nbgrader(self, *args: str, cwd: Path) -> str:
        """An instructor's nbgrader command against the hub's exchange; its output."""
        command = [str(Path(self.python).parent / "nbgrader"), *args, f"--Exchange.root={self.exchange}",
                   "--CourseDirectory.course_id=multigpu"]
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, env=self.environment())
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    def course(self, *args: str) -> str:
        """An instructor's `course` command, run from the course repository with its own
        environment (where `solutions/` and the reference kernels are); its output."""
        result = subprocess.run([sys.executable, "-m", "grading", *args], cwd=REPO, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, f"course {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr
