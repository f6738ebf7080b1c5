"""The first code of the judge's rank template, inside its sandbox: import the grader, then forget its source.

The judge's ranks must run the grader's rank-side code and reference kernels, so they import
``grading.judge`` and ``grading.reference``; a submission's function running on one of those
ranks could then read the reference from disk, or ``importlib.reload`` the modules the judge
disarmed (``rankside.disarm``) and call fresh copies. So the sandbox of the ranks
(``sandbox.judge_rank_wrapper``) does not show the course's ``grading/``: it shows, writable, a
copy staged for this template alone, and this module, run as the template's interpreter,

1. imports every module of ``grading.judge`` and ``grading.reference`` (what any rank may need);
2. deletes the staged copy, so nothing of the grader is left on disk for the ranks: a reload, a
   ``spec_from_file_location`` or an ``open`` of a grader file fails;
3. runs ``labutils._template`` in this same process, so every rank it forks has the grader's
   modules in memory and none on disk.

    python -m grading.autograder.rank_guard STAGED_FOLDER PYTHON -m labutils._template FD
"""
from __future__ import annotations

import importlib
import linecache
import os
import pkgutil
import runpy
import shutil
import sys

#: The grader's packages every rank may import.
PRELOADED_PACKAGES = ("grading.judge", "grading.reference")
#: The module the rank template runs (what ``labutils`` puts after the wrapper's words).
TEMPLATE_MODULE = "labutils._template"


def preload() -> list:
    """Import ``grading``, ``grading.paths`` and every module of ``PRELOADED_PACKAGES``; their names."""
    names = ["grading", "grading.paths"]
    for package in PRELOADED_PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        names += [info.name for info in pkgutil.iter_modules(module.__path__, package + ".")]
    for name in names:
        importlib.import_module(name)
    return names


def forget_sources(folder: str) -> None:
    """Delete everything in ``folder`` (the staged copy of ``grading/``; the folder itself is a mount
    point) and every cache that remembers a file of it."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    linecache.clearcache()
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def main(argv: list) -> None:
    """``argv``: STAGED_FOLDER, then the template's command line (``PYTHON -m labutils._template FD``)."""
    if len(argv) != 5 or argv[2:4] != ["-m", TEMPLATE_MODULE]:
        raise SystemExit(f"usage: rank_guard STAGED_FOLDER PYTHON -m {TEMPLATE_MODULE} FD, got {argv}")
    sys.dont_write_bytecode = True
    preload()
    forget_sources(argv[0])
    sys.argv = [TEMPLATE_MODULE, argv[4]]
    runpy.run_module(TEMPLATE_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
