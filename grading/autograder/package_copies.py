"""Every folder from which this interpreter could import a package, wherever it is installed.

The sandboxes hide the grader by covering its folders. Covering the course's ``grading/`` is not
enough where the course is also installed as a package (``pip install .`` puts a full copy of
``grading`` in site-packages, an editable install maps it to its checkout): a student's code that
drops the course root from ``sys.path`` or asks another path entry would import the reference from
there. ``package_folders("grading")`` names each such copy, so the sandbox covers them all.
"""
from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder


def _folders_of(spec) -> list:
    return [str(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def package_folders(name: str, path: list | None = None, meta_path: list | None = None) -> list:
    """Real paths of every folder that holds package ``name`` for an interpreter with ``path`` as
    ``sys.path`` and ``meta_path`` as ``sys.meta_path`` (default: this one's): one per ``sys.path``
    entry that has it (not only the first, which ``import`` would take) and one per other finder
    (editable installs' mappings), in that order, without repeats."""
    path = sys.path if path is None else path
    meta_path = sys.meta_path if meta_path is None else meta_path
    found: list = []
    for finder in meta_path:
        if finder is PathFinder:
            for entry in path:
                found += _folders_of(PathFinder.find_spec(name, [entry or os.getcwd()]))
            continue
        try:
            found += _folders_of(finder.find_spec(name, None))
        except (AttributeError, ImportError, ValueError, TypeError):
            continue  # a finder without find_spec, or one that refuses a top-level name
    unique: list = []
    for folder in (os.path.realpath(f) for f in found):
        if os.path.isdir(folder) and folder not in unique:
            unique.append(folder)
    return unique


def other_copies(name: str, course_root: str) -> list:
    """The folders of package ``name`` this interpreter could import besides ``course_root``'s own."""
    own = os.path.realpath(os.path.join(course_root, name))
    return [folder for folder in package_folders(name) if folder != own]
