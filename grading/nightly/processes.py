"""The processes of the nightly run: which kernel papermill and nbgrader start, and running one
command under a timeout with everything it started killed afterwards.

    outcome = run_watched(["python", "-m", "nbgrader", ...], cwd, log_path, timeout_s=600)
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grading.nightly.notebooks import NightlyInputError
from grading.paths import COURSE_ROOT, with_course_on_pythonpath

#: seconds between two looks at a running command (timeout, Ctrl-C, new child processes); each look
#: reads every process's /proc entry (about 12 s of CPU over the QUICK nightly at 0.25 s)
POLL_INTERVAL_S = 0.5
#: seconds a finished notebook's leftover processes get to exit by themselves before being killed
LEFTOVER_GRACE_S = 3.0


@dataclass(frozen=True)
class KernelChoice:
    """The kernel papermill and nbgrader start: ``name``, and a folder to put first on JUPYTER_PATH
    when a temporary kernelspec had to be written for this interpreter."""

    name: str
    jupyter_path: str | None
    description: str


def resolve_kernel(name: str | None, scratch_dir: Path) -> KernelChoice:
    """``name`` if installed (else a clear error); by default ``python3`` running this interpreter.

    When the ``python3`` kernelspec Jupyter finds starts another Python, a kernelspec
    pointing at ``sys.executable`` is written under ``scratch_dir`` and put first on JUPYTER_PATH.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    if name is not None:
        try:
            spec = manager.get_kernel_spec(name)
        except NoSuchKernel:
            installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
            raise NightlyInputError(f"kernel {name!r} is not installed (installed: {installed}); "
                                    "see `jupyter kernelspec list`") from None
        return KernelChoice(name, None, f"{name} ({spec.argv[0]})")
    if importlib.util.find_spec("ipykernel") is None:
        raise NightlyInputError(f"ipykernel is not installed in {sys.executable}: pip install ipykernel, "
                                "or pass -k NAME for an installed kernel")
    try:
        if _runs_this_interpreter(manager.get_kernel_spec("python3").argv):
            return KernelChoice("python3", None, f"python3 ({sys.executable})")
    except NoSuchKernel:
        pass
    spec_dir = Path(scratch_dir) / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (course nightly)", "language": "python",
    }))
    return KernelChoice("python3", str(scratch_dir), f"python3 ({sys.executable}, temporary kernelspec)")


def _runs_this_interpreter(argv: list[str]) -> bool:
    """Whether a kernelspec's command starts ``sys.executable`` (jupyter_client maps bare python names to it)."""
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return bool(argv) and (argv[0] in bare or os.path.abspath(argv[0]) == os.path.abspath(sys.executable))


def subprocess_env(kernel: KernelChoice, temp_dir: str | None = None) -> dict:
    """This environment, with this interpreter's bin folder first on PATH (nbgrader runs ``alembic``),
    this package's course root first on PYTHONPATH (``python -m grading.nightly.execute`` finds it
    where the course is not pip-installed) and the temporary kernelspec folder first on
    JUPYTER_PATH when there is one. Launches check NCCL's rules (``LABUTILS_STRICT_COLLECTIVES=1``,
    unless set otherwise). ``temp_dir`` (a folder the run removes) becomes TMPDIR, so that what the
    notebooks leave in the temporary directory (torchrun's log folders, profiler traces) goes with
    it, unless its path is too long for the ranks' socket in it."""
    from labutils.ranks._launch_folder import has_room_for_the_socket

    env = with_course_on_pythonpath(dict(os.environ), COURSE_ROOT)
    if temp_dir is not None and has_room_for_the_socket(temp_dir):
        env["TMPDIR"] = temp_dir
    env.setdefault("LABUTILS_STRICT_COLLECTIVES", "1")
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    if kernel.jupyter_path:
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernel.jupyter_path, env.get("JUPYTER_PATH")]))
    return env


@dataclass
class CommandOutcome:
    """How a watched command ended: ``returncode`` is None when it was stopped (timeout or Ctrl-C);
    ``left_behind`` counts processes it started that were still alive after it ended (then killed)."""

    returncode: int | None
    duration_s: float
    timed_out: bool = False
    left_behind: int = 0


class _ProcessTree:
    """The processes a command started, remembered as they appear so that orphans are found too."""

    def __init__(self, pid: int):
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid)
        self.seen: dict[int, object] = {}

    def refresh(self) -> None:
        try:
            for child in self.root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except self._psutil.NoSuchProcess:
            pass

    def alive(self) -> list:
        alive = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != self._psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except self._psutil.NoSuchProcess:
                pass
        return alive

    def kill(self, processes: list) -> None:
        for process in processes:
            try:
                process.kill()
            except self._psutil.NoSuchProcess:
                pass
        self._psutil.wait_procs(processes, timeout=5)

    def kill_everything(self) -> None:
        self.refresh()
        self.kill([self.root, *self.alive()])

    def kill_leftovers(self, grace_s: float) -> int:
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = self.alive()
        self.kill(leftovers)
        return len(leftovers)


def run_watched(command: list[str], cwd: Path, log_path: Path, timeout_s: float, *, env: dict | None = None,
                stop: threading.Event | None = None) -> CommandOutcome:
    """Run ``command`` with stdout and stderr to ``log_path``; kill it and everything it started
    after ``timeout_s`` seconds or when ``stop`` is set; kill what it leaves running when it ends."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    tree = _ProcessTree(process.pid)
    while True:
        try:
            process.wait(timeout=POLL_INTERVAL_S)
            break
        except subprocess.TimeoutExpired:
            tree.refresh()
            timed_out = time.monotonic() - started > timeout_s
            if timed_out or (stop is not None and stop.is_set()):
                tree.kill_everything()
                process.wait()
                return CommandOutcome(None, time.monotonic() - started, timed_out=timed_out)
    duration = time.monotonic() - started
    return CommandOutcome(process.returncode, duration, left_behind=tree.kill_leftovers(LEFTOVER_GRACE_S))
