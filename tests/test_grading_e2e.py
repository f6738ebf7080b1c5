"""End to end through real nbgrader and its SQLite gradebook: `course grade` on the solution,
the untouched release and every fixture of tests/fixtures/lab01 (wrong implementations, a cheat,
a tampered notebook, a hung rank, a dead kernel); a kernel that loops forever, with a short cell
timeout; then plain `nbgrader autograde` on the solution."""
from __future__ import annotations

import csv
import html
import json
import os
import re
import subprocess
import sys
import time

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADING = os.path.join(REPO, "grading")

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution

LAB = "lab01_tensor_parallel"
FIXTURES_DIR = os.path.join(REPO, "tests", "fixtures", "lab01")
#: GiB per grading process: the memory hog's 4 judge ranks fill it within the 10 s rank timeout.
MEMORY_LIMIT_GIB = 1.5
FIXTURES = {name[:-3]: parse_fixture(name[:-3], open(os.path.join(FIXTURES_DIR, name)).read())
            for name in sorted(os.listdir(FIXTURES_DIR)) if name.endswith(".py")}
POINTS = {"test_f": 2, "test_g": 2, "test_column_parallel": 4, "test_row_parallel": 4, "test_parallel_mlp": 4}


def _notebooks():
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    return student_solution(source, release), release


def _write(folder, student, notebook):
    os.makedirs(folder / student)
    nbformat.write(notebook, str(folder / student / f"{LAB}.ipynb"))


def _processes_inside(folder: str) -> list:
    """pids of live processes whose command line or working directory is inside ``folder``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if folder in cmdline or cwd.startswith(folder):
            found.append(int(pid))
    return found


def _with_edited_metadata(notebook):
    """The notebook with its answer cell f marked as graded (without points): nbgrader's metadata
    check alone would fail the whole submission."""
    edited = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in edited.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "f":
            cell.metadata.nbgrader["grade"] = True
    return edited


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One `course grade` run over every kind of submission; its report, output and folders."""
    work = tmp_path_factory.mktemp("class")
    solution, release = _notebooks()
    submissions = work / "submissions"
    _write(submissions, "solution", solution)
    _write(submissions, "untouched", release)
    for name, fixture in FIXTURES.items():
        _write(submissions, name, apply_fixture(solution, fixture))
    _write(submissions, "metadata_edited", _with_edited_metadata(solution))
    course = str(work / "course")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grading", "grade", LAB, str(submissions), "--course-dir", course,
                           "--workers", "2", "--rank-timeout", "10", "--cell-timeout", "120",
                           "--memory-limit", str(MEMORY_LIMIT_GIB)],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(course, "reports", f"{LAB}.json")) as f:
        report = json.load(f)
    deadline = time.monotonic() + 10
    while _processes_inside(course) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"course": course, "report": report, "stdout": done.stdout, "stderr": done.stderr,
            "seconds": time.monotonic() - started,
            "parts": {s["student"]: {p["cell"]: p for p in s["parts"]} for s in report["submissions"]},
            "submissions": {s["student"]: s for s in report["submissions"]}}


def _gradebook_scores(course: str) -> dict:
    """{student: {cell: score}} straight from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{os.path.join(course, 'gradebook.db')}") as gradebook:
        for submission in gradebook.assignment_submissions(LAB):
            scores[submission.student.id] = {g.name: g.score for nb in submission.notebooks for g in nb.grades}
    return scores


def test_every_submission_is_graded_and_nothing_is_left_running(graded):
    assert set(graded["submissions"]) == {"solution", "untouched", "metadata_edited", *FIXTURES}
    assert all(set(parts) == set(POINTS) for parts in graded["parts"].values())
    assert _processes_inside(graded["course"]) == []
    total = len(graded["submissions"])
    assert f"{total}/{total}" in graded["stderr"]  # the progress bar reached the end


def test_the_solution_scores_full_marks_and_the_untouched_release_zero(graded):
    scores = _gradebook_scores(graded["course"])
    assert scores["solution"] == POINTS
    assert scores["untouched"] == {cell: 0 for cell in POINTS}
    assert all(p["status"] == "failed" and "NotImplementedError" in p["lines"][0]
               for p in graded["parts"]["untouched"].values())


@pytest.mark.parametrize("name", [n for n, f in FIXTURES.items() if f.loses])
def test_each_submission_loses_exactly_the_points_its_fixture_says(graded, name):
    expected = {cell: 0 if cell in FIXTURES[name].loses else points for cell, points in POINTS.items()}
    assert _gradebook_scores(graded["course"])[name] == expected


def test_a_classic_mistake_is_explained_to_the_student(graded):
    (line, *_) = graded["parts"]["f_backward_without_all_reduce"]["test_f"]["lines"]
    assert re.match(r"✗ f = copy_to_tp_region, .*: input gradient dX on rank 0 differs", line)
    (line, *_) = graded["parts"]["gather_instead_of_reduce"]["test_row_parallel"]["lines"]
    assert line.endswith("forward on rank 0 made 1 all_gather, expected 1 all_reduce")


def test_the_cheat_scores_zero_on_what_it_faked_and_is_reported(graded):
    parts = graded["parts"]["cheat"]
    assert parts["test_parallel_mlp"]["notebook_points"] == 4  # plain nbgrader would have given the points
    assert parts["test_parallel_mlp"]["points"] == 0 and parts["test_parallel_mlp"]["note"].startswith("forged")
    assert parts["test_row_parallel"]["points"] == 0 and "output on rank 0 differs" in parts["test_row_parallel"]["lines"][0]
    assert "cheat: test_parallel_mlp: forged" in graded["stdout"]


def test_tampering_is_reported_and_repaired(graded):
    tampered = graded["submissions"]["tampered"]
    found = {f"{t['kind']} {t['role']} {t['cell']}" for t in tampered["tampering"]}
    assert found == set(FIXTURES["tampered"].reports)
    assert tampered["points"] == sum(POINTS.values())
    assert "tampered: deleted test cell test_g: put back and run by the grader" in graded["stdout"]
    assert all(not s["tampering"] for name, s in graded["submissions"].items() if name != "tampered")


def test_a_hung_rank_times_out_within_the_rank_timeout_and_the_rest_is_graded(graded):
    hung = graded["submissions"]["hung_rank"]
    (line,) = graded["parts"]["hung_rank"]["test_parallel_mlp"]["lines"]
    assert line.startswith("✗ timed out: ranks") and "within 10 s" in line
    assert hung["seconds"] < 120


def test_a_memory_hog_fails_within_the_memory_cap_and_the_rest_is_graded(graded):
    hog = graded["submissions"]["memory_hog"]
    (line, *_) = graded["parts"]["memory_hog"]["test_parallel_mlp"]["lines"]
    assert "allocate memory" in line, line
    assert hog["seconds"] < 120 and not any("KernelDied" in item for item in hog["attention"])


def test_a_dead_kernel_keeps_the_parts_before_it(graded):
    killed = graded["submissions"]["kernel_killer"]
    assert any("KernelDied" in item for item in killed["attention"])
    assert graded["parts"]["kernel_killer"]["test_parallel_mlp"]["status"] == "not judged"


def test_feedback_never_shows_hidden_tests_but_says_what_failed(graded):
    feedback = os.path.join(graded["course"], "feedback")
    for student in graded["submissions"]:
        with open(os.path.join(feedback, student, LAB, f"{LAB}.html")) as f:
            page = html.unescape(f.read())
        for secret in ("HIDDEN TESTS", 'judge("', "grading.judge", GRADING):
            assert secret not in page, (student, secret)
    with open(os.path.join(feedback, "f_backward_without_all_reduce", LAB, f"{LAB}.html")) as f:
        assert "input gradient dX on rank 0 differs" in html.unescape(f.read())


def test_grades_csv_is_nbgraders_export_of_the_judged_scores(graded):
    with open(os.path.join(graded["course"], "grades.csv")) as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    for student, submission in graded["submissions"].items():
        assert float(rows[student]["score"]) == submission["points"]
        assert float(rows[student]["max_score"]) == sum(POINTS.values())


#: A submission whose kernel itself loops forever in Part 4 (not on ranks: only the cell timeout stops it).
KERNEL_LOOP = parse_fixture("kernel_loop", """# loses: test_parallel_mlp
# %% replace: parallel_mlp
while True:
    pass
""")


def test_a_kernel_that_loops_forever_loses_that_part_at_the_cell_timeout_and_the_rest_is_graded(tmp_path):
    solution, _ = _notebooks()
    submissions = tmp_path / "submissions"
    _write(submissions, "solution", solution)
    _write(submissions, "kernel_loop", apply_fixture(solution, KERNEL_LOOP))
    course = str(tmp_path / "course")
    done = subprocess.run([sys.executable, "-m", "grading", "grade", LAB, str(submissions), "--course-dir", course,
                           "--workers", "2", "--rank-timeout", "10", "--cell-timeout", "15"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(course, "reports", f"{LAB}.json")) as f:
        submissions_report = {s["student"]: s for s in json.load(f)["submissions"]}
    scores = _gradebook_scores(course)
    assert scores["solution"] == POINTS
    assert scores["kernel_loop"] == dict(POINTS, test_parallel_mlp=0)
    assert any("parallel_mlp: CellTimeoutError" in item for item in submissions_report["kernel_loop"]["attention"])
    deadline = time.monotonic() + 10
    while _processes_inside(course) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_inside(course) == []


def test_usage_errors_are_one_line():
    from grading.cli import main

    assert main(["grade", "no_such_lab", REPO]) == 2
    assert main(["grade", LAB, os.path.join(REPO, "no_such_folder")]) == 2
    assert main(["grade", LAB, REPO, "--workers", "0"]) == 2
    assert main(["grade", LAB, REPO, "--memory-limit", "-1"]) == 2
    assert main(["grade", LAB, REPO, "--grading-dir", os.path.join(REPO, "labs")]) == 2


def test_plain_nbgrader_grades_the_solution_with_a_judge_its_kernel_starts(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(
        f"c = get_config()\nload_subconfig({os.path.join(GRADING, 'nbgrader_config.py')!r})\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.CourseDirectory.release_directory = {str(course / 'release')!r}\n")
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    env.pop("LAB_JUDGE_SOCKET", None)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    for command in (["generate_assignment", LAB, "--force"], ["autograde", LAB]):
        if command[0] == "autograde":
            _write(course / "submitted" / "solution", LAB, _notebooks()[0])
        done = subprocess.run([*nbgrader, *command], cwd=course, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scores = _gradebook_scores(str(course))["solution"]
    autograded = nbformat.read(str(course / "autograded" / "solution" / LAB / f"{LAB}.ipynb"), as_version=4)
    lost = {c.metadata.nbgrader["grade_id"]: c.outputs for c in autograded.cells
            if scores.get(c.metadata.get("nbgrader", {}).get("grade_id"), 0) < POINTS.get(c.metadata.get("nbgrader", {}).get("grade_id"), 0)}
    assert scores == POINTS, lost


def test_an_attack_on_the_grader_changes_nothing_and_is_reported(graded):
    attacker = graded["submissions"]["attacks_the_grader"]
    assert attacker["points"] == sum(POINTS.values())
    assert any(item.startswith("look at cell f") and "setsid" in item for item in attacker["attention"])
    assert graded["submissions"]["solution"]["points"] == sum(POINTS.values())
    assert "attacked" not in open(os.path.join(graded["course"], "grades.csv")).read()
    assert _gradebook_scores(graded["course"])["solution"] == POINTS


def test_a_metadata_edit_on_the_students_own_cell_is_repaired_and_reported(graded):
    edited = graded["submissions"]["metadata_edited"]
    assert edited["points"] == sum(POINTS.values()) and not edited["failure"]
    assert "edited the nbgrader metadata of cell f: restored from the release" in edited["attention"]
