"""Driving nbgrader: its API in this process (``open_course``), or its command line.

``open_course(course_dir)`` loads the course folder's nbgrader_config.py (which loads
grading/nbgrader_config.py) and returns nbgrader's own ``NbGraderAPI`` on it, the object
formgrader uses; ``check(result, what)`` turns one of its results into an exception.
``run_nbgrader`` runs ``python -m nbgrader ...`` when command-line flags are simpler.
"""
from __future__ import annotations

import os
import subprocess
import sys

from grading.paths import COURSE_ROOT, with_course_on_pythonpath

#: Lines of nbgrader's log quoted when it fails.
LOG_TAIL_LINES = 15


class NbgraderFailed(RuntimeError):
    """An nbgrader step failed; the message ends with its log's last lines."""


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-LOG_TAIL_LINES:])


def nbgrader_environment(course_root: str = COURSE_ROOT, **extra: str) -> dict:
    """This process's environment plus ``extra``, with this interpreter's bin/ first on PATH
    (nbgrader runs ``alembic`` from PATH when it creates a gradebook) and ``course_root`` first on
    PYTHONPATH (nbgrader and its kernels import that course's ``grading``)."""
    return with_course_on_pythonpath(dict(os.environ, PATH=path_with_this_interpreter_first(), **extra), course_root)


def path_with_this_interpreter_first(path: str = None) -> str:
    """``path`` (default: this process's PATH) with this interpreter's bin/ first and nowhere else,
    so that applying it again changes nothing (a long-lived process grading class after class
    does not grow its PATH)."""
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join([bin_dir] + [entry for entry in path.split(os.pathsep) if entry and entry != bin_dir])


def open_course(course_dir: str):
    """nbgrader's NbGraderAPI on the course folder, configured by its nbgrader_config.py."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=course_dir).load_config()
    return NbGraderAPI(CourseDirectory(config=config, root=course_dir), config=config)


def check(result: dict, what: str) -> str:
    """The log of an NbGraderAPI result; NbgraderFailed (with the log's tail) if it failed."""
    log = result.get("log", "")
    if not result.get("success"):
        raise NbgraderFailed(f"nbgrader {what} failed:\n{_tail(log + result.get('error', ''))}")
    return log


def run_nbgrader(args: list, cwd: str, timeout_s: float | None = None, course_root: str = COURSE_ROOT) -> str:
    """Run ``nbgrader ARGS`` in ``cwd`` (where it finds nbgrader_config.py) with ``course_root``'s
    ``grading`` importable; return its log.

    Raises NbgraderFailed (exit status and log tail) or subprocess.TimeoutExpired.
    """
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=nbgrader_environment(course_root),
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    log = done.stdout + done.stderr
    if done.returncode:
        raise NbgraderFailed(f"nbgrader {' '.join(args)} failed (exit status {done.returncode}):\n{_tail(log)}")
    return log
