"""`course class`: a class's hand-in through the hub's nbgrader exchange, one command per step.

    course class release lab02_collectives        # labs/LAB to the exchange: students can fetch it
    course class collect lab02_collectives        # the students' last submissions into CLASS/submitted
    course class grade lab02_collectives          # course grade into CLASS/graded (grades.csv, feedback)
    course class feedback lab02_collectives       # the feedback back to the exchange: students fetch it

The exchange, the course id and the class folder ``CLASS`` come from the hub's settings
(``--config``, else ``$COURSE_HUB_CONFIG``, else grading/hub/course_hub.toml: ``exchange``,
``course_id``, ``class_dir``). ``CLASS`` is created closed to other users; after grading, every
file in it (``gradebook.db``, ``grades.csv``, the feedback) is closed too; the copies ``feedback``
releases to the exchange are made readable. ``feedback`` refuses, with the reason, when the lab
has no graded feedback to release.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from grading.hub import permissions
from grading.hub.checks import HubNotReady, load_settings
from grading.hub.start import config_path
from grading.paths import COURSE_ROOT
from labutils.command.cli import UsageError

STEPS = ("release", "collect", "grade", "feedback")


def add_arguments(parser) -> None:
    parser.add_argument("step", choices=STEPS, help="release, collect, grade or feedback (in this order)")
    parser.add_argument("lab", help="the lab, as named in labs/ (e.g. lab02_collectives)")
    parser.add_argument("--config", type=Path, default=None,
                        help="the hub's TOML settings (default $COURSE_HUB_CONFIG, else grading/hub/course_hub.toml)")
    parser.add_argument("--workers", type=int, default=None, help="grade: submissions graded at once")


def class_folder(settings: dict) -> Path:
    """The class folder, created closed to other users when missing."""
    folder = Path(settings["class_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    permissions.close_folder(folder, "the class folder")
    return folder


def _nbgrader(step: str, lab: str, settings: dict, root: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "nbgrader", step, lab, f"--Exchange.root={settings['exchange']}",
               f"--CourseDirectory.course_id={settings['course_id']}", f"--CourseDirectory.root={root}", *extra]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(command, cwd=root, env=env)
    if result.returncode != 0:
        raise UsageError(f"nbgrader {step} {lab} failed (exit status {result.returncode}; its output is above)")


def install_mathjax() -> None:
    """MathJax 3 for the feedback pages (``feedback.MATHJAX_BUNDLE``), installed from npm as
    ``make site`` does when it is missing and npm is there; else the pages say how to get it."""
    from grading.autograder.feedback import MATHJAX_BUNDLE

    npm = shutil.which("npm")
    if os.path.exists(MATHJAX_BUNDLE) or npm is None:
        return
    prefix = Path(MATHJAX_BUNDLE).parents[3]
    subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "mathjax@3"], check=False)


def released_feedback(graded: Path, lab: str) -> list[Path]:
    """The feedback pages of ``lab`` under ``graded/feedback/STUDENT/LAB/``."""
    return sorted((graded / "feedback").glob(f"*/{lab}/*.html"))


def main(args) -> int:
    try:
        settings = load_settings(config_path(args.config))
    except HubNotReady as error:
        raise UsageError(str(error)) from None
    folder = class_folder(settings)
    graded = folder / "graded"
    if args.step == "release":
        _nbgrader("release_assignment", args.lab, settings, folder,
                  f"--CourseDirectory.release_directory={Path(COURSE_ROOT) / 'labs'}")
    elif args.step == "collect":
        _nbgrader("collect", args.lab, settings, folder)
    elif args.step == "grade":
        install_mathjax()
        workers = ["--workers", str(args.workers)] if args.workers else []
        command = [sys.executable, "-m", "grading", "grade", args.lab, str(folder / "submitted"),
                   "--course-dir", str(graded), *workers]
        status = subprocess.run(command, cwd=COURSE_ROOT).returncode
        permissions.close_to_others(folder, "the class folder")
        return status
    else:
        if not released_feedback(graded, args.lab):
            raise UsageError(f"no feedback for {args.lab} in {graded / 'feedback'}: grade it first "
                             f"(course class grade {args.lab}), then release it")
        _nbgrader("release_feedback", args.lab, settings, graded)
        readable_feedback(Path(settings["exchange"]) / settings["course_id"] / "feedback")
    return 0


def readable_feedback(outbound: Path) -> None:
    """nbgrader copies a feedback page with its mode, and the class folder's are closed to other
    users: the released copies (named by a hash only their student can compute) are made readable."""
    for page in outbound.glob("*.html"):
        os.chmod(page, page.stat().st_mode | 0o444)
