"""The nightly check of the graded labs with nbgrader.

Every lab ``labNN_name`` has its instructor version in ``solutions/labNN_name/`` (nbgrader's
"source") and its student version in ``labs/labNN_name/`` (what ``nbgrader
generate_assignment`` released). Autograded, the solution must get full marks on every
autograded test and the untouched release must get zero; anything else means a test,
a solution or the release is broken.

The check builds a throwaway nbgrader course folder per lab, with the course builder that
``course grade`` uses (:mod:`grading.autograder.course`)::

    COURSE/nbgrader_config.py                  loads grading/nbgrader_config.py (the course's
                                               own settings, as instructors grade), then
                                               points every folder into COURSE
    COURSE/source/labNN_name/                  copy of solutions/labNN_name/
    COURSE/submitted/solution/labNN_name/      the solution, as if a student handed it in
    COURSE/submitted/released/labNN_name/      the untouched release
    COURSE/gradebook.db                        written by generate_assignment and autograde

and runs ``nbgrader generate_assignment`` then ``nbgrader autograde`` once per
submission, the three steps in one subprocess (:mod:`grading.nightly.nbgrader_steps`, each
step with its own log) through the caller's ``run_command`` (so the nightly runner's
timeouts, logs and process clean-up apply). Scores are read from the gradebook.

The solution is executed once, by ``autograde``, with the nightly's parameters injected after
its ``parameters`` cell as papermill injects them into the chapters (in the course folder's
source and in both submissions): its row also fails when any cell raised, and its executed
notebook is the run's copy (``solutions/labNN_name/``). The lab is not executed a second time by
papermill.
"""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from grading.autograder.course import copy_source, copy_submission, seed_gradebook, write_course_config
from grading.nightly.execute import INJECTED_TAG, PARAMETERS_TAG, describe_cell, exception_lines, failing_cell
from grading.nightly.report import FAILED, PASSED, TIMED_OUT, Result

#: the two submissions graded per lab: (student id, the score the check expects)
SOLUTION, RELEASED = "solution", "released"


@dataclass(frozen=True)
class Lab:
    """One graded lab: its folder name and where its two versions are (None when missing)."""

    name: str
    source_dir: Path | None
    released_dir: Path | None

    def notebook_names(self, folder: Path | None) -> set[str]:
        return {path.name for path in folder.glob("*.ipynb")} if folder is not None else set()


def discover_labs(root: Path) -> list[Lab]:
    """Every ``labNN_name`` folder under ``root/solutions`` or ``root/labs``, sorted by name."""
    root = Path(root)
    folders: dict[str, dict[str, Path]] = {}
    for kind in ("solutions", "labs"):
        for folder in sorted((root / kind).glob("lab*")):
            if folder.is_dir() and any(folder.glob("*.ipynb")):
                folders.setdefault(folder.name, {})[kind] = folder
    return [Lab(name, found.get("solutions"), found.get("labs")) for name, found in sorted(folders.items())]


def row_names(lab: Lab) -> dict[str, str]:
    """{student: the report row's name} for the lab's two checks."""
    return {SOLUTION: f"{lab.name} (solution)", RELEASED: f"{lab.name} (released)"}


def grade_lab(lab: Lab, workdir: Path, out_dir: Path, run_command, *, kernel: str, cell_timeout_s: float,
              timeout_s: float, parameters: dict | None = None) -> list[Result]:
    """Autograde ``lab``'s solution (expects full marks, every cell run without an error) and its
    release (expects zero): two results. ``parameters`` (the nightly's QUICK, WORLD_SIZE, BACKEND)
    are injected after each notebook's ``parameters`` cell; without one, the solution's row fails.

    ``run_command(command, cwd, log_path, timeout_s)`` runs one subprocess and returns an
    object with ``returncode`` (None when stopped), ``timed_out`` and ``duration_s``
    (seconds). ``workdir`` receives the course folder, ``out_dir/logs/grading`` the nbgrader logs.
    The solution's row also counts the seconds spent on ``generate_assignment``.
    """
    names = row_names(lab)
    problems = _pairing_problems(lab)
    if lab.source_dir is None:
        return [Result(names[RELEASED], "grading", FAILED, 0.0, error=problems[RELEASED])]

    course = Path(workdir) / lab.name
    shutil.rmtree(course, ignore_errors=True)
    copy_source(str(course), lab.name, str(lab.source_dir))
    if parameters is not None:
        unparameterized = inject_parameters(course / "source" / lab.name, parameters, kernel)
        if unparameterized:
            return [Result(names[SOLUTION], "grading", FAILED, 0.0,
                           error=f"{', '.join(unparameterized)}: no cell tagged {PARAMETERS_TAG!r}: tag the cell that "
                                 "sets QUICK and WORLD_SIZE so the nightly values replace them"),
                    Result(names[RELEASED], "grading", FAILED, 0.0, error="not graded: the solution has no parameters")]
    _write_course_config(course, lab.source_dir.parent.parent)
    seed_gradebook(str(course))
    out_dir = Path(out_dir)
    logs_dir = out_dir / "logs" / "grading"
    logs_dir.mkdir(parents=True, exist_ok=True)
    students = [student for student in (SOLUTION, RELEASED) if student not in problems]
    for student in students:
        folder = lab.source_dir if student == SOLUTION else lab.released_dir
        submitted = Path(copy_submission(str(course), student, lab.name, str(folder)))
        if parameters is not None:
            inject_parameters(submitted, parameters, kernel)

    steps = [("generate_assignment", None)] + [("autograde", student) for student in students]
    logs = [logs_dir / f"{lab.name}-{student or what}.log" for what, student in steps]
    outcomes_path = course / "outcomes.jsonl"
    spec = {"lab": lab.name, "outcomes": str(outcomes_path),
            "options": [f"--ExecutePreprocessor.timeout={int(cell_timeout_s)}",
                        f"--ExecutePreprocessor.kernel_name={kernel}",
                        # Unix sockets, not TCP ports that another process may take between the
                        # kernel manager's choice and the kernel's bind (ZMQError: Address already in use)
                        "--ExecutePreprocessor.kernel_manager_class="
                        "labutils.checks.notebook_kernel.UnixSocketKernelManager"],
            "steps": [{"student": student, "log": str(log)} for (_what, student), log in zip(steps, logs)]}
    process_log = logs_dir / f"{lab.name}-nbgrader.log"
    limit_s = timeout_s * len(steps)  # --timeout for each step
    ran = run_command([sys.executable, "-m", "grading.nightly.nbgrader_steps", json.dumps(spec)], course,
                      process_log, limit_s)
    return _rows(lab, steps, logs, _read_outcomes(outcomes_path), ran, problems, course, out_dir, limit_s,
                 process_log)


def _rows(lab: Lab, steps: list, logs: list, outcomes: dict, ran, problems: dict, course: Path, out_dir: Path,
          limit_s: float, process_log: Path) -> list[Result]:
    """The lab's two report rows from what its nbgrader steps did (``outcomes``: step index -> outcome) and
    how their process ended (``ran``); a row whose step did not succeed says why."""
    names = row_names(lab)
    results = {student: Result(names[student], "grading", FAILED, 0.0, error=problems[student])
               for student in problems}
    recorded_s = sum(outcome["duration_s"] for outcome in outcomes.values())
    stopped_at = next(index for index in range(len(steps) + 1) if not outcomes.get(index, {}).get("ok"))
    for index in range(1, len(steps)):
        student, log = steps[index][1], logs[index]
        duration = outcomes[index]["duration_s"] if index in outcomes else 0.0
        if index == stopped_at and index not in outcomes:  # running when the process ended
            duration = max(0.0, ran.duration_s - recorded_s)
        if student == SOLUTION:
            duration += outcomes.get(0, {}).get("duration_s", 0.0)
        if index < stopped_at:
            result = _scored_result(names[student], student, course, lab.name, duration, str(log.relative_to(out_dir)))
            if student == SOLUTION:
                _keep_executed_solution(result, course / "autograded" / student / lab.name, lab, out_dir)
        else:
            what, failed_log = f"nbgrader {steps[stopped_at][0]}", logs[stopped_at]
            if stopped_at in (0, index):  # this row's own step, or generate_assignment, failed
                error, timed_out = _step_error(what, ran, failed_log, limit_s), ran.timed_out
            else:
                error, timed_out = f"not graded: the steps stopped at {what} of {steps[stopped_at][1]}", False
            result = Result(names[student], "grading", TIMED_OUT if timed_out else FAILED, duration, error=error,
                            traceback=_tail(failed_log) or _tail(process_log), log=str(failed_log.relative_to(out_dir)))
        results[student] = result
    return [results[student] for student in (SOLUTION, RELEASED) if student in results]


def _read_outcomes(path: Path) -> dict:
    """{step index: {"ok", "duration_s"}} from the steps' outcomes file (absent or cut short: what is there)."""
    outcomes = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return outcomes
    for line in lines:
        try:
            outcome = json.loads(line)
        except ValueError:
            continue
        outcomes[outcome["step"]] = outcome
    return outcomes


def inject_parameters(folder: Path, parameters: dict, kernel: str) -> list[str]:
    """Inject ``parameters`` into every notebook in ``folder`` as papermill does (its translation,
    in a cell tagged ``injected-parameters`` after the one tagged ``parameters``), in place.
    Returns the names of the notebooks that have no ``parameters`` cell (left unchanged)."""
    import nbformat
    from papermill.translators import translate_parameters

    unparameterized = []
    for path in sorted(Path(folder).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        tagged = [index for index, cell in enumerate(notebook.cells)
                  if PARAMETERS_TAG in cell.get("metadata", {}).get("tags", [])]
        if not tagged:
            unparameterized.append(path.name)
            continue
        injected = nbformat.v4.new_code_cell(translate_parameters(kernel, "python", parameters, "Parameters"))
        injected.metadata["tags"] = [INJECTED_TAG]
        notebook.cells.insert(tagged[0] + 1, injected)
        nbformat.write(notebook, path)
    return unparameterized


def _keep_executed_solution(result: Result, autograded: Path, lab: Lab, out_dir: Path) -> None:
    """Copy the solution's autograded notebooks into the run folder (``solutions/LAB/``, the row's
    executed notebook) and fail the row at the first cell that raised, as a chapter's row fails
    (what the score check found, if anything, follows in its error)."""
    import nbformat

    for path in sorted(autograded.glob("*.ipynb")):
        executed = out_dir / "solutions" / lab.name / path.name
        executed.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, executed)
        result.executed = result.executed or str(executed.relative_to(out_dir))
        raised = failing_cell(nbformat.read(path, as_version=4))
        if raised is not None and result.cell is None:
            scored = result.error
            result.status, result.executed = FAILED, str(executed.relative_to(out_dir))
            describe_cell(result, raised)
            result.error = f"{path.name}: cell {result.cell} raised {result.error}" + (f"; {scored}" if scored else "")


def _write_course_config(course: Path, root: Path) -> None:
    """nbgrader_config.py of the throwaway course: the course's grading config when the repo has one
    (its preprocessors and timeouts are what instructors grade with), every folder inside ``course``
    so that nothing is written into ``solutions/`` or ``labs/``."""
    grading_config = Path(root) / "grading" / "nbgrader_config.py"
    write_course_config(str(course), {"CourseDirectory.source_directory": str(course / "source"),
                                      "CourseDirectory.release_directory": str(course / "release")},
                        grading_config=str(grading_config) if grading_config.is_file() else None,
                        written_by="course nightly")


def _pairing_problems(lab: Lab) -> dict[str, str]:
    """{student: why that submission cannot be graded} for a lab missing one of its versions."""
    if lab.source_dir is None:
        return {RELEASED: f"labs/{lab.name} has no source: solutions/{lab.name}/ is missing"}
    if lab.released_dir is None:
        return {RELEASED: f"labs/{lab.name}/ is missing: release the lab with nbgrader generate_assignment"}
    missing = sorted(lab.notebook_names(lab.source_dir) - lab.notebook_names(lab.released_dir))
    if missing:
        return {RELEASED: f"labs/{lab.name}/ lacks {', '.join(missing)} (present in solutions/{lab.name}/): "
                          "release the lab again"}
    return {}


def _scored_result(name: str, student: str, course: Path, lab_name: str, duration_s: float, log: str) -> Result:
    """Read the submission's autograded points from the gradebook and compare with what is expected."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(lab_name, student)
        grades = [(grade.notebook.name, grade.name, grade.auto_score, grade.max_score, grade.needs_manual_grade)
                  for notebook in submission.notebooks for grade in notebook.grades]
    auto = [(notebook, cell, score, top) for notebook, cell, score, top, _manual in grades if score is not None]
    points, max_points = sum(row[2] for row in auto), sum(row[3] for row in auto)
    manual = sum(1 for *_rest, needs_manual in grades if needs_manual)
    notes = [f"{manual} cell(s) need manual grading (not counted)"] if manual else []
    result = Result(name, "grading", PASSED, duration_s, score=(points, max_points), log=log, notes=notes)
    if max_points == 0:
        result.status, result.error = FAILED, "no autograded test cell: nothing checks this lab"
    elif student == SOLUTION and points < max_points:
        why = _why_cells_failed(course / "autograded" / student / lab_name)
        lost = [f"{notebook}:{cell} ({score:g} of {top:g}{why.get((notebook, cell), '')})"
                for notebook, cell, score, top in auto if score < top]
        result.status = FAILED
        result.error = f"the solution scored {points:g} of {max_points:g}; lost points in {', '.join(lost)}"
    elif student == RELEASED and points > 0:
        won = [f"{notebook}:{cell} ({score:g} of {top:g})" for notebook, cell, score, top in auto if score > 0]
        result.status = FAILED
        result.error = (f"the untouched release scored {points:g} of {max_points:g} (expected 0): "
                        f"these tests pass without student code: {', '.join(won)}")
    return result


def _why_cells_failed(folder: Path) -> dict[tuple[str, str], str]:
    """{(notebook, grade_id): ': why'} for the test cells of the autograded notebooks in ``folder``
    that show an error, or that wrote to stderr (nbgrader then gives the cell 0 even when it passed)."""
    import nbformat

    why = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        try:
            cells = nbformat.read(path, as_version=4).cells
        except (OSError, ValueError):
            continue
        for cell in cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            outputs = cell.get("outputs", [])
            errors = [output for output in outputs if output.get("output_type") == "error"]
            stderr = "".join(output.get("text", "") for output in outputs
                             if output.get("output_type") == "stream" and output.get("name") == "stderr").strip()
            if grade_id is not None and errors:
                message = (errors[0].get("evalue") or "").strip().splitlines()[:1]
                why[(path.stem, grade_id)] = ": ".join(["", errors[0].get("ename", "Error"), *message])
            elif grade_id is not None and stderr:
                why[(path.stem, grade_id)] = (f": it wrote to stderr ({stderr.splitlines()[0][:80]!r}), and nbgrader "
                                              "gives 0 to a test cell with any stderr output")
    return why


def _step_error(what: str, ran, log: Path, limit_s: float) -> str:
    """Why a step failed: stopped (the steps' time limit, an interrupt) or its log's first exception line."""
    if ran.timed_out:
        return f"{what} still running when the lab's steps reached {limit_s:g} s (--timeout for each); stopped"
    if ran.returncode is None:
        return f"{what} was stopped (interrupted)"
    return f"{what} failed: " + (_first_exception(log) or f"exit status {ran.returncode}, see its log")


def _first_exception(log: Path) -> str:
    """The first ``SomeError: message`` line of a log (nbgrader logs the cause, then its own summary), or ''."""
    try:
        return (exception_lines(Path(log).read_text(errors="replace")) or [""])[0]
    except OSError:
        return ""


def _tail(path: Path, max_lines: int = 40) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-max_lines:])
    except OSError:
        return ""

