"""The course folders of a class's shards merged into one, as a single-node ``course grade``
leaves it: one gradebook, grades.csv, feedback, autograded notebooks, verdicts, logs and
reports/LAB.md|json.

The destination's gradebook gets the lab from ``runner.prepare_course`` (as a single-node run
does), then every shard's submissions with their students, grades and comments, column by
column; grades.csv is exported from it by nbgrader, and the report is rebuilt from the shards'
reports/LAB.json.
"""
from __future__ import annotations

import json
import os
import shutil

from grading.autograder.runner import ClassReport, PartScore, SubmissionOutcome, export_grades
from grading.autograder.tampering import Tampering

#: Per-student folders of an nbgrader course: FOLDER/STUDENT/LAB.
STUDENT_FOLDERS = ("submitted", "autograded", "feedback")


def _columns(row) -> dict:
    """A gradebook row's own values: every column of its table but ids and foreign keys."""
    return {c.key: getattr(row, c.key) for c in type(row).__table__.columns
            if c.key != "id" and not c.key.endswith("_id")}


def _set_columns(row, source) -> None:
    for key, value in _columns(source).items():
        setattr(row, key, value)


def _copy_submission(gradebook, submission, lab: str) -> None:
    """One student's submission of ``lab`` (another gradebook's row) into ``gradebook``."""
    from nbgrader.api import MissingEntry

    student = submission.student
    gradebook.update_or_create_student(student.id, **_columns(student))
    try:
        gradebook.remove_submission(lab, student.id)
    except MissingEntry:
        pass
    gradebook.add_submission(lab, student.id, **_columns(submission))
    for notebook in submission.notebooks:
        _set_columns(gradebook.find_submission_notebook(notebook.name, lab, student.id), notebook)
        for grade in notebook.grades:
            _set_columns(gradebook.find_grade(grade.name, notebook.name, lab, student.id), grade)
        for comment in notebook.comments:
            _set_columns(gradebook.find_comment(comment.name, notebook.name, lab, student.id), comment)
    gradebook.db.commit()


def merge_gradebooks(course_dir: str, shard_courses: list, lab: str) -> float:
    """Every submission of ``lab`` in the shards' gradebooks into ``course_dir``'s, in the students'
    sorted order (the order a single-node run with one worker adds them in, and grades.csv lists
    them in); the lab's maximum score."""
    from nbgrader.api import Gradebook

    sources = [Gradebook(f"sqlite:///{os.path.join(shard, 'gradebook.db')}") for shard in shard_courses]
    try:
        submissions = sorted(((s.student.id, s) for source in sources for s in source.assignment_submissions(lab)),
                             key=lambda pair: pair[0])
        with Gradebook(f"sqlite:///{os.path.join(course_dir, 'gradebook.db')}") as gradebook:
            for _, submission in submissions:
                _copy_submission(gradebook, submission, lab)
            return gradebook.find_assignment(lab).max_score
    finally:
        for source in sources:
            source.close()


def _replace(source: str, destination: str) -> None:
    if os.path.isdir(destination):
        shutil.rmtree(destination)
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, destination)
    else:
        shutil.copy2(source, destination)


def copy_files(course_dir: str, shard: str, task: int, lab: str, students: list) -> None:
    """A shard's per-student files into ``course_dir``; its judges' and workers' logs into
    logs/LAB/shard-TASK/."""
    for student in students:
        for folder in STUDENT_FOLDERS:
            source = os.path.join(shard, folder, student, lab)
            if os.path.exists(source):
                _replace(source, os.path.join(course_dir, folder, student, lab))
    verdicts, logs = os.path.join(shard, "verdicts", lab), os.path.join(shard, "logs", lab)
    for name in _listing(verdicts):  # STUDENT.json, STUDENT.notices.json
        _replace(os.path.join(verdicts, name), os.path.join(course_dir, "verdicts", lab, name))
    for name in _listing(logs):  # STUDENT.log, and judge-N.log, worker-N.log of the shard's workers
        own = name.endswith(".log") and name[:-len(".log")] in students
        _replace(os.path.join(logs, name), os.path.join(course_dir, "logs", lab, name if own else f"shard-{task}/{name}"))


def _listing(folder: str) -> list:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def outcome_from_json(entry: dict) -> SubmissionOutcome:
    """A submission's outcome as a shard's reports/LAB.json holds it."""
    outcome = SubmissionOutcome(entry["student"], entry["seconds"], entry["failure"])
    outcome.tampering = [Tampering(**t) for t in entry["tampering"]]
    outcome.errors, outcome.suspicious = list(entry["errors"]), list(entry["suspicious"])
    outcome.parts = [PartScore(**p) for p in entry["parts"]]
    return outcome


def shard_outcomes(shard: str, lab: str) -> list:
    """The outcomes a shard's report lists."""
    with open(os.path.join(shard, "reports", f"{lab}.json")) as f:
        return [outcome_from_json(entry) for entry in json.load(f)["submissions"]]


def merged_report(course_dir: str, lab: str, max_points: float, outcomes: list, seconds: float,
                  without_notebook: list) -> ClassReport:
    """The class report of the merged course folder (grades.csv exported from its gradebook)."""
    grades_csv = export_grades(course_dir)
    return ClassReport(lab, course_dir, max_points, sorted(outcomes, key=lambda o: o.student), seconds, grades_csv,
                       os.path.join(course_dir, "feedback"), without_notebook)
