"""The first code of the judge's rank template, inside its sandbox: delete the grader's files, then
become the plain rank template.

The judge's ranks import nothing of the grader: every rank receives its harness and rank code by
value (``grading.judge.shipping``), so the template needs no ``grading`` module, and a
submission's function on a rank must find none, in memory or on disk. The sandbox of the ranks
(``sandbox.judge_rank_wrapper``) shows, in place of the course's ``grading/``, a writable copy
staged for this template alone; this module, run as the template's first interpreter,

1. deletes that staged copy, so nothing of the grader is on disk for the ranks (an import, a
   ``spec_from_file_location`` or an ``open`` of a grader file fails);
2. replaces itself (``execv``) with ``PYTHON -P -m labutils.ranks._template FD``: a fresh interpreter
   that never imported the grader, from which every rank forks.

    python -m grading.autograder.rank_guard STAGED_FOLDER PYTHON -m labutils.ranks._template FD
"""
from __future__ import annotations

import os
import shutil
import sys

#: The module the rank template runs (what ``labutils`` puts after the wrapper's words).
TEMPLATE_MODULE = "labutils.ranks._template"


def forget_sources(folder: str) -> None:
    """Delete everything in ``folder`` (the staged copy of ``grading/``; the folder itself is a mount point)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def template_command(argv: list) -> list:
    """The plain template's command line from ``argv`` (STAGED_FOLDER PYTHON -m labutils.ranks._template FD):
    ``PYTHON -P -m labutils.ranks._template FD`` (``-P``: not the current folder, the ranks' writable one, first)."""
    if len(argv) != 5 or argv[2:4] != ["-m", TEMPLATE_MODULE]:
        raise SystemExit(f"usage: rank_guard STAGED_FOLDER PYTHON -m {TEMPLATE_MODULE} FD, got {argv}")
    return [argv[1], "-P", "-m", TEMPLATE_MODULE, argv[4]]


def main(argv: list) -> None:
    """Delete the staged grader, then exec the plain rank template (the control socket FD stays open)."""
    command = template_command(argv)
    forget_sources(argv[0])
    sys.stdout.flush()
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
