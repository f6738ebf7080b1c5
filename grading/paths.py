"""Where the course is, and how the grading processes are started from it.

The course root is the folder that holds ``grading/`` (and ``solutions/``, ``labs/``,
``labutils/``). The judge and the autograde workers run as

    cd COURSE_ROOT && python -E -s -m grading.judge.server ...

``-E`` ignores every ``PYTHON*`` variable and ``-s`` the user's site-packages (``python -I``
without ``-P``), and ``-m`` puts the current folder, the course root, first on the module
path: the process imports that course's ``grading`` and ``labutils`` and nothing a student's
environment points at, with no ``sys.path`` edit.
"""
from __future__ import annotations

import os
import sys

#: The folder of the ``grading`` package.
GRADING_DIR = os.path.dirname(os.path.abspath(__file__))
#: The course root this package belongs to (the folder holding ``grading/``).
COURSE_ROOT = os.path.dirname(GRADING_DIR)


def course_root_of(grading_dir: str | None) -> str:
    """The course root of a ``grading/`` folder (this package's when None); ValueError when
    the folder is not a grading package (no ``judge/`` and ``autograder/`` in it)."""
    if grading_dir is None:
        return COURSE_ROOT
    grading_dir = os.path.abspath(grading_dir)
    if not all(os.path.isdir(os.path.join(grading_dir, part)) for part in ("judge", "autograder")):
        raise ValueError(f"{grading_dir} is not the instructors' grading/ folder (no judge/ and autograder/ in it)")
    return os.path.dirname(grading_dir)


def isolated_module(module: str, *args: str) -> list:
    """The command line that runs ``module`` with this interpreter, isolated (``-E -s -m``);
    run it with ``cwd`` = the course root."""
    return [sys.executable, "-E", "-s", "-m", module, *args]


def with_course_on_pythonpath(env: dict, course_root: str) -> dict:
    """``env`` with ``course_root`` first on PYTHONPATH: the kernels nbgrader starts import that
    course's ``grading`` (hidden-test cells) even where the course is not pip-installed."""
    entries = [course_root, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != course_root)]
    return dict(env, PYTHONPATH=os.pathsep.join(entries))
