"""How fast is a class graded? `course grade` against plain `nbgrader autograde`, in one run.

    python bench/grading.py                  # 30 submissions of lab01_tensor_parallel (the course installed)
    python bench/grading.py --n 6            # quicker
    python bench/grading.py --n 30 --workers 4

The N submissions cycle through the solution, the untouched release and the fixtures of
tests/fixtures/lab01 that plain nbgrader grades the same way (the cheat is left out: plain
nbgrader credits its forged pass; the hung rank is left out: it only measures timeouts).
Wall clock on this machine, gloo on CPU:

- plain: ``nbgrader autograde LAB`` once for every student, in a course folder that loads
  grading/nbgrader_config.py (built by ``grading.autograder.course``). nbgrader grades one student
  after another; each kernel starts its own judge process (``python -E -s -m grading.judge.server``,
  torch imported) for its hidden tests.
- course grade: ``course grade LAB SUBMISSIONS --workers W``: W students at a time, one
  warm judge per worker, and it also releases the lab into the gradebook, writes feedback,
  grades.csv and the report (counted in its time; plain autograde does none of that).

Prints the seconds of each, per submission, their ratio, whether every student's total
agrees between the two gradebooks, and the sandbox's overhead per submission: a kernel started,
run on one cell and stopped in course grade's bubblewrap sandbox against the same without it, and
the judge's rank template started (restarted for every submission) in its sandbox against without.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and not __package__:
    # Run as a script, this file (bench/grading.py) would stand in for the grading package it measures:
    # run it again as the module bench.grading from the course root, where `import grading` is the package.
    os.chdir(REPO)
    os.execv(sys.executable, [sys.executable, "-m", "bench.grading", *sys.argv[1:]])
LAB = "lab01_tensor_parallel"
#: Fixtures that plain nbgrader and course grade must score alike.
HONEST_FIXTURES = ("bias_on_every_shard", "f_backward_without_all_reduce", "g_applied_twice",
                   "gather_instead_of_reduce", "kernel_killer", "tampered")


def make_submissions(folder: str, n: int) -> list:
    """Write n submissions (cycling through the kinds above) as folder/<student>/LAB.ipynb."""
    import nbformat

    from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution

    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    solution = student_solution(source, release)
    kinds = {"solution": solution, "untouched": release}
    for name in HONEST_FIXTURES:
        with open(os.path.join(REPO, "tests", "fixtures", "lab01", f"{name}.py")) as f:
            kinds[name] = apply_fixture(solution, parse_fixture(name, f.read()))
    names = list(kinds)
    students = []
    for i in range(n):
        kind = names[i % len(names)]
        student = f"s{i:02d}_{kind}"
        os.makedirs(os.path.join(folder, student))
        nbformat.write(kinds[kind], os.path.join(folder, student, f"{LAB}.ipynb"))
        students.append(student)
    return students


def _environment() -> dict:
    return dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))


def _run(command: list, cwd: str, log_path: str) -> float:
    """Run a command, its output to log_path; return its wall-clock seconds."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        done = subprocess.run(command, cwd=cwd, env=_environment(), stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed (exit status {done.returncode}); see {log_path}")
    return time.perf_counter() - start


def plain_nbgrader(submissions: str, students: list, course: str, logs: str) -> float:
    """Seconds of one ``nbgrader autograde LAB`` over every student (after an untimed release)."""
    from grading.autograder.course import write_course_config

    write_course_config(course, {"CourseDirectory.release_directory": os.path.join(course, "release")},
                        written_by="bench/grading.py")
    nbgrader = [sys.executable, "-m", "nbgrader"]
    _run([*nbgrader, "generate_assignment", LAB, "--force"], course, os.path.join(logs, "plain-release.log"))
    for student in students:
        shutil.copytree(os.path.join(submissions, student), os.path.join(course, "submitted", student, LAB))
    return _run([*nbgrader, "autograde", LAB], course, os.path.join(logs, "plain-autograde.log"))


def course_grade(submissions: str, course: str, logs: str, workers: int) -> float:
    command = [sys.executable, "-m", "grading", "grade", LAB, submissions, "--course-dir", course,
               "--workers", str(workers)]
    return _run(command, REPO, os.path.join(logs, "course-grade.log"))


def totals(course: str) -> dict:
    """{student: total score} from a course's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{os.path.join(course, 'gradebook.db')}") as gradebook:
        return {s.student.id: s.score for s in gradebook.assignment_submissions(LAB)}


def _kernel_round_trip_s(folder: str, manager_class) -> float:
    """Seconds to start a kernel with ``manager_class``, run ``import torch`` in ``folder`` and stop it."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch")]
    start = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3", kernel_manager_class=manager_class,
                   resources={"metadata": {"path": folder}}).execute()
    return time.perf_counter() - start


def sandbox_overhead_s(work: str, repeats: int = 3) -> tuple:
    """(seconds with the sandbox, seconds without) of one kernel's start, cell and stop, best of ``repeats``."""
    from jupyter_client.manager import AsyncKernelManager

    from grading.autograder.sandbox import SANDBOX_ENV, SandboxedKernelManager, submission_spec

    folder = os.path.join(work, "overhead")
    os.makedirs(folder)
    spec = submission_spec(os.path.join(work, "sandboxes"), "bench", REPO, "", 2.0, on_gpu=False)
    os.environ[SANDBOX_ENV] = spec.to_env()
    inside = min(_kernel_round_trip_s(folder, SandboxedKernelManager) for _ in range(repeats))
    outside = min(_kernel_round_trip_s(folder, AsyncKernelManager) for _ in range(repeats))
    return inside, outside


#: Run in a fresh interpreter: seconds to start labutils' rank template and run one call on one rank.
_TEMPLATE_START = ("import os, time, labutils\nstart = time.perf_counter()\n"
                   "labutils.launch(os.getpid, 1, backend='gloo', timeout=120)\nprint(time.perf_counter() - start)")


def rank_template_overhead_s(work: str, repeats: int = 3) -> tuple:
    """(seconds in the judge's rank sandbox, seconds without) to start a rank template and run one call
    on one rank, best of ``repeats``: what ``course grade`` pays per submission (the judge's template
    restarts for each), the sandbox, the staged copy of grading/ and its imports (``rank_guard``) included."""
    import json

    from grading.autograder.sandbox import find_bwrap, judge_rank_wrapper
    from labutils.ranks._starters import RANK_WRAPPER_ENV

    folder = os.path.join(work, "ranks")
    os.makedirs(folder)
    wrapper = judge_rank_wrapper(find_bwrap(), REPO, folder, 2.0, on_gpu=False)
    env = {k: v for k, v in os.environ.items() if k != RANK_WRAPPER_ENV}

    def once(extra: dict) -> float:
        done = subprocess.run([sys.executable, "-c", _TEMPLATE_START], capture_output=True, text=True, cwd=REPO,
                              env=dict(env, TMPDIR=folder, **extra), check=True, timeout=300)
        return float(done.stdout.split()[-1])

    inside = min(once({RANK_WRAPPER_ENV: json.dumps(wrapper)}) for _ in range(repeats))
    outside = min(once({}) for _ in range(repeats))
    return inside, outside


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="submissions (default 30)")
    parser.add_argument("--workers", type=int, default=None, help="course grade workers (default: its own)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (printed) for a look")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    from grading.grade import default_workers

    workers = args.workers or default_workers()
    work = tempfile.mkdtemp(prefix="bench-grading-")
    try:
        submissions, logs = os.path.join(work, "submissions"), os.path.join(work, "logs")
        os.makedirs(submissions)
        os.makedirs(logs)
        students = make_submissions(submissions, args.n)
        print(f"{args.n} submissions of {LAB}, {os.cpu_count()} cores; work folder {work}")
        plain_s = plain_nbgrader(submissions, students, os.path.join(work, "plain"), logs)
        print(f"plain nbgrader autograde:     {plain_s:7.1f} s  ({plain_s / args.n:5.1f} s per submission)")
        ours_s = course_grade(submissions, os.path.join(work, "ours"), logs, workers)
        print(f"course grade ({workers} workers):    {ours_s:7.1f} s  ({ours_s / args.n:5.1f} s per submission,"
              " feedback and grades.csv included)")
        print(f"ratio plain / course grade: {plain_s / ours_s:.2f}x")
        inside, outside = sandbox_overhead_s(work)
        print(f"sandbox overhead: {inside - outside:+.2f} s per submission (a kernel's start, `import torch` "
              f"and stop: {inside:.2f} s in bwrap, {outside:.2f} s without; best of 3)")
        inside, outside = rank_template_overhead_s(work)
        print(f"judge's rank sandbox: {inside - outside:+.2f} s per submission (its rank template's start and one "
              f"call: {inside:.2f} s in bwrap with grading/ staged, imported and deleted, {outside:.2f} s without; "
              "best of 3)")
        plain_totals, ours_totals = totals(os.path.join(work, "plain")), totals(os.path.join(work, "ours"))
        disagree = sorted(s for s in students if plain_totals.get(s) != ours_totals.get(s))
        print("totals agree for every student" if not disagree else
              "totals disagree: " + ", ".join(f"{s} (plain {plain_totals.get(s)}, ours {ours_totals.get(s)})"
                                               for s in disagree))
        return 1 if disagree else 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
