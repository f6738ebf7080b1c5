"""An autograde worker: nbgrader's own Autograde, in one process kept across submissions.

``course grade`` runs one worker per parallel slot and hands it one student at a time;
importing nbgrader, nbconvert and the course config once instead of once per student saves
seconds per submission. The child runs ``python -E -s -m grading.autograder.worker COURSE_DIR
MEMORY_LIMIT_GIB`` in the course root (``grading.paths``; the cap on each of its processes,
kernels and ranks included: ``judge.limits``)
and, per JSON frame on stdin ``{"lab", "student", "env"}``, sets ``env`` (the judge's socket)
for the kernels it starts, calls ``NbGraderAPI.autograde`` and answers
``{"success", "log", "error"}``. Its own raw output goes to a log file, never to the reply
channel; its kernels' goes to each submission's own bounded log (``sandbox.bounded_sink``), so no
kernel holds a descriptor of a log with other students' lines. The parent (``AutogradeWorker``) kills and restarts a worker that runs
past its deadline.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from grading.judge.limits import limit_memory
from grading.judge.protocol import read_message, write_message
from grading.paths import COURSE_ROOT, isolated_module


class WorkerTimeout(TimeoutError):
    """A submission ran past its deadline; the worker was killed (it restarts on next use)."""


class AutogradeWorker:
    """The parent's handle on one worker process."""

    def __init__(self, course_dir: str, log_path: str, env: dict, memory_limit_gib: float = 0.0,
                 course_root: str = COURSE_ROOT):
        self._course_dir, self._log_path, self._env = course_dir, log_path, env
        self._memory_limit_gib, self._course_root = memory_limit_gib, course_root
        self._process = None

    def _start(self) -> None:
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                isolated_module("grading.autograder.worker", self._course_dir, str(self._memory_limit_gib)),
                cwd=self._course_root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=self._env, start_new_session=True)

    def autograde(self, lab: str, student: str, env: dict, timeout_s: float) -> dict:
        """Autograde one submission; {"success", "log", "error"}. WorkerTimeout past ``timeout_s``."""
        if self._process is None or self._process.poll() is not None:
            self._start()
        reply: dict = {}

        def exchange():
            try:
                write_message(self._process.stdin, {"lab": lab, "student": student, "env": env})
                reply.update(read_message(self._process.stdout)[0])
            except (OSError, EOFError) as exc:
                reply.update(success=False, log="", error=f"the autograde worker stopped: {exc}")

        thread = threading.Thread(target=exchange, daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self.close(kill=True)
            thread.join()
            raise WorkerTimeout(f"autograde did not finish within {timeout_s:g} s and was stopped")
        return reply

    def close(self, kill: bool = False) -> None:
        """Stop the worker: politely (end of input), or at once with ``kill``."""
        if self._process is None:
            return
        if kill:
            os.killpg(self._process.pid, signal.SIGKILL)
        else:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._process = None


def _detach_output():
    """Keep the original stdout for replies; fd 1 and 2 (and the kernels') go to stderr's file."""
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    return reply


def main(course_dir: str, memory_limit_gib: float) -> int:
    limit_memory(memory_limit_gib)  # before any kernel starts: kernels and their ranks inherit it
    reply = _detach_output()
    from grading.autograder.nbgrader_cli import open_course

    api = open_course(course_dir)
    requests = os.fdopen(0, "rb", closefd=False)
    while True:
        try:
            request, _ = read_message(requests)
        except EOFError:
            return 0
        os.environ.update(request["env"])
        result = api.autograde(request["lab"], request["student"], force=True, create=True)
        write_message(reply, {"success": bool(result["success"]), "log": result.get("log", ""),
                              "error": result.get("error", "")})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
