"""Release a lab: ``labs/LAB`` is what ``nbgrader generate_assignment`` makes of ``solutions/LAB``.

    course release lab01_tensor_parallel            # (re)write labs/lab01_tensor_parallel/
    course release lab01_tensor_parallel --check    # exit 1 if labs/ is stale
    course release --all --check                    # every lab in solutions/

Never edit ``labs/`` by hand: edit the source notebook (in JupyterLab, nbgrader's "Create
Assignment" toolbar marks solution, read-only and test cells), then release again.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile

from grading.autograder.course import write_course_config
from grading.autograder.nbgrader_cli import NbgraderFailed, run_nbgrader
from grading.paths import COURSE_ROOT


def source_labs(course_root: str = COURSE_ROOT) -> list:
    """The labs that have an nbgrader source folder in COURSE_ROOT/solutions/."""
    root = os.path.join(course_root, "solutions")
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))


def _check_lab(lab: str, course_root: str) -> None:
    labs = source_labs(course_root)
    if lab not in labs:
        raise ValueError(f"no lab {lab!r} in solutions/: choose one of {', '.join(labs) or '(none)'}")


def generate_release(lab: str, release_dir: str, course_root: str = COURSE_ROOT) -> str:
    """Write the release of ``lab`` under ``release_dir``/LAB with nbgrader (no gradebook); return that folder."""
    _check_lab(lab, course_root)
    with tempfile.TemporaryDirectory(prefix="release-") as course_dir:
        write_course_config(course_dir, {"CourseDirectory.source_directory": os.path.join(course_root, "solutions"),
                                         "CourseDirectory.release_directory": os.path.abspath(release_dir)},
                            grading_config=os.path.join(course_root, "grading", "nbgrader_config.py"),
                            written_by="course release")
        run_nbgrader(["generate_assignment", lab, "--force", "--no-db"], cwd=course_dir, course_root=course_root)
    return os.path.join(release_dir, lab)


def _notebook_json(path: str) -> dict:
    import nbformat

    return nbformat.read(path, as_version=4)


def differences(lab: str, course_root: str = COURSE_ROOT) -> list:
    """How labs/LAB differs from a fresh release of solutions/LAB (empty when it is current)."""
    released = os.path.join(course_root, "labs", lab)
    with tempfile.TemporaryDirectory(prefix="fresh-release-") as tmp:
        fresh = generate_release(lab, tmp, course_root)
        if not os.path.isdir(released):
            return [f"labs/{lab} does not exist"]
        fresh_files, released_files = set(os.listdir(fresh)), set(os.listdir(released))
        problems = [f"labs/{lab}/{name} is missing" for name in sorted(fresh_files - released_files)]
        problems += [f"labs/{lab}/{name} is not in the release" for name in sorted(released_files - fresh_files)]
        for name in sorted(fresh_files & released_files):
            a, b = os.path.join(fresh, name), os.path.join(released, name)
            same = (_notebook_json(a) == _notebook_json(b)) if name.endswith(".ipynb") else filecmp.cmp(a, b, shallow=False)
            if not same:
                problems.append(f"labs/{lab}/{name} differs from a fresh release of solutions/{lab}/{name}")
        return problems


def add_arguments(parser) -> None:
    parser.add_argument("lab", nargs="?", help="the lab's folder name in solutions/, e.g. lab01_tensor_parallel")
    parser.add_argument("--all", action="store_true", help="every lab in solutions/")
    parser.add_argument("--check", action="store_true", help="only check that labs/ is current (exit 1 if not)")


def main(args) -> int:
    """``course release``: exit 0 when done (or current), 1 when ``--check`` finds labs/ stale, 2 on errors."""
    if bool(args.lab) == args.all:
        print("course release: error: name one lab, or pass --all", file=sys.stderr)
        return 2
    try:
        labs = source_labs() if args.all else [args.lab]
        if args.check:
            problems = [p for lab in labs for p in differences(lab)]
            for problem in problems:
                print(problem)
            if problems:
                print(f"stale release: run  course release {'--all' if args.all else args.lab}")
            return 1 if problems else 0
        for lab in labs:
            print(f"released {generate_release(lab, os.path.join(COURSE_ROOT, 'labs'))}")
        return 0
    except (ValueError, NbgraderFailed) as exc:
        print(f"course release: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # python -m grading.release ...
    _parser = argparse.ArgumentParser(prog="python -m grading.release", description=__doc__.splitlines()[0])
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
