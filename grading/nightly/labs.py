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
submission, each as a subprocess through the caller's ``run_command`` (so the nightly
runner's timeouts, logs and process clean-up apply). Scores are read from the gradebook.
"""
from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from grading.autograder.course import copy_source, copy_submission, write_course_config
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
              timeout_s: float) -> list[Result]:
    """Autograde ``lab``'s solution (expects full marks) and its release (expects zero): two results.

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
    _write_course_config(course, lab.source_dir.parent.parent)
    out_dir = Path(out_dir)
    logs_dir = out_dir / "logs" / "grading"
    logs_dir.mkdir(parents=True, exist_ok=True)
    nbgrader = [sys.executable, "-m", "nbgrader"]

    generate_log = logs_dir / f"{lab.name}-generate_assignment.log"
    generated = run_command([*nbgrader, "generate_assignment", lab.name, "--force"], course, generate_log, timeout_s)
    if generated.returncode != 0:
        error = _command_error("nbgrader generate_assignment", generated, generate_log, timeout_s)
        status = TIMED_OUT if generated.timed_out else FAILED
        return [Result(names[student], "grading", status, generated.duration_s if student == SOLUTION else 0.0,
                       error=error, traceback=_tail(generate_log), log=str(generate_log.relative_to(out_dir)))
                for student in (SOLUTION, RELEASED)]

    submissions = {SOLUTION: lab.source_dir, RELEASED: lab.released_dir}
    results = []
    for student, folder in submissions.items():
        if student in problems:
            results.append(Result(names[student], "grading", FAILED, 0.0, error=problems[student]))
            continue
        copy_submission(str(course), student, lab.name, str(folder))
        log = logs_dir / f"{lab.name}-{student}.log"
        command = [*nbgrader, "autograde", lab.name, "--student", student, "--create", "--force",
                   f"--ExecutePreprocessor.timeout={int(cell_timeout_s)}",
                   f"--ExecutePreprocessor.kernel_name={kernel}"]
        outcome = run_command(command, course, log, timeout_s)
        duration = outcome.duration_s + (generated.duration_s if student == SOLUTION else 0.0)
        relative_log = str(log.relative_to(out_dir))
        if outcome.returncode != 0:
            results.append(Result(names[student], "grading", TIMED_OUT if outcome.timed_out else FAILED, duration,
                                  error=_command_error("nbgrader autograde", outcome, log, timeout_s),
                                  traceback=_tail(log), log=relative_log))
            continue
        results.append(_scored_result(names[student], student, course, lab.name, duration, relative_log))
    return results


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


def _command_error(what: str, outcome, log: Path, timeout_s: float) -> str:
    if outcome.timed_out:
        return f"{what} still running after {timeout_s:g} s (--timeout); stopped"
    if outcome.returncode is None:
        return f"{what} was stopped (interrupted)"
    last = [line for line in _tail(log).splitlines() if "ERROR" in line or "Error" in line]
    return f"{what} exited with status {outcome.returncode}" + (f": {last[-1].strip()}" if last else "")


def _tail(path: Path, max_lines: int = 40) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-max_lines:])
    except OSError:
        return ""

