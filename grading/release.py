"""Release a lab: ``labs/LAB`` is what ``nbgrader generate_assignment`` makes of ``solutions/LAB``.

    python grading/release.py lab01_tensor_parallel            # (re)write labs/lab01_tensor_parallel/
    python grading/release.py lab01_tensor_parallel --check    # exit 1 if labs/ is stale
    python grading/release.py --all --check                    # every lab in solutions/

Never edit ``labs/`` by hand: edit the source notebook (in JupyterLab, nbgrader's "Create
Assignment" toolbar marks solution, read-only and test cells), then release again.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile

GRADING_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(GRADING_DIR)
if GRADING_DIR not in sys.path:
    sys.path.insert(0, GRADING_DIR)

from autograder.nbgrader_cli import NbgraderFailed, run_nbgrader  # noqa: E402


def source_labs() -> list:
    """The labs that have an nbgrader source folder in solutions/."""
    root = os.path.join(REPO_DIR, "solutions")
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))


def _check_lab(lab: str) -> None:
    if lab not in source_labs():
        raise ValueError(f"no lab {lab!r} in solutions/: choose one of {', '.join(source_labs()) or '(none)'}")


def generate_release(lab: str, release_dir: str) -> str:
    """Write the release of ``lab`` under ``release_dir``/LAB with nbgrader (no gradebook); return that folder."""
    _check_lab(lab)
    with tempfile.TemporaryDirectory(prefix="release-") as course_root:
        run_nbgrader(["generate_assignment", lab, "--force", "--no-db", f"--CourseDirectory.root={course_root}",
                      f"--CourseDirectory.release_directory={os.path.abspath(release_dir)}"], cwd=GRADING_DIR)
    return os.path.join(release_dir, lab)


def _notebook_json(path: str) -> dict:
    import nbformat

    return nbformat.read(path, as_version=4)


def differences(lab: str) -> list:
    """How labs/LAB differs from a fresh release of solutions/LAB (empty when it is current)."""
    released = os.path.join(REPO_DIR, "labs", lab)
    with tempfile.TemporaryDirectory(prefix="fresh-release-") as tmp:
        fresh = generate_release(lab, tmp)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab", nargs="?", help="the lab's folder name in solutions/, e.g. lab01_tensor_parallel")
    parser.add_argument("--all", action="store_true", help="every lab in solutions/")
    parser.add_argument("--check", action="store_true", help="only check that labs/ is current (exit 1 if not)")
    args = parser.parse_args(argv)
    if bool(args.lab) == args.all:
        parser.error("name one lab, or pass --all")
    labs = source_labs() if args.all else [args.lab]
    try:
        if args.check:
            problems = [p for lab in labs for p in differences(lab)]
            for problem in problems:
                print(problem)
            if problems:
                print(f"stale release: run  python grading/release.py {'--all' if args.all else args.lab}")
            return 1 if problems else 0
        for lab in labs:
            print(f"released {generate_release(lab, os.path.join(REPO_DIR, 'labs'))}")
        return 0
    except (ValueError, NbgraderFailed) as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
