"""The nbgrader course folder, built one way for every tool: ``course grade``, ``course release``
and the nightly check of the labs.

    COURSE/nbgrader_config.py        loads the course's grading/nbgrader_config.py (its preprocessors
                                     and timeouts), then points nbgrader's folders into COURSE
    COURSE/source/LAB/               (when the tool copies the source in; else solutions/ is used)
    COURSE/submitted/STUDENT/LAB/    one folder per submission
    COURSE/gradebook.db, release/, autograded/, feedback/   written by nbgrader

    write_course_config(course, {"CourseDirectory.release_directory": course + "/release"})
    copy_submission(course, "alice", "lab01_tensor_parallel", "inbox/alice")
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from grading.paths import GRADING_DIR

#: The course's own nbgrader settings, which every course folder loads first.
GRADING_CONFIG = os.path.join(GRADING_DIR, "nbgrader_config.py")
#: What is never copied into a course folder.
IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")


def course_config(course_dir: str, settings: dict, grading_config: str | None = GRADING_CONFIG,
                  written_by: str = "course") -> str:
    """The text of COURSE/nbgrader_config.py: ``load_subconfig(grading_config)`` (skipped when None),
    ``CourseDirectory.root`` = ``course_dir``, then every ``"Section.trait": value`` of ``settings``."""
    lines = [f"# Written by `{written_by}`: this folder is an nbgrader course (run nbgrader commands here).",
             "c = get_config()  # noqa: F821"]
    if grading_config is not None:
        lines.append(f"load_subconfig({str(grading_config)!r})  # noqa: F821")
    lines.append(f"c.CourseDirectory.root = {str(course_dir)!r}")
    for trait, value in settings.items():
        if trait.count(".") != 1:
            raise ValueError(f"nbgrader setting {trait!r} is not 'Section.trait'")
        lines.append(f"c.{trait} = {value!r}")
    return "\n".join(lines) + "\n"


def write_course_config(course_dir: str, settings: dict, grading_config: str | None = GRADING_CONFIG,
                        written_by: str = "course") -> str:
    """Create ``course_dir`` and write its nbgrader_config.py (see :func:`course_config`); its path."""
    os.makedirs(course_dir, exist_ok=True)
    path = os.path.join(course_dir, "nbgrader_config.py")
    with open(path, "w") as f:
        f.write(course_config(course_dir, settings, grading_config, written_by))
    return path


_empty_gradebook: str | None = None
_empty_gradebook_lock = threading.Lock()


def seed_gradebook(course_dir: str) -> str:
    """Put an empty nbgrader gradebook in ``course_dir`` (COURSE/gradebook.db, which nbgrader then
    uses) unless one is there; its path. It is a copy of one this process made once
    (:func:`_make_empty_gradebook`)."""
    global _empty_gradebook
    path = os.path.join(course_dir, "gradebook.db")
    if os.path.exists(path):
        return path
    with _empty_gradebook_lock:
        if _empty_gradebook is None:
            _empty_gradebook = _make_empty_gradebook()
    os.makedirs(course_dir, exist_ok=True)
    shutil.copyfile(_empty_gradebook, path)
    return path


def _make_empty_gradebook() -> str:
    """A new gradebook in a folder removed when this process exits; its path. It is what nbgrader
    makes: its tables, and an ``alembic_version`` table holding the head revision of nbgrader's
    migration scripts. nbgrader learns that revision by running ``alembic heads``, a Python process
    of its own (about 2.5 s of CPU); here alembic reads it from the same scripts in this process
    (0.1 s), and nbgrader, finding a database, only adds its tables."""
    import sqlite3
    from contextlib import closing

    from alembic.script import ScriptDirectory
    from nbgrader.api import Gradebook
    from nbgrader.dbutil import ALEMBIC_DIR

    head = ScriptDirectory(ALEMBIC_DIR).get_current_head()
    folder = tempfile.mkdtemp(prefix="empty-gradebook-")
    atexit.register(shutil.rmtree, folder, True)
    made = os.path.join(folder, "gradebook.db")
    with closing(sqlite3.connect(made)) as db, db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))
    with Gradebook(f"sqlite:///{made}"):
        pass
    return made


def copy_source(course_dir: str, lab: str, folder: str) -> str:
    """Copy a lab's nbgrader source ``folder`` to COURSE/source/LAB (replacing it); that path."""
    return _copy(folder, os.path.join(course_dir, "source", lab))


def copy_submission(course_dir: str, student: str, lab: str, folder: str) -> str:
    """Copy ``folder`` (a student's notebooks of ``lab``) to COURSE/submitted/STUDENT/LAB; that path.
    A file that cannot be read is left out (``intake`` then says so), the rest is copied."""
    destination = os.path.join(course_dir, "submitted", student, lab)
    try:
        return _copy(folder, destination)
    except shutil.Error:  # raised after copying everything it could
        return destination


def _not_regular(folder: str, names: list) -> set:
    """``IGNORED`` names, and what is neither a folder nor a regular file (a FIFO would block the copy,
    a dangling link would fail it): a submission cannot stop the copying of the class."""
    skipped = set(IGNORED(folder, names))
    for name in names:
        path = os.path.join(folder, name)
        if not (os.path.isdir(path) or os.path.isfile(path)):
            skipped.add(name)
    return skipped


def _copy(folder: str, destination: str) -> str:
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(folder, destination, ignore=_not_regular)
    return destination
