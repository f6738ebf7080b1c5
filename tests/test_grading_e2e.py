"""End to end through real nbgrader and its SQLite gradebook: `course grade` on the solution,
the untouched release, the fixtures of tests/fixtures/lab01 (wrong implementations, a cheat,
a tampered notebook, a hung rank, a dead kernel; four more wrong implementations, and how two of them
are explained, through the judge alone) and every red-team attack of
tests/fixtures/attacks (each scores what an empty part scores, changes nobody else's grade,
leaves no process and is named in the report), output bombs and files that are no notebook, all in
one class; a kernel that loops forever, with a short cell timeout; then plain `nbgrader autograde`
on the solution."""
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
from graded_lab import GradedLab

LAB = "lab01_tensor_parallel"
LAB01 = GradedLab(LAB, rank_timeout_s=10.0, given_cells=("setup", "given_mappings", "check_helpers"))
FIXTURES_DIR = os.path.join(REPO, "tests", "fixtures", "lab01")
#: Seconds a test of this file may take, its class's grading included: the class's `course grade` is
#: given 900 s, and took 270 s on a 2-core machine with the suite's other worker and one more busy process.
pytestmark = pytest.mark.timeout(1200)
#: GiB per grading process: the memory hog's 4 judge ranks fill it within the 10 s rank timeout.
MEMORY_LIMIT_GIB = 1.5
ATTACKS_DIR = os.path.join(REPO, "tests", "fixtures", "attacks")


def _fixtures(folder: str) -> dict:
    return {name[:-3]: parse_fixture(name[:-3], open(os.path.join(folder, name)).read())
            for name in sorted(os.listdir(folder)) if name.endswith(".py")}


FIXTURES, ATTACKS = _fixtures(FIXTURES_DIR), _fixtures(ATTACKS_DIR)
#: Wrong implementations that need only the judge (no kernel of their own): held to their losses
#: through it alone, not handed in to the class (each notebook there costs a kernel, a sandbox's rank
#: template and its ranks). Those whose report lines a test reads stay in the class.
JUDGE_ONLY = ("bias_on_every_shard", "g_applied_twice", "f_backward_without_all_reduce", "gather_instead_of_reduce")
CLASS_FIXTURES = {name: fixture for name, fixture in FIXTURES.items() if name not in JUDGE_ONLY}
#: The red team's students and the attacks each hands in together (each attack on cells of its own,
#: so each part still shows what its own attack scores; three notebooks keep the class small).
#: (prints_the_grader fails every hidden-test cell in the notebook after the judge ran, which would
#: hide attacks_classmates' forged pass, so the two are handed in by different students.)
RED_TEAM = {"red_team_on_the_grader": ("prints_the_grader", "reads_the_reference_when_judged",
                                       "shares_memory_to_escape_the_cap", "sends_beside_the_process_group"),
            "red_team_on_classmates": ("reloads_the_reference", "attacks_classmates", "outlives_grading",
                                       "peeks_from_a_helper_file"),
            "red_team_fair_to_correct_code": ("edits_its_own_metadata", "hands_in_a_helper_file"),
            "red_team_on_privacy_and_channels": ("reads_classmates_leftovers", "sums_through_shared_files",
                                                 "sums_over_abstract_sockets")}
#: In the command line of every process a red-team attack starts.
DAEMON_MARK = "red-team-daemon"


def _red_team_notebook(solution, student: str):
    """The solution with every attack of ``student`` applied; the files they hand in beside it."""
    notebook, files = solution, {}
    for name in RED_TEAM[student]:
        notebook = apply_fixture(notebook, ATTACKS[name])
        files.update(ATTACKS[name].files)
    return notebook, files
POINTS = {"test_f": 2, "test_g": 2, "test_column_parallel": 4, "test_row_parallel": 4, "test_parallel_mlp": 4}


def _notebooks():
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    return student_solution(source, release), release


def _write(folder, student, notebook, files=None):
    os.makedirs(folder / student)
    nbformat.write(notebook, str(folder / student / f"{LAB}.ipynb"))
    for name, text in (files or {}).items():
        (folder / student / name).write_text(text)


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
        if folder in cmdline or cwd.startswith(folder) or DAEMON_MARK in cmdline:
            found.append(int(pid))
    return found


#: A submission whose cells print bombs after Part 1: an 8 MB line, 50 MB in 1 MiB writes, a display
#: of JSON nested 600 levels deep. Every part still runs and scores; the outputs are cut.
OUTPUT_BOMBS = parse_fixture("output_bombs", """# %% insert: f
import sys

print("x" * (8 * 2**20))
for _ in range(50):
    sys.stdout.write("y" * 2**20)
_deep = "bottom"
for _ in range(600):
    _deep = {"down": _deep}
display({"application/json": _deep}, raw=True)
""")
#: Handed-in files that are no gradable notebook: {student: file text}.
NOT_NOTEBOOKS = {
    "not_json": "print('a script, not a notebook')\n",
    "truncated": None,  # the solution cut half-way
    "schema_invalid": json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                  "cells": [{"cell_type": "code", "source": 3, "metadata": {}}]}),
    "many_cells": json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": "x"} for i in range(10**5)]}),
}
#: Students of the class whose hand-in no one can grade (each scores zero, with a line).
REFUSED = (*NOT_NOTEBOOKS, "unreadable")


def _write_bad_hand_ins(submissions, solution) -> None:
    """Into the class: output bombs, 50 MiB of outputs handed in, and ``REFUSED``'s files."""
    _write(submissions, "output_bombs", apply_fixture(solution, OUTPUT_BOMBS))
    with_outputs = nbformat.from_dict(json.loads(nbformat.writes(solution)))
    [cell for cell in with_outputs.cells if cell.cell_type == "code"][-1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="o" * (50 * 2**20))]
    _write(submissions, "outputs_handed_in", with_outputs)
    for student, text in NOT_NOTEBOOKS.items():
        (submissions / student).mkdir()
        full = nbformat.writes(solution)
        (submissions / student / f"{LAB}.ipynb").write_text(full[:len(full) // 2] if text is None else text)
    (submissions / "unreadable").mkdir()
    os.symlink("/no/such/notebook", submissions / "unreadable" / f"{LAB}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One `course grade` run over every kind of submission (bad hand-ins and output bombs too); its
    report, output and folders."""
    work = tmp_path_factory.mktemp("class")
    solution, release = _notebooks()
    submissions = work / "submissions"
    _write(submissions, "solution", solution)
    _write(submissions, "untouched", release)
    for name, fixture in CLASS_FIXTURES.items():
        _write(submissions, name, apply_fixture(solution, fixture))
    for student in RED_TEAM:
        _write(submissions, student, *_red_team_notebook(solution, student))
    _write_bad_hand_ins(submissions, solution)
    course = str(work / "course")
    started = time.monotonic()
    done, report = _grade_class(submissions, course, 2, 120, 900, "--memory-limit", str(MEMORY_LIMIT_GIB))
    deadline = time.monotonic() + 10
    while _processes_inside(course) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"course": course, "report": report, "stdout": done.stdout, "stderr": done.stderr,
            "seconds": time.monotonic() - started,
            "parts": {s["student"]: {p["cell"]: p for p in s["parts"]} for s in report["submissions"]},
            "submissions": {s["student"]: s for s in report["submissions"]}}


def _grade_class(submissions, course: str, workers: int, cell_timeout_s: int, timeout_s: int, *extra: str):
    """``course grade`` of the class in ``submissions`` into ``course`` (rank timeout 10 s); the finished
    process and its report (reports/LAB.json)."""
    done = subprocess.run([sys.executable, "-m", "grading", "grade", LAB, str(submissions), "--course-dir", course,
                           "--workers", str(workers), "--rank-timeout", "10", "--cell-timeout", str(cell_timeout_s),
                           *extra], capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(course, "reports", f"{LAB}.json")) as f:
        return done, json.load(f)


def _gradebook_scores(course: str) -> dict:
    """{student: {cell: score}} straight from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{os.path.join(course, 'gradebook.db')}") as gradebook:
        for submission in gradebook.assignment_submissions(LAB):
            scores[submission.student.id] = {g.name: g.score for nb in submission.notebooks for g in nb.grades}
    return scores


def test_every_submission_is_graded_and_nothing_is_left_running(graded):
    assert set(graded["submissions"]) == {"solution", "untouched", *CLASS_FIXTURES, *RED_TEAM, "output_bombs",
                                          "outputs_handed_in", *REFUSED}
    assert all(set(parts) == set(POINTS) for student, parts in graded["parts"].items() if student not in REFUSED)
    assert _processes_inside(graded["course"]) == []
    total = len(graded["submissions"])
    assert f"{total}/{total}" in graded["stderr"]  # the progress bar reached the end


def test_each_hidden_tests_reference_runs_once_per_worker_before_any_submission(graded):
    logs = sorted(os.path.join(graded["course"], "logs", LAB, name)
                  for name in os.listdir(os.path.join(graded["course"], "logs", LAB)) if name.startswith("judge-"))
    assert len(logs) == 2, logs  # the class's two workers
    for path in logs:
        text = open(path).read()
        first_submission = text.index("[judge] --- submission ")
        for test in POINTS:
            runs = [m.start() for m in re.finditer(rf"{LAB} {test}: the reference ran on \d+ cases", text)]
            assert len(runs) == 1 and runs[0] < first_submission, (path, test, runs)
        verdicts = re.findall(r"\[judge\] (test_\w+): (?:passed|failed)(.*)", text)
        assert verdicts and all(ending == " on the class's cases" for test, ending in verdicts if test in POINTS), \
            verdicts


def test_the_solution_scores_full_marks_and_the_untouched_release_zero(graded):
    scores = _gradebook_scores(graded["course"])
    assert scores["solution"] == POINTS
    assert scores["untouched"] == {cell: 0 for cell in POINTS}
    assert all(p["status"] == "failed" and "NotImplementedError" in p["lines"][0]
               for p in graded["parts"]["untouched"].values())


@pytest.mark.parametrize("name", [n for n, f in CLASS_FIXTURES.items() if f.loses])
def test_each_submission_loses_exactly_the_points_its_fixture_says(graded, name):
    expected = {cell: 0 if cell in FIXTURES[name].loses else points for cell, points in POINTS.items()}
    assert _gradebook_scores(graded["course"])[name] == expected


@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize("name", JUDGE_ONLY)
def test_through_the_judge_each_other_wrong_implementation_loses_exactly_its_parts(name):
    assert FIXTURES[name].loses and LAB01.losses_through_the_judge(name) == FIXTURES[name].loses


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_classic_mistake_is_explained_to_the_student():
    """The first line of a part is what the student reads first (a class report's part lines are the
    judge's verdict lines)."""
    (line, *_) = LAB01.verdict(LAB01.solution_namespace("f_backward_without_all_reduce"), "test_f").lines
    assert re.match(r"✗ f = copy_to_tp_region, .*: input gradient dX on rank 0 differs", line)
    (line, *_) = LAB01.verdict(LAB01.solution_namespace("gather_instead_of_reduce"), "test_row_parallel").lines
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
    assert all(not s["tampering"] for name, s in graded["submissions"].items()
               if name not in ("tampered", "red_team_fair_to_correct_code"))


def test_a_hung_rank_times_out_within_the_rank_timeout_and_the_rest_is_graded(graded):
    hung = graded["submissions"]["hung_rank"]
    (line,) = graded["parts"]["hung_rank"]["test_parallel_mlp"]["lines"]
    timeout_s = re.search(r"within (\d+) s", line)  # the 10 s asked for, or more on a machine busy enough
    assert line.startswith("✗ timed out: ranks") and timeout_s and int(timeout_s[1]) >= 10, line  # to slow the reference
    assert hung["seconds"] < 120 + int(timeout_s[1])


def test_a_memory_hog_fails_within_the_memory_cap_and_the_rest_is_graded(graded):
    """What the student sees, whichever wall stops the hog first on a loaded machine: the memory cap
    (an allocation fails) or the rank timeout."""
    hog = graded["submissions"]["memory_hog"]
    parts = graded["parts"]["memory_hog"]
    (line, *_) = parts["test_parallel_mlp"]["lines"]
    assert parts["test_parallel_mlp"]["points"] == 0 and parts["test_parallel_mlp"]["status"] == "failed"
    assert any(wall in line for wall in ("allocate memory", "memory cap", "timed out")), line
    assert all(p["points"] == POINTS[cell] for cell, p in parts.items() if cell != "test_parallel_mlp")
    assert not any("KernelDied" in item for item in hog["attention"])


def test_a_dead_kernel_keeps_the_parts_before_it(graded):
    killed = graded["submissions"]["kernel_killer"]
    assert any("KernelDied" in item for item in killed["attention"])
    assert graded["parts"]["kernel_killer"]["test_parallel_mlp"]["status"] == "not judged"


def test_feedback_never_shows_hidden_tests_but_says_what_failed(graded):
    feedback = os.path.join(graded["course"], "feedback")
    for student in set(graded["submissions"]) - set(REFUSED):
        with open(os.path.join(feedback, student, LAB, f"{LAB}.html")) as f:
            page = html.unescape(f.read())
        handed_in = nbformat.read(os.path.join(graded["course"], "submitted", student, LAB, f"{LAB}.ipynb"), as_version=4)
        own = "\n".join(cell.source for cell in handed_in.cells)  # the student's own text may say anything
        for secret in ("HIDDEN TESTS", 'judge("', "grading.judge", GRADING, graded["course"]):
            assert secret not in page or secret in own, (student, secret)
    with open(os.path.join(feedback, "cheat", LAB, f"{LAB}.html")) as f:
        assert "output on rank 0 differs" in html.unescape(f.read())


def test_grades_csv_is_nbgraders_export_of_the_judged_scores(graded):
    with open(os.path.join(graded["course"], "grades.csv")) as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    for student, submission in graded["submissions"].items():
        assert float(rows[student]["score"]) == submission["points"]
        assert float(rows[student]["max_score"]) == sum(POINTS.values())


#: A submission whose kernel itself loops forever in Part 4 (not on ranks: only the cell timeout stops it).
#: It sleeps in its loop, so it does not take a core for the 15 s it waits (the interrupt at the cell
#: timeout stops a sleeping loop and a spinning one alike).
KERNEL_LOOP = parse_fixture("kernel_loop", """# loses: test_parallel_mlp
# %% replace: parallel_mlp
import time

while True:
    time.sleep(0.5)
""")


def test_a_kernel_that_loops_forever_loses_that_part_at_the_cell_timeout_and_the_rest_is_graded(tmp_path):
    solution, _ = _notebooks()
    submissions = tmp_path / "submissions"
    _write(submissions, "kernel_loop", apply_fixture(solution, KERNEL_LOOP))  # alone: the solution is graded above
    course = str(tmp_path / "course")
    _, graded_report = _grade_class(submissions, course, 1, 15, 600)
    submissions_report = {s["student"]: s for s in graded_report["submissions"]}
    scores = _gradebook_scores(course)
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


def test_every_attack_is_handed_in_once_on_cells_of_its_own():
    assert sorted(name for names in RED_TEAM.values() for name in names) == sorted(ATTACKS)
    for names in RED_TEAM.values():
        sources = [{edit.cell for edit in ATTACKS[name].edits if edit.action in ("replace", "prepend", "append", "delete")}
                   for name in names]  # the cells whose code each attack writes
        assert all(not (a & b) for i, a in enumerate(sources) for b in sources[i + 1:]), names


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_scores_what_an_empty_part_scores_and_is_reported(graded, name):
    student = next(s for s, names in RED_TEAM.items() if name in names)
    lost = set().union(*(ATTACKS[n].loses for n in RED_TEAM[student]))
    scores = _gradebook_scores(graded["course"])[student]
    assert scores == {cell: 0 if cell in lost else points for cell, points in POINTS.items()}
    assert all(scores[cell] == 0 for cell in ATTACKS[name].loses)
    attention = graded["submissions"][student]["attention"]
    for text in ATTACKS[name].attention:
        assert any(text in item for item in attention), (text, attention)
    assert not graded["submissions"][student]["failure"]


def test_attacks_change_no_other_grade_and_leave_no_process(graded):
    assert _gradebook_scores(graded["course"])["solution"] == POINTS
    assert graded["submissions"]["solution"]["attention"] == []
    submitted = os.path.join(graded["course"], "submitted", "solution", LAB, f"{LAB}.ipynb")
    assert nbformat.read(submitted, as_version=4).cells  # not overwritten
    with open(os.path.join(graded["course"], "grades.csv")) as f:
        assert "attacked" not in f.read()
    assert _processes_inside(graded["course"]) == []  # no red-team daemon either


def test_feedback_names_a_helper_file_and_repaired_metadata_and_quotes_no_grader_file(graded):
    from grading.judge import lab01_tensor_parallel, rankside

    feedback = os.path.join(graded["course"], "feedback")
    grader_lines = [line.strip() for module in (lab01_tensor_parallel, rankside) for line in module.__doc__.splitlines()
                    if len(line.strip()) >= 20]
    for student in graded["submissions"]:
        with open(os.path.join(feedback, student, LAB, f"{LAB}.html")) as f:
            page = html.unescape(f.read())
        assert not [line for line in grader_lines if line in page], student
    pages = {name: html.unescape(open(os.path.join(feedback, name, LAB, f"{LAB}.html")).read())
             for name in ("red_team_fair_to_correct_code", "solution")}
    assert "handed in my_layers.py beside the notebook" in pages["red_team_fair_to_correct_code"]
    assert "edited the nbgrader metadata of cell f: restored from the release" in pages["red_team_fair_to_correct_code"]
    assert "From the grader" not in pages["solution"]


@pytest.mark.parametrize("student, cell, wall", [
    ("red_team_on_classmates", "test_f", "ModuleNotFoundError"),  # reload: no grader file on the rank
    ("red_team_on_the_grader", "test_g", "expected str, bytes or os.PathLike object, not NoneType"),  # no grader file on the rank: grading.__file__ is None
    ("red_team_on_the_grader", "test_parallel_mlp", "Cannot allocate memory"),  # RLIMIT_AS counts shared maps
    ("red_team_on_the_grader", "test_row_parallel", "traffic outside the collectives"),  # loopback counted outside
    ("red_team_on_privacy_and_channels", "test_column_parallel", "nothing left by anyone else"),  # no leftovers
    ("red_team_on_privacy_and_channels", "test_g", "no folder shared with the other ranks"),  # private folders
    ("red_team_on_privacy_and_channels", "test_f", "Operation not permitted"),  # no new Unix socket
])
def test_each_attack_hits_its_wall(graded, student, cell, wall):
    lines = graded["parts"][student][cell]["lines"]
    assert any(wall in line for line in lines), lines


def test_bad_hand_ins_and_output_bombs_cost_only_their_owners(graded):
    report, scores = graded["submissions"], _gradebook_scores(graded["course"])
    assert scores["solution"] == scores["output_bombs"] == scores["outputs_handed_in"] == POINTS
    assert any("output cut by the grader" in item for item in report["output_bombs"]["attention"])
    assert any("50.0 MiB of outputs: dropped" in item for item in report["outputs_handed_in"]["attention"])
    with open(os.path.join(graded["course"], "grades.csv")) as f:
        rows = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert {s: rows[s] for s in ("solution", "output_bombs", "outputs_handed_in", *REFUSED)} == {
        "solution": 16, "output_bombs": 16, "outputs_handed_in": 16, **{s: 0.0 for s in REFUSED}}
    for student in REFUSED:
        assert report[student]["points"] == 0 and "not graded (scores zero)" in report[student]["failure"]
    for student in rows:
        page = os.path.join(graded["course"], "feedback", student, LAB, f"{LAB}.html")
        with open(page) as f:  # the outputs, without the MathJax the page carries inline (about 2 MB)
            shown = re.sub(r"<script>.*?</script>", "", f.read(), flags=re.S)
        assert len(shown.encode()) < 2 * 2**20, student
