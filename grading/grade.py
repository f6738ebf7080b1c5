"""`course grade LAB SUBMISSIONS`: autograde a class's submissions of a lab with nbgrader.

    course grade lab01_tensor_parallel ~/inbox/lab01 --workers 4
    python -m grading grade lab01_tensor_parallel ~/inbox/lab01      # the same

SUBMISSIONS holds one folder per student with the lab's notebook in it (or in a LAB/
subfolder: nbgrader's own submitted/ layout). The grading runs in an nbgrader course folder
(default: build/grading in the course root) and leaves there the gradebook, grades.csv,
feedback/ (hidden tests removed) and reports/LAB.md, which lists what needs a human look:
forged passes, edited or deleted protected cells, timeouts, dead kernels. Every submission's
kernel runs in a bubblewrap sandbox (``grading.autograder.sandbox``): without ``bwrap`` the
command stops and says how to install it.

The machinery is ``grading.autograder``; this module checks the options, runs it and draws
the progress bar. ``--grading-dir`` names another course's grading/ folder: its judges,
autograde workers and kernels then import that course's ``grading`` (``grading.paths``).
"""
from __future__ import annotations

import os
import sys
import time

from grading.cli import UsageError
from grading.paths import course_root_of

#: Width of the progress bar, in characters.
BAR_WIDTH = 30
#: Ranks of each hidden test (groups of 2 and 4 ranks), so --backend nccl needs this many GPUs.
JUDGE_WORLD_SIZE = 4
#: The judge's backends: gloo (the default, on every node) or NCCL.
JUDGE_BACKENDS = ("gloo", "nccl")
BACKEND_HELP = ("the judge's ranks' backend: gloo (default, on every node: the hidden tests judge correctness, "
                "which does not depend on the backend, on CPU tensors; grading is deterministic and the traffic "
                "check is complete) or nccl (one GPU per rank: the submission runs on the GPUs; the loopback "
                "byte count is NOT checked there, since NCCL moves payloads over NVLink/PCIe, not the sandbox's "
                "loopback, so a second channel between the ranks goes unseen)")


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
    parser.add_argument("--course-dir", help="nbgrader course folder to grade in (default: build/grading in the course root)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="submissions graded at once (default: half the cores, at least 2)")
    parser.add_argument("--cell-timeout", type=float, default=300.0, help="seconds a notebook cell may run (default 300)")
    parser.add_argument("--rank-timeout", type=float, default=60.0,
                        help="seconds one call on ranks may run, in the judge and in the notebook (default 60; "
                             "in the judge, 10x the reference's time for the same test when that is more)")
    parser.add_argument("--submission-timeout", type=float, default=1200.0,
                        help="seconds a whole submission may take before it is stopped (default 1200)")
    parser.add_argument("--backend", choices=JUDGE_BACKENDS, default="gloo", help=BACKEND_HELP)
    parser.add_argument("--memory-limit", type=float, default=None,
                        help="GiB of host memory each grading process may allocate (kernels and ranks: a "
                             "submission that allocates without end fails there); default: the RAM over "
                             "8 processes per worker, between 1 and 8; 0: no cap")
    parser.add_argument("--memory-cap", choices=["auto", "address-space", "cgroup"], default="auto",
                        help="how the memory limit also counts shared memory: RLIMIT_AS of every sandboxed "
                             "process (address-space), or a memory cgroup per worker of 8 times the limit "
                             "(cgroup: needs root or a delegated cgroup); auto (default): the cgroup on a GPU "
                             "node, where CUDA's address-space reservations rule RLIMIT_AS out")
    parser.add_argument("--grading-dir", help="the instructors' grading/ folder of the course to grade with "
                                              "(default: this grading package's)")
    from grading.slurm.grade import add_arguments as add_slurm_arguments

    add_slurm_arguments(parser)  # --slurm PARTITION --shards K: a job array (grading.slurm)


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


def _check_options(args) -> str:
    """The course root to grade with; UsageError for an option out of range."""
    for name in ("workers", "cell_timeout", "rank_timeout", "submission_timeout"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.memory_limit is not None and not args.memory_limit >= 0:
        raise UsageError(f"--memory-limit must be 0 (no cap) or a positive number of GiB, got {args.memory_limit}")
    from labutils.devices.backend import BackendUnavailableError, choose_backend

    try:
        choose_backend(args.backend, JUDGE_WORLD_SIZE)
    except BackendUnavailableError as exc:
        raise UsageError(f"the judge runs {JUDGE_WORLD_SIZE} ranks: {exc}") from None
    _check_gpus_per_worker(args.backend, args.workers)
    from grading.autograder.sandbox import SandboxUnavailable, find_bwrap, probe

    try:
        probe(find_bwrap())
    except SandboxUnavailable as exc:
        raise UsageError(str(exc)) from None
    try:
        return course_root_of(args.grading_dir)
    except ValueError as exc:
        raise UsageError(f"{exc}: pass --grading-dir, the instructors' grading/ folder") from None


def _check_gpus_per_worker(backend: str, workers: int) -> None:
    """On NCCL each worker's judge needs ``JUDGE_WORLD_SIZE`` GPUs of its own (``worker_gpus``)."""
    if backend != "nccl":
        return
    from grading.autograder.judge_service import worker_gpus

    gpus = worker_gpus(workers)[0]
    count = len(gpus.split(",")) if gpus else 0
    if count < JUDGE_WORLD_SIZE:
        total = len(worker_gpus(1)[0].split(",")) if worker_gpus(1)[0] else 0
        raise UsageError(f"--backend nccl gives each worker's judge {JUDGE_WORLD_SIZE} GPUs of its own: {total} GPUs "
                         f"make {count} per worker with --workers {workers}; use --workers "
                         f"{max(1, total // JUDGE_WORLD_SIZE)} (or the default, --backend gloo)")


def main(args) -> int:
    if args.slurm or args.shards or args.sbatch_option:
        from grading.slurm.grade import grade_on_slurm

        return grade_on_slurm(args)
    course_root = _check_options(args)  # before nbgrader's imports (a second): a usage error is said at once
    from grading.autograder.memory_cgroup import CgroupUnavailable
    from grading.autograder.nbgrader_cli import NbgraderFailed
    from grading.autograder.report import summary_lines, write_report
    from grading.autograder.runner import GradeOptions, grade_class

    course_dir = args.course_dir or os.path.join(course_root, "build", "grading")
    options = GradeOptions(args.lab, args.submissions, course_dir, workers=args.workers,
                           cell_timeout_s=args.cell_timeout, rank_timeout_s=args.rank_timeout,
                           submission_timeout_s=args.submission_timeout, backend=args.backend,
                           memory_limit_gib=args.memory_limit, memory_cap=args.memory_cap, course_root=course_root)
    print(f"course grade: {args.lab} from {args.submissions} in {os.path.abspath(course_dir)} "
          f"({args.workers} workers)", file=sys.stderr, flush=True)
    try:
        report = grade_class(options, progress=ProgressBar(sys.stderr).update)
    except (ValueError, CgroupUnavailable) as exc:
        raise UsageError(str(exc)) from None
    except NbgraderFailed as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 1
    markdown_path, _ = write_report(report)
    print("\n".join(summary_lines(report)))
    print(f"\ngrades: {report.grades_csv}\nfeedback: {report.feedback_dir}\nreport: {markdown_path}")
    return 0
