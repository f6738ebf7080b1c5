"""Grade a class: autograde every submission of a lab with nbgrader, in parallel, and trust
the judge's verdicts over what the notebooks show.

    from grading.autograder.runner import GradeOptions, grade_class
    report = grade_class(GradeOptions("lab01_tensor_parallel", "submitted/", "build/grading"))

The course folder (``course_dir``) is an ordinary nbgrader course: ``nbgrader_config.py``
(which loads ``grading/nbgrader_config.py``), ``gradebook.db``, ``release/``,
``submitted/<student>/<lab>/``, ``autograded/``, ``feedback/``, plus ``grades.csv``,
``verdicts/<lab>/<student>.json``, ``logs/<lab>/`` and ``reports/<lab>.md|json``.

Each of ``workers`` threads keeps one warm judge process and one autograde worker (nbgrader's
Autograde, imported once) and grades one student at a time, the kernels finding that judge at
``LAB_JUDGE_SOCKET``. Afterwards every
judged test cell gets the judge's score in the gradebook: a notebook that faked a pass, or
never called the judge, scores zero there and is reported.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field

import nbformat

from grading.autograder.course import copy_submission, seed_gradebook, write_course_config
from grading.autograder.execute import KERNEL_DIED, NOT_RUN
from grading.autograder.judge_service import (JudgeService, JudgeServiceFailed, with_visible_devices,
                                               worker_gpus)
from grading.autograder.memory_cgroup import worker_cgroup
from grading.autograder.intake import record_refused, screen_submissions
from grading.autograder.metadata import repair_cell_metadata
from grading.autograder.nbgrader_cli import check, nbgrader_environment, open_course, path_with_this_interpreter_first
from grading.autograder.output_bounds import CUT_MARK
from grading.autograder.sandbox import SANDBOX_ENV, gpu_devices, submission_spec
from grading.autograder.suspicious import suspicious_constructs, suspicious_helper_files
from grading.autograder.tampering import find_tampering
from grading.autograder.worker import AutogradeWorker, WorkerTimeout
from grading.judge.limits import default_memory_limit_gib
from grading.paths import COURSE_ROOT

NOT_JUDGED_LINE = ("✗ not graded: this cell never reached the grader (an error before it, a timeout, "
                   "or a kernel that died)")
#: Characters of nbgrader's log of one submission kept in ``logs/LAB/STUDENT.log`` (its last ones).
MAX_LOG_CHARS = 2**20
#: Error names in an autograded notebook that the report lists (cell timeouts, dead kernels).
NOTABLE_ERRORS = ("CellTimeoutError", KERNEL_DIED)


@dataclass(frozen=True)
class GradeOptions:
    """What to grade and how. Times in seconds: ``cell_timeout_s`` per notebook cell,
    ``rank_timeout_s`` per call that runs ranks (the judge's and the visible checks'),
    ``submission_timeout_s`` for a whole submission's autograde. ``memory_limit_gib`` caps the data
    memory of every process a submission runs (kernel, ranks, the judge's ranks), in GiB; None:
    ``judge.limits.default_memory_limit_gib(workers)``; 0: no cap. ``memory_cap``: how that cap counts
    shared memory too: "address-space" (RLIMIT_AS of each sandboxed process), "cgroup" (a memory
    cgroup per worker, ``PROCESSES_PER_WORKER`` times the cap: ``memory_cgroup``) or "auto" (the
    cgroup on a GPU node, where CUDA's address-space reservations rule RLIMIT_AS out; RLIMIT_AS
    elsewhere). ``course_root``: the course whose
    ``grading`` package the judges, the autograde workers and the kernels import, and whose
    ``solutions/`` holds the lab (default: this package's)."""

    lab: str
    submissions_dir: str
    course_dir: str
    workers: int = 2
    cell_timeout_s: float = 300.0
    rank_timeout_s: float = 60.0
    submission_timeout_s: float = 1200.0
    backend: str = "gloo"
    memory_limit_gib: float | None = None
    memory_cap: str = "auto"
    course_root: str = COURSE_ROOT


@dataclass
class PartScore:
    """One graded cell of one submission. ``status``: "passed", "failed", "not judged",
    "judge error" (left for manual grading) or "nbgrader" (a cell no judge covers)."""

    cell: str
    points: float | None
    max_points: float
    status: str
    notebook_points: float | None
    lines: list = field(default_factory=list)
    note: str = ""


@dataclass
class SubmissionOutcome:
    """What happened to one student's submission."""

    student: str
    seconds: float = 0.0
    failure: str = ""
    verdicts: list = field(default_factory=list)
    tampering: list = field(default_factory=list)
    suspicious: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    parts: list = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(p.points or 0.0 for p in self.parts)

    @property
    def forged(self) -> list:
        return [p for p in self.parts if p.note.startswith("forged")]


@dataclass
class ClassReport:
    """The outcome of a class: one SubmissionOutcome per student, and where the files are."""

    lab: str
    course_dir: str
    max_points: float
    outcomes: list
    seconds: float
    grades_csv: str
    feedback_dir: str
    without_notebook: list = field(default_factory=list)


# ----- the course folder ----------------------------------------------------------------------

def lab_notebooks(lab: str, course_root: str = COURSE_ROOT) -> list:
    """Names of the lab's notebooks in its nbgrader source folder (COURSE_ROOT/solutions/LAB)."""
    from grading.release import source_labs

    labs = source_labs(course_root)
    if lab not in labs:
        raise ValueError(f"no lab {lab!r} in solutions/: choose one of {', '.join(labs) or '(none)'}")
    folder = os.path.join(course_root, "solutions", lab)
    return sorted(name for name in os.listdir(folder) if name.endswith(".ipynb"))


def find_submissions(submissions_dir: str, lab: str, notebooks: list) -> tuple:
    """({student id: folder holding the lab's notebook}, [student folders without it]).

    A student's notebook is SUBMISSIONS/<student>/<lab>/NOTEBOOK (nbgrader's submitted/
    layout) or SUBMISSIONS/<student>/NOTEBOOK. ValueError when no student has one.
    """
    if not os.path.isdir(submissions_dir):
        raise ValueError(f"{submissions_dir} is not a folder of submissions (one subfolder per student)")
    found, without = {}, []
    for student in sorted(os.listdir(submissions_dir)):
        folder = os.path.join(submissions_dir, student)
        if student.startswith(".") or not os.path.isdir(folder):
            continue
        for candidate in (os.path.join(folder, lab), folder):
            if any(os.path.lexists(os.path.join(candidate, name)) for name in notebooks):
                found[student] = candidate
                break
        else:
            without.append(student)
    if not found:
        raise ValueError(f"no submission of {lab} in {submissions_dir}: expected "
                         f"{submissions_dir}/<student>/{notebooks[0]} or {submissions_dir}/<student>/{lab}/{notebooks[0]}")
    return found, without


def prepare_course(options: GradeOptions, submissions: dict) -> str:
    """Write the course config, release the lab into the gradebook (a copy of an empty one:
    ``seed_gradebook``), copy the submissions in; return the release folder."""
    course = options.course_dir
    write_course_config(course, {"CourseDirectory.source_directory": os.path.join(options.course_root, "solutions"),
                                 "CourseDirectory.release_directory": os.path.join(course, "release"),
                                 "SanitizeHiddenTests.verdicts_dir": os.path.join(course, "verdicts"),
                                 "Execute.timeout": int(options.cell_timeout_s),
                                 "Execute.kernel_manager_class": "grading.autograder.sandbox.SandboxedKernelManager"},
                        grading_config=os.path.join(options.course_root, "grading", "nbgrader_config.py"),
                        written_by="course grade")
    for folder in ("verdicts", "logs", "reports"):
        os.makedirs(os.path.join(course, folder, options.lab) if folder != "reports" else os.path.join(course, folder),
                    exist_ok=True)
    os.environ["PATH"] = path_with_this_interpreter_first()  # nbgrader runs alembic from PATH, in this process
    seed_gradebook(course)
    check(open_course(course).generate_assignment(options.lab, force=True, create=True), "generate_assignment")
    for student, source in submissions.items():
        copy_submission(course, student, options.lab, source)
    return os.path.join(course, "release", options.lab)


def repair_submissions(options: GradeOptions, students: list, notebooks: list, release_dir: str) -> dict:
    """Restore the release's nbgrader metadata in every copied submission (``autograder.metadata``),
    so a metadata edit does not fail the whole submission; {student: report lines}."""
    repairs = {}
    for name in notebooks:
        release = nbformat.read(os.path.join(release_dir, name), as_version=4)
        for student in students:
            path = os.path.join(options.course_dir, "submitted", student, options.lab, name)
            if not os.path.exists(path):
                continue
            submitted = nbformat.read(path, as_version=4)
            lines = repair_cell_metadata(release, submitted)
            if lines:
                nbformat.write(submitted, path)
                repairs.setdefault(student, []).extend(lines)
    return repairs


# ----- autograding, in parallel ------------------------------------------------------------------

def _autograde(student: str, service: JudgeService, worker: AutogradeWorker, options: GradeOptions,
               sandbox_root: str, memory_limit_gib: float, cgroup_procs: str) -> SubmissionOutcome:
    """Autograde one submission, its kernel in its sandbox (``autograder.sandbox``); the judge's verdicts."""
    outcome = SubmissionOutcome(student)
    started = time.monotonic()
    try:
        socket_path, kernel_variables = service.begin(student)
    except JudgeServiceFailed as exc:
        outcome.failure = f"the judge could not start: {exc}"
        return outcome
    log_path = os.path.join(options.course_dir, "logs", options.lab, f"{student}.log")
    try:
        spec = submission_spec(sandbox_root, student, options.course_root, socket_path, memory_limit_gib,
                               on_gpu=options.backend != "gloo" and bool(gpu_devices()),
                               hidden=(options.course_dir, os.path.abspath(options.submissions_dir)),
                               cgroup_procs=cgroup_procs, output_log=log_path[:-len(".log")] + ".kernel.log")
        result = worker.autograde(options.lab, student, {**kernel_variables, "LAB_JUDGE_SOCKET": socket_path,
                                                         SANDBOX_ENV: spec.to_env()}, options.submission_timeout_s)
        with open(log_path, "w") as log:  # its tail: nbgrader's log quotes what the cells printed
            log.write((result.get("log", "") + result.get("error", ""))[-MAX_LOG_CHARS:])
        if not result.get("success"):
            outcome.failure = f"nbgrader autograde failed; see {log_path}"
    except WorkerTimeout as exc:
        outcome.failure = str(exc)
    try:
        outcome.verdicts = service.end()
    except JudgeServiceFailed as exc:
        outcome.failure = outcome.failure or f"the judge stopped while grading: {exc}"
    outcome.seconds = time.monotonic() - started
    return outcome


def _run_workers(options: GradeOptions, students: list, progress) -> dict:
    todo: queue.Queue = queue.Queue()
    for student in students:
        todo.put(student)
    outcomes: dict = {}
    lock = threading.Lock()
    kernel_environment = nbgrader_environment(options.course_root, LABUTILS_TIMEOUT=str(options.rank_timeout_s))

    memory_limit_gib = (default_memory_limit_gib(options.workers) if options.memory_limit_gib is None
                        else options.memory_limit_gib)

    count = min(options.workers, len(students))
    cgroups = [worker_cgroup(options, index, memory_limit_gib) for index in range(count)]  # errors before any work
    gpus = worker_gpus(count)  # disjoint GPUs per worker, for its judge and its kernels

    def work(index: int) -> None:
        logs = os.path.join(options.course_dir, "logs", options.lab)
        sandbox_root = tempfile.mkdtemp(prefix="course-grade-sandbox-")
        cgroup = cgroups[index]
        procs = cgroup.procs if cgroup else ""
        service = JudgeService(os.path.join(logs, f"judge-{index}.log"), options.rank_timeout_s, options.backend,
                               memory_limit_gib, course_root=options.course_root, cgroup_procs=procs,
                               visible_devices=gpus[index], lab=options.lab)
        worker = AutogradeWorker(options.course_dir, os.path.join(logs, f"worker-{index}.log"),
                                 with_visible_devices(kernel_environment, gpus[index]),
                                 memory_limit_gib, course_root=options.course_root)
        try:
            while True:
                try:
                    student = todo.get_nowait()
                except queue.Empty:
                    return
                outcome = _autograde(student, service, worker, options, sandbox_root, memory_limit_gib, procs)
                with lock:
                    outcomes[student] = outcome
                    if progress:
                        progress(len(outcomes), len(students), outcome)
        finally:
            worker.close()
            service.close()
            if cgroup:
                cgroup.remove()
            shutil.rmtree(sandbox_root, ignore_errors=True)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


# ----- the judge's word over the notebook's ------------------------------------------------------

def _part_from_verdict(cell: str, max_points: float, notebook_points, verdict: dict | None) -> PartScore:
    if verdict is None:
        part = PartScore(cell, 0.0, max_points, "not judged", notebook_points, [NOT_JUDGED_LINE])
    elif verdict.get("judge_error"):
        # A judge error fails the hidden-test cell in the kernel, so the notebook cannot honestly show a pass.
        forged = bool(notebook_points)
        return PartScore(cell, 0.0 if forged else notebook_points, max_points, "judge error", notebook_points,
                         verdict["lines"], note=("forged: the notebook showed this cell as passed, the judge failed "
                                                 "(judge error); " if forged else "") +
                         f"judge error, left for manual grading: {verdict.get('detail', '')[-500:]}")
    else:
        passed = bool(verdict["passed"])
        part = PartScore(cell, max_points if passed else 0.0, max_points, "passed" if passed else "failed",
                         notebook_points, verdict["lines"])
    if notebook_points is not None and notebook_points > part.points:
        part.note = ("forged: the notebook showed this cell as passed, the judge " +
                     ("never saw it" if verdict is None else "failed it"))
    elif notebook_points is not None and notebook_points < part.points:
        part.note = "the cell failed after the judge passed it (an error or stderr output after the judge ran)"
    return part


def apply_verdicts(options: GradeOptions, outcomes: dict, judged_cells: set) -> float:
    """Score every judged cell from the judge's verdicts in nbgrader's gradebook; fill ``parts``.
    Returns the lab's maximum score."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{os.path.join(options.course_dir, 'gradebook.db')}") as gradebook:
        max_points = gradebook.find_assignment(options.lab).max_score
        for student, outcome in outcomes.items():
            try:
                submission = gradebook.find_submission(options.lab, student)
            except MissingEntry:
                outcome.failure = outcome.failure or "nbgrader has no record of this submission"
                continue
            verdicts = {v["test"]: v for v in outcome.verdicts}  # the last verdict of a test counts
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.name in judged_cells:
                        part = _part_from_verdict(grade.name, grade.max_score, grade.auto_score, verdicts.get(grade.name))
                        grade.auto_score = part.points
                        grade.needs_manual_grade = part.status == "judge error"
                    else:
                        part = PartScore(grade.name, grade.score, grade.max_score, "nbgrader", grade.auto_score)
                    outcome.parts.append(part)
            gradebook.db.commit()
    return max_points


def _notable_errors(options: GradeOptions, student: str, notebooks: list) -> list:
    """"cell X: CellTimeoutError: ..." lines from the autograded notebooks (timeouts, a dead
    kernel); the cells a dead kernel left unrun are counted in one line."""
    found, not_run = [], 0
    for name in notebooks:
        path = os.path.join(options.course_dir, "autograded", student, options.lab, name)
        if not os.path.exists(path):
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            cell_name = cell.metadata.get("nbgrader", {}).get("grade_id", cell.get("id", "?"))
            for output in cell.get("outputs", []):
                if output.output_type == "stream" and CUT_MARK in output.text:
                    found.append(f"cell {cell_name}: {output.text.strip()[1:-1][:300]}")
                if output.output_type != "error" or output.ename not in NOTABLE_ERRORS:
                    continue
                if output.evalue.startswith(NOT_RUN):
                    not_run += 1
                    continue
                found.append(f"cell {cell_name}: {output.ename}: {output.evalue}"[:300])
    if not_run:
        found.append(f"{not_run} later cell{'s' if not_run > 1 else ''} not run (scored zero)")
    return found


#: Files of a submission folder that nbgrader itself expects beside the notebooks.
EXPECTED_FILES = ("timestamp.txt",)


def handed_in_beside(folder: str, notebooks: list) -> list:
    """Names of the files handed in beside the lab's notebooks in ``folder`` (a helper module, data),
    sorted; none when the folder is missing. nbgrader's own files of a hand-in through its exchange
    (``timestamp.txt``, ``submission_secret.txt``) are not the student's."""
    if not os.path.isdir(folder):
        return []
    nbgrader_files = (*EXPECTED_FILES, "submission_secret.txt")
    return sorted(name for name in os.listdir(folder) if name not in notebooks and name not in nbgrader_files
                  and not name.startswith("."))


def helper_files(folder: str, notebooks: list) -> list:
    """A report line per file handed in beside the lab's notebooks (``handed_in_beside``). The code
    the notebook imports from a ``.py`` file there travels to the hidden tests with the cells' code
    (``judge.client.helper_modules``); anything else the notebook reads there is not on the ranks."""
    return [f"handed in {name} beside the notebook: " + (
        "the code the notebook imports from it was graded with the notebook's own" if name.endswith(".py") else
        "the hidden tests do not see this file, so a graded part that reads it fails there; "
        "put what it holds in the notebook") for name in handed_in_beside(folder, notebooks)]


def _write_verdict_files(options: GradeOptions, outcomes: dict, notices: dict) -> None:
    """verdicts/LAB/STUDENT.json ({cell: {"passed", "lines"}}) and STUDENT.notices.json ([lines]): what
    the feedback shows (``feedback.SanitizeHiddenTests``)."""
    import json

    for student, outcome in outcomes.items():
        verdicts = {p.cell: {"passed": p.status == "passed", "lines": p.lines}
                    for p in outcome.parts if p.status != "nbgrader"}
        folder = os.path.join(options.course_dir, "verdicts", options.lab)
        for path, content in ((f"{student}.json", verdicts), (f"{student}.notices.json", notices.get(student, []))):
            with open(os.path.join(folder, path), "w") as f:
                json.dump(content, f, indent=1, ensure_ascii=False)


def export_grades(course_dir: str) -> str:
    """nbgrader's grades.csv (every assignment and student of the gradebook); its path."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    path = os.path.join(course_dir, "grades.csv")
    with Gradebook(f"sqlite:///{os.path.join(course_dir, 'gradebook.db')}") as gradebook:
        CsvExportPlugin(to=path).export(gradebook)
    return path


def judged_cells(lab: str) -> set:
    """grade_ids of the lab's test cells that the judge scores."""
    from grading.judge.engine import load_lab

    return set(load_lab(lab).TESTS)


def generate_feedback(options: GradeOptions, students: list) -> dict:
    """nbgrader's feedback for every autograded student; where one student's fails, each student's
    alone, so one page that cannot be made costs only its owner. {student: the failure's line}."""
    api = open_course(options.course_dir)
    if api.generate_feedback(options.lab, force=True).get("success"):
        return {}
    failed = {}
    for student in students:
        result = api.generate_feedback(options.lab, student, force=True)
        if not result.get("success"):
            failed[student] = "no feedback page: nbgrader generate_feedback failed on this notebook"
    return failed


def _review(options: GradeOptions, outcomes: dict, notebooks: list, release_dir: str, repairs: dict) -> dict:
    """Fill each graded outcome's tampering, suspicious constructs and errors; {student: notices}."""
    notices = {}
    for student, outcome in outcomes.items():
        for name in notebooks:
            submitted = os.path.join(options.course_dir, "submitted", student, options.lab, name)
            if os.path.exists(submitted):
                release = nbformat.read(os.path.join(release_dir, name), as_version=4)
                handed_in = nbformat.read(submitted, as_version=4)
                outcome.tampering += find_tampering(release, handed_in)
                outcome.suspicious += suspicious_constructs(release, handed_in)
        folder = os.path.join(options.course_dir, "submitted", student, options.lab)
        helpers = helper_files(folder, notebooks)
        outcome.suspicious += suspicious_helper_files(folder, handed_in_beside(folder, notebooks))
        outcome.errors = repairs.get(student, []) + _notable_errors(options, student, notebooks) + helpers
        notices[student] = repairs.get(student, []) + helpers
    return notices


def grade_class(options: GradeOptions, progress=None) -> ClassReport:
    """Autograde every submission of ``options.lab``; write feedback, grades.csv and the report.

    ``progress(done, total, outcome)`` is called as each submission finishes.
    Raises ValueError for a bad lab name or submissions folder. A notebook that cannot be graded
    (``autograder.intake``) scores zero with a line in the report; everyone else is graded.
    """
    started = time.monotonic()
    if options.workers < 1:
        raise ValueError(f"workers must be at least 1, got {options.workers}")
    notebooks = lab_notebooks(options.lab, options.course_root)
    submissions, without_notebook = find_submissions(options.submissions_dir, options.lab, notebooks)
    cells = judged_cells(options.lab)
    options = dataclasses.replace(options, course_dir=os.path.abspath(options.course_dir))
    release_dir = prepare_course(options, submissions)
    screenings = screen_submissions(options.course_dir, options.lab, sorted(submissions), notebooks)
    graded = [s for s in sorted(submissions) if not screenings[s].refused]
    refused = {s: screenings[s].lines for s in sorted(submissions) if screenings[s].refused}
    record_refused(options.course_dir, options.lab, refused, notebooks)
    refused = {s: SubmissionOutcome(s, failure="; ".join(lines)) for s, lines in refused.items()}
    for done, outcome in enumerate(refused.values(), 1):
        if progress:
            progress(done, len(submissions), outcome)
    repairs = repair_submissions(options, graded, notebooks, release_dir)
    for student in graded:
        repairs.setdefault(student, [])[:0] = screenings[student].lines
    outcomes = _run_workers(options, graded, progress and (
        lambda done, total, outcome: progress(done + len(refused), total + len(refused), outcome)))
    max_points = apply_verdicts(options, outcomes, cells)
    notices = _review(options, outcomes, notebooks, release_dir, repairs)
    _write_verdict_files(options, outcomes, notices)
    for student, line in generate_feedback(options, graded).items():
        outcomes[student].errors.append(line)
    outcomes.update(refused)
    grades_csv = export_grades(options.course_dir)
    return ClassReport(options.lab, options.course_dir, max_points, [outcomes[s] for s in sorted(outcomes)],
                       time.monotonic() - started, grades_csv, os.path.join(options.course_dir, "feedback"),
                       without_notebook)
