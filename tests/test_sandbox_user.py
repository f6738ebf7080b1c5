"""`course grade` run by an ordinary Unix user (no root, so bwrap makes its namespaces through an
unprivileged user namespace and the memory cap is RLIMIT_AS): a correct submission beside an
attacker, with the guarantees of the root run (tests/test_grading_e2e.py) checked again.

Run as root (CI), the test grades as a system account it creates once (``course-grader``, no home,
no login) from a copy of the course in a folder that account owns, with a Python every account
can run: this interpreter when it can, else the course hub's environment in /var/tmp, else one
built there the same way (the repository's venv may point into /root, which is 0700). Run as an
ordinary user, it grades as that user. It skips, saying why, where no account can be made or this
kernel gives ordinary users no user namespaces.
"""
from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat
import pytest
from proctree import describe, processes_mentioning, processes_of, wait_until_gone

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = "lab01_tensor_parallel"
ACCOUNT = "course-grader"
SYSTEM_PYTHON = "/usr/bin/python3"
#: The attacker: these red-team fixtures (tests/fixtures/attacks) in one notebook.
ATTACKS = ("reloads_the_reference", "attacks_classmates", "shares_memory_to_escape_the_cap",
           "sends_beside_the_process_group")
POINTS = {"test_f": 2, "test_g": 2, "test_column_parallel": 4, "test_row_parallel": 4, "test_parallel_mlp": 4}
#: What a course copy needs to grade the lab.
COURSE_PARTS = ("grading", "labutils", os.path.join("solutions", LAB))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),  # the class's grading: 104 s on a busy 2-core machine
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]


def _account() -> pwd.struct_passwd:
    """The ordinary account that grades: this process's own, or (as root) ``ACCOUNT``, created once."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(ACCOUNT)
    except KeyError:
        if shutil.which("useradd") is None:
            pytest.skip("running as root, the test grades as an ordinary account, and useradd is missing")
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ACCOUNT],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot create the account {ACCOUNT}: {done.stderr.strip()}")
        return pwd.getpwnam(ACCOUNT)


def _as_account(account, argv: list, **kwargs) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        kwargs.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def _usable_by(account, python: str) -> bool:
    check = "import torch, nbgrader, nbclient, ipykernel, cloudpickle"
    try:
        return _as_account(account, [python, "-c", check], cwd="/", timeout=120).returncode == 0
    except PermissionError:  # the interpreter, or a folder above it, is closed to the account
        return False


def _shared_python(account) -> str:
    """A Python with the course's dependencies that ``account`` can run (see the module docstring)."""
    if _usable_by(account, sys.executable):
        return sys.executable
    for ready in sorted(glob.glob("/var/tmp/multigpu-course-*/.installed")):
        python = os.path.join(os.path.dirname(ready), "bin", "python")
        if _usable_by(account, python):
            return python
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{sys.executable} is not usable by {account.pw_name} and {SYSTEM_PYTHON} is missing")
    digest = hashlib.sha256(open(os.path.join(REPO, "pyproject.toml"), "rb").read()).hexdigest()[:12]
    venv = f"/var/tmp/multigpu-course-grading-{digest}"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)  # its exact pin first (a CPU wheel)
    subprocess.run(pip + [f"{REPO}[course]"], check=True, cwd=tempfile.gettempdir())
    open(os.path.join(venv, ".installed"), "w").close()
    return os.path.join(venv, "bin", "python")


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
    account = _account()
    python = _shared_python(account)
    work = tempfile.mkdtemp(prefix="course-grade-user-")
    course_root = os.path.join(work, "course-root")
    for part in COURSE_PARTS:
        shutil.copytree(os.path.join(REPO, part), os.path.join(course_root, part),
                        ignore=shutil.ignore_patterns("__pycache__"))
    _submissions(os.path.join(work, "submissions"))
    if os.geteuid() == 0:
        _chown_tree(work, account)
    env = {"PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8"}
    probe = _as_account(account, [python, "-c", "from grading.autograder.sandbox import find_bwrap, probe; "
                                                "probe(find_bwrap())"], cwd=course_root, env=env, timeout=60)
    if probe.returncode:
        shutil.rmtree(work, ignore_errors=True)
        pytest.skip(f"bwrap cannot run as {account.pw_name} here: {probe.stderr.strip().splitlines()[-1]}")
    course = os.path.join(work, "course")
    started = time.monotonic()
    done = _as_account(account, [python, "-m", "grading", "grade", LAB, os.path.join(work, "submissions"),
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
