"""`course grade` run by an ordinary Unix user (no root, so bwrap makes its namespaces through an
unprivileged user namespace and the memory cap is RLIMIT_AS): a correct submission beside an
attacker, with the guarantees of the root run (tests/test_grading_e2e.py) checked again.

Run as root (CI), the test grades as a system account made once (``course-grader``, no home,
no login) from a copy of the course in a folder that account owns, with a Python that account can
run (tests/grading_account.py). Run as an ordinary user, it grades as that user. It skips, saying
why, where no account can be made or this kernel gives ordinary users no user namespaces.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time

import nbformat
import pytest
from grading_account import Unavailable, account as grading_account, as_account, shared_python
from proctree import describe, processes_mentioning, processes_of, wait_until_gone

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = "lab01_tensor_parallel"
#: The attacker: these red-team fixtures (tests/fixtures/attacks) in one notebook.
ATTACKS = ("reloads_the_reference", "attacks_classmates", "shares_memory_to_escape_the_cap",
           "sends_beside_the_process_group")
POINTS = {"test_f": 2, "test_g": 2, "test_column_parallel": 4, "test_row_parallel": 4, "test_parallel_mlp": 4}
#: What a course copy needs to grade the lab.
COURSE_PARTS = ("grading", "labutils", os.path.join("solutions", LAB))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),  # the class's grading: 104 s on a busy 2-core machine
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]


def _submissions(folder: str) -> None:
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    solution = attacker = student_solution(source, release)
    for name in ATTACKS:
        with open(os.path.join(REPO, "tests", "fixtures", "attacks", f"{name}.py")) as f:
            attacker = apply_fixture(attacker, parse_fixture(name, f.read()))
    for student, notebook in (("good", solution), ("attacker", attacker)):
        os.makedirs(os.path.join(folder, student))
        nbformat.write(notebook, os.path.join(folder, student, f"{LAB}.ipynb"))


def _chown_tree(folder: str, account) -> None:
    for root, dirs, files in os.walk(folder):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, account.pw_uid, account.pw_gid)


@pytest.fixture(scope="module")
def graded_by_an_ordinary_user():
    try:
        account = grading_account()
        python = shared_python(account)
    except Unavailable as reason:
        pytest.skip(str(reason))
    work = tempfile.mkdtemp(prefix="course-grade-user-")
    course_root = os.path.join(work, "course-root")
    for part in COURSE_PARTS:
        shutil.copytree(os.path.join(REPO, part), os.path.join(course_root, part),
                        ignore=shutil.ignore_patterns("__pycache__"))
    _submissions(os.path.join(work, "submissions"))
    if os.geteuid() == 0:
        _chown_tree(work, account)
    env = {"PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8"}
    probe = as_account(account, [python, "-c", "from grading.autograder.sandbox import find_bwrap, probe; "
                                               "probe(find_bwrap())"], cwd=course_root, env=env, timeout=60)
    if probe.returncode:
        shutil.rmtree(work, ignore_errors=True)
        pytest.skip(f"bwrap cannot run as {account.pw_name} here: {probe.stderr.strip().splitlines()[-1]}")
    course = os.path.join(work, "course")
    started = time.monotonic()
    done = as_account(account, [python, "-m", "grading", "grade", LAB, os.path.join(work, "submissions"),
                                "--course-dir", course, "--workers", "2", "--rank-timeout", "10",
                                "--cell-timeout", "120", "--memory-limit", "1.5"],
                      cwd=course_root, env=env, timeout=600)
    seconds = time.monotonic() - started
    left = wait_until_gone(processes_of(account.pw_uid) if os.geteuid() == 0 else set(), timeout_s=10.0)
    yield {"account": account, "done": done, "course": course, "seconds": seconds, "left": left}
    shutil.rmtree(work, ignore_errors=True)


def test_an_ordinary_user_grades_in_the_sandbox_and_the_attacker_gains_nothing(graded_by_an_ordinary_user):
    graded = graded_by_an_ordinary_user
    assert graded["done"].returncode == 0, graded["done"].stdout[-3000:] + graded["done"].stderr[-3000:]
    with open(os.path.join(graded["course"], "reports", f"{LAB}.json")) as f:
        report = {s["student"]: s for s in json.load(f)["submissions"]}
    assert report["good"]["points"] == sum(POINTS.values()) and report["good"]["attention"] == []
    lost = set().union(*(parse_fixture(n, open(os.path.join(REPO, "tests", "fixtures", "attacks", f"{n}.py")).read()).loses
                         for n in ATTACKS))
    scores = {p["cell"]: p["points"] for p in report["attacker"]["parts"]}
    assert scores == {cell: 0 if cell in lost else points for cell, points in POINTS.items()}
    attention = "\n".join(report["attacker"]["attention"])
    for text in ("test_column_parallel: forged", "importlib", "setsid", "mmap"):
        assert text in attention, text
    row_parallel = next(p for p in report["attacker"]["parts"] if p["cell"] == "test_row_parallel")
    assert any("traffic outside the collectives" in line for line in row_parallel["lines"]), row_parallel["lines"]
    with open(os.path.join(graded["course"], "grades.csv")) as f:
        rows = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert rows == {student: s["points"] for student, s in report.items()}
    assert os.stat(os.path.join(graded["course"], "gradebook.db")).st_uid == graded["account"].pw_uid


def test_nothing_the_ordinary_users_grading_started_is_left(graded_by_an_ordinary_user):
    assert graded_by_an_ordinary_user["left"] == set(), describe(graded_by_an_ordinary_user["left"])
    assert processes_mentioning("red-team-daemon") == set()
