"""`labutils grade LAB SUBMISSIONS`: autograde a class's submissions of a lab with nbgrader.

    labutils grade lab01_tensor_parallel ~/inbox/lab01 --workers 4

SUBMISSIONS holds one folder per student with the lab's notebook in it (or in a LAB/
subfolder: nbgrader's own submitted/ layout). The grading runs in an nbgrader course folder
(default: build/grading beside grading/) and leaves there the gradebook, grades.csv,
feedback/ (hidden tests removed) and reports/LAB.md, which lists what needs a human look:
forged passes, edited or deleted protected cells, timeouts, dead kernels.

The machinery lives in the instructor's grading/ folder, which students never receive;
this module only finds it, runs it and draws the progress bar.
"""
from __future__ import annotations

import os
import sys
import time

from labutils.cli import UsageError

#: Width of the progress bar, in characters.
BAR_WIDTH = 30
#: Ranks of each hidden test (tp_size 2 and 4), so --backend nccl needs this many GPUs.
JUDGE_WORLD_SIZE = 4


def default_workers() -> int:
    """Submissions graded at once: half the cores (each runs a kernel and up to 4 ranks), at least 2."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 2
    return max(2, cores // 2)


def add_arguments(parser) -> None:
    parser.add_argument("lab", help="the lab, as named in solutions/ (e.g. lab01_tensor_parallel)")
    parser.add_argument("submissions", help="folder with one subfolder per student holding the lab's notebook")
    parser.add_argument("--course-dir", help="nbgrader course folder to grade in (default: build/grading beside grading/)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="submissions graded at once (default: half the cores, at least 2)")
    parser.add_argument("--cell-timeout", type=float, default=300.0, help="seconds a notebook cell may run (default 300)")
    parser.add_argument("--rank-timeout", type=float, default=60.0,
                        help="seconds one call on ranks may run, in the judge and in the notebook (default 60)")
    parser.add_argument("--submission-timeout", type=float, default=1200.0,
                        help="seconds a whole submission may take before it is stopped (default 1200)")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto", help="the judge's backend")
    parser.add_argument("--memory-limit", type=float, default=None,
                        help="GiB of host memory each grading process may allocate (kernels and ranks: a "
                             "submission that allocates without end fails there); default: the RAM over "
                             "8 processes per worker, between 1 and 8; 0: no cap")
    parser.add_argument("--grading-dir", help="the instructor's grading/ folder (default: $LAB_GRADING_DIR, "
                                              "or grading/ beside the labutils package)")


def find_grading_dir(explicit: str | None) -> str:
    """The grading/ folder to use; UsageError when there is none (students do not have one)."""
    import labutils

    candidates = [explicit] if explicit else [
        os.environ.get("LAB_GRADING_DIR"),
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(labutils.__file__))), "grading"),
        os.path.join(os.getcwd(), "grading"),
    ]
    for candidate in filter(None, candidates):
        if os.path.isdir(os.path.join(candidate, "judge")) and os.path.isdir(os.path.join(candidate, "autograder")):
            return os.path.abspath(candidate)
    where = explicit or "beside labutils or in the current folder"
    raise UsageError(f"no grading folder (with judge/ and autograder/) {('at ' + where) if explicit else where}: "
                     "pass --grading-dir, the instructor's grading/ folder")


class ProgressBar:
    """Redraws one line on a terminal; prints one line per submission otherwise."""

    def __init__(self, stream):
        self.stream = stream
        self.started = time.monotonic()
        self.interactive = stream.isatty()

    def update(self, done: int, total: int, outcome) -> None:
        elapsed = time.monotonic() - self.started
        left = elapsed / done * (total - done)
        filled = BAR_WIDTH * done // total
        line = (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}  {elapsed:.0f} s, ~{left:.0f} s left"
                f"  ({outcome.student}: {outcome.seconds:.0f} s{', ' + outcome.failure if outcome.failure else ''})")
        if self.interactive:
            self.stream.write("\r" + line[:200].ljust(120) + ("\n" if done == total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def main(args) -> int:
    grading_dir = find_grading_dir(args.grading_dir)
    if grading_dir not in sys.path:
        sys.path.insert(0, grading_dir)
    from autograder.nbgrader_cli import NbgraderFailed
    from autograder.report import summary_lines, write_report
    from autograder.runner import GradeOptions, grade_class

    for name in ("workers", "cell_timeout", "rank_timeout", "submission_timeout"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.memory_limit is not None and not args.memory_limit >= 0:
        raise UsageError(f"--memory-limit must be 0 (no cap) or a positive number of GiB, got {args.memory_limit}")
    from labutils.backend import BackendUnavailableError, choose_backend

    try:
        choose_backend(args.backend, JUDGE_WORLD_SIZE)
    except BackendUnavailableError as exc:
        raise UsageError(f"the judge runs {JUDGE_WORLD_SIZE} ranks: {exc}") from None
    course_dir = args.course_dir or os.path.join(os.path.dirname(grading_dir), "build", "grading")
    options = GradeOptions(args.lab, args.submissions, course_dir, workers=args.workers,
                           cell_timeout_s=args.cell_timeout, rank_timeout_s=args.rank_timeout,
                           submission_timeout_s=args.submission_timeout, backend=args.backend,
                           memory_limit_gib=args.memory_limit)
    print(f"labutils grade: {args.lab} from {args.submissions} in {os.path.abspath(course_dir)} "
          f"({args.workers} workers)", file=sys.stderr, flush=True)
    try:
        report = grade_class(options, progress=ProgressBar(sys.stderr).update)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except NbgraderFailed as exc:
        print(f"labutils grade: {exc}", file=sys.stderr)
        return 1
    markdown_path, _ = write_report(report)
    print("\n".join(summary_lines(report)))
    print(f"\ngrades: {report.grades_csv}\nfeedback: {report.feedback_dir}\nreport: {markdown_path}")
    return 0
