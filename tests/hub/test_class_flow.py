"""A class takes a lab through the course hub, end to end, in headless Chromium.

The instructor releases lab 2 to nbgrader's exchange with the README's commands, as written; a
student logs in, fetches it, writes part 1, runs the notebook (its checks launch ranks), runs
`labutils check` in a JupyterLab terminal and submits; a second student submits the lab
untouched; the instructor collects, grades and releases feedback (the README's commands again);
the first student fetches the feedback and reads the score; each step's duration is written to
test-artifacts/hub/timings.md. Then a student, logged in through the proxy, tries to read each
instructors' path (the checkout's grader, solutions and history, the class folder's gradebook and
grades, other accounts' homes) and to import the grader: all refused.
"""
from __future__ import annotations

import csv
import json
import os
import pwd
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from course_hub import ACCOUNTS, REPO, log_in, readme_class_flow

pytestmark = [pytest.mark.hub, pytest.mark.slow, pytest.mark.timeout(1500)]

LAB = "lab02_collectives"
ARTIFACTS = REPO / "test-artifacts" / "hub"
SERVER_TIMEOUT_MS = 180_000
RUN_TIMEOUT_MS = 240_000


class Timings:
    """Durations of the flow's steps, in seconds, in the order they ran."""

    def __init__(self):
        self.steps: list[tuple[str, float]] = []

    @contextmanager
    def step(self, name: str):
        started = time.monotonic()
        yield
        self.steps.append((name, time.monotonic() - started))

    def table(self) -> str:
        lines = ["| step | seconds |", "| --- | --- |"]
        return "\n".join(lines + [f"| {name} | {seconds:.1f} |" for name, seconds in self.steps])


class StudentBrowser:
    """One account's JupyterLab on the hub, driven through its pages."""

    def __init__(self, browser, hub, name: str):
        self.hub, self.name = hub, name
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.lab_url = f"{hub.url}/user/{name}/lab"

    def login(self) -> None:
        log_in(self.page, self.hub.url, self.name, self.hub.passwords[self.name])
        self.page.wait_for_selector(".jp-LauncherCard", timeout=SERVER_TIMEOUT_MS)

    def login_or_resume(self) -> None:
        """Log in again (a new page has no cookie) and wait for the running server's JupyterLab."""
        log_in(self.page, self.hub.url, self.name, self.hub.passwords[self.name])
        self.page.wait_for_selector(".lm-MenuBar-itemLabel", timeout=SERVER_TIMEOUT_MS)

    def assignments(self) -> None:
        self.page.goto(self.lab_url)
        self.page.wait_for_selector(".lm-MenuBar-itemLabel", timeout=SERVER_TIMEOUT_MS)
        self.menu("Nbgrader", "Assignment List")
        self.page.wait_for_selector("#released_assignments_list", timeout=60_000)

    def menu(self, top: str, item: str) -> None:
        """Click a menu bar entry, then the item whose label starts with ``item``."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}")).first.click()

    def press(self, listing: str, button: str, then: str) -> None:
        """Click ``button`` on the lab's row of ``listing``, then wait for ``then`` to show."""
        self.page.click(f"#{listing} .list_item:has-text('{LAB}') button:has-text('{button}')", timeout=60_000)
        self.page.wait_for_selector(then, timeout=120_000)

    def run_all(self, path: str, expected_output: str) -> None:
        """Open the notebook, Run All Cells, and wait for ``expected_output`` in an output.

        JupyterLab may ask "Select Kernel" while it is still listing the server's kernels (on a
        busy machine); the dialog is answered with the notebook's own kernel and the run repeated.
        """
        self.page.goto(f"{self.lab_url}/tree/{path}")
        output = self.page.locator(f".jp-OutputArea-output:has-text('{expected_output}')")
        dialog = self.page.locator(".jp-Dialog:has-text('Select Kernel')")
        idle = self.page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        idle.or_(dialog).first.wait_for(timeout=SERVER_TIMEOUT_MS)  # no kernel starts while the dialog waits
        self.page.wait_for_timeout(3000)  # the dialog, when it comes, comes within a moment
        deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
        started = False
        while time.monotonic() < deadline:
            if output.count():
                return
            if dialog.count():
                self.page.click(".jp-Dialog button:has-text('Select')")
                self.page.wait_for_timeout(2000)
                started = False
            if not started:
                self.menu("Run", "Run All Cells")
                started = True
            self.page.wait_for_timeout(1000)
        raise AssertionError(f"{path}: no output {expected_output!r} after {RUN_TIMEOUT_MS / 1000:.0f} s")

    def terminal(self, command: str) -> None:
        self.page.goto(self.lab_url)
        self.page.wait_for_selector(".lm-MenuBar-itemLabel", timeout=SERVER_TIMEOUT_MS)
        self.menu("File", "New Launcher")
        self.page.click(".jp-LauncherCard:has-text('Terminal')", timeout=60_000)
        self.page.wait_for_selector(".jp-Terminal", timeout=60_000)
        self.page.click(".jp-Terminal")
        self.page.keyboard.type(command + "\n", delay=5)

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{self.name}-{name}.png"))


def _home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


def _answer_part_1(notebook: Path, owner: str) -> None:
    """Write the solution of part 1 into the student's fetched notebook, as the student."""
    source = json.loads(next((REPO / "solutions" / LAB).glob("*.ipynb")).read_text())
    answer = next("".join(c["source"]) for c in source["cells"]
                  if c["metadata"].get("nbgrader", {}).get("grade_id") == "ring_basics")
    answer = "".join(line for line in answer.splitlines(keepends=True) if "### " not in line)
    fetched = json.loads(notebook.read_text())
    cell = next(c for c in fetched["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ring_basics")
    cell["source"] = answer
    notebook.write_text(json.dumps(fetched, indent=1))
    account = pwd.getpwnam(owner)
    os.chown(notebook, account.pw_uid, account.pw_gid)


def _wait_for_file(path: Path, text: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(1)
    raise AssertionError(f"{path} never showed {text!r}: {path.read_text() if path.exists() else 'missing'}")


@pytest.fixture
def pages():
    """Every account's browser page; each is saved as a screenshot when the test ends."""
    opened: list[StudentBrowser] = []
    yield opened
    for student in opened:
        student.screenshot("last")


def _run_class_flow(hub, browser, opened: list) -> dict:
    timings = Timings()
    before, after = readme_class_flow()
    first, second = ACCOUNTS["students"]
    for name in ACCOUNTS["students"] + ACCOUNTS["instructors"]:
        assert _home(name).stat().st_mode & 0o077 == 0, f"{name}'s home is open to others"
    with timings.step("instructor releases the lab (the README's commands)"):
        hub.run_as_written(before)

    student = StudentBrowser(browser, hub, first)
    opened.append(student)
    with timings.step("student 1 logs in (the hub starts the server)"):
        student.login()
    with timings.step("student 1 fetches the lab (Assignment List)"):
        student.assignments()
        student.press("released_assignments_list", "Fetch", f"#fetched_assignments_list .list_item:has-text('{LAB}')")
    notebook = _home(first) / LAB / f"{LAB}.ipynb"
    assert notebook.exists() and notebook.stat().st_uid == pwd.getpwnam(first).pw_uid
    _answer_part_1(notebook, first)
    with timings.step("student 1 runs the lab (part 1's check launches ranks)"):
        student.run_all(f"{LAB}/{LAB}.ipynb", "Part 1: the visible checks passed")
    student.screenshot("ran-the-lab")
    report = _home(first) / "check.txt"
    with timings.step("student 1 runs labutils check in a terminal"):
        student.terminal(f"cd ~ && labutils check {LAB}/{LAB}.ipynb > ~/check.txt 2>&1; echo EXIT=$? >> ~/check.txt")
        checked = _wait_for_file(report, "EXIT=")
    assert "EXIT=1" in checked and "passed" in checked and "not attempted" in checked, checked
    with timings.step("student 1 submits (Assignment List)"):
        student.assignments()
        student.press("fetched_assignments_list", "Submit", f"#submitted_assignments_list .list_item:has-text('{LAB}')")

    other = StudentBrowser(browser, hub, second)
    opened.append(other)
    with timings.step("student 2 logs in, fetches and submits the lab untouched"):
        other.login()
        other.assignments()
        other.press("released_assignments_list", "Fetch", f"#fetched_assignments_list .list_item:has-text('{LAB}')")
        other.press("fetched_assignments_list", "Submit", f"#submitted_assignments_list .list_item:has-text('{LAB}')")

    with timings.step("instructor collects, grades, releases feedback (the README's commands)"):
        hub.run_as_written(after)
    assert sorted(p.name for p in (hub.class_dir / "submitted").iterdir()) == sorted(ACCOUNTS["students"])
    with open(hub.class_dir / "graded" / "grades.csv") as grades:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(grades)}

    with timings.step("student 1 fetches and reads the feedback"):
        student.assignments()
        student.press("submitted_assignments_list", "Fetch Feedback",
                      f"#submitted_assignments_list .list_item:has-text('{LAB}')")
        feedback = _wait_for_file_glob(_home(first) / LAB / "feedback", f"{LAB}.html")
        student.page.goto(f"{hub.url}/user/{first}/files/{feedback.relative_to(_home(first))}")
        student.page.wait_for_selector("text=Score", timeout=60_000)
        text = student.page.inner_text("body")
    student.screenshot("feedback")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.md").write_text(timings.table() + "\n")
    print("\n" + timings.table())
    return {"scores": scores, "feedback": (text, feedback.read_text())}


def test_a_class_takes_a_lab_through_the_hub_and_no_student_reads_the_grader(hub, browser, pages):
    """One test, so that one worker alone makes the hub's accounts (two tests could be dealt to two
    workers, each making and removing the same accounts while the other's hub runs)."""
    flow = _run_class_flow(hub, browser, pages)
    first, second = ACCOUNTS["students"]
    assert flow["scores"] == {first: 3.0, second: 0.0}, flow["scores"]
    text, page = flow["feedback"]
    assert "3" in text and "16" in text, text[:500]
    assert "BEGIN HIDDEN TESTS" not in text and "grading.judge" not in text
    assert "beside the notebook" not in text, text[:1500]
    assert "cdnjs" not in page and "MathJax" in page, "the feedback page loads MathJax from the network"
    assert ">Test cell<" not in page
    _a_student_reads_nothing_of_the_grader(hub, browser, pages)


def _wait_for_file_glob(folder: Path, name: str, timeout_s: float = 120) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.rglob(name)) if folder.exists() else []
        if found:
            return found[-1]
        time.sleep(1)
    raise AssertionError(f"no {name} under {folder}")


#: A student's cell: try to read each path and import the grader; one line of JSON results.
PROBE = """import json, os
results = {}
for path in %r:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        results[path] = "read"
    except OSError as error:
        results[path] = type(error).__name__
for module in ("grading", "grading.judge"):
    try:
        results["import " + module] = __import__(module).__file__
    except ImportError as error:
        results["import " + module] = type(error).__name__
print("PROBED " + json.dumps(results))
"""


def instructors_paths(hub) -> list[str]:
    """What a student must not read: the grader, the hidden tests, the solutions, the history,
    the class folder's gradebook and grades, the other accounts' homes."""
    first, second = ACCOUNTS["students"]
    paths = [REPO / "grading" / "__init__.py", REPO / "grading" / "judge" / "lab02_collectives.py",
             REPO / "solutions", REPO / "solutions" / LAB / f"{LAB}.ipynb", REPO / ".git",
             hub.class_dir, hub.class_dir / "graded" / "gradebook.db", hub.class_dir / "graded" / "grades.csv",
             _home(second), _home(ACCOUNTS["instructors"][0])]
    missing = [str(p) for p in paths if not p.exists()]
    assert not missing, f"the class flow left no {missing} to try"
    return [str(p) for p in paths]


def _a_student_reads_nothing_of_the_grader(hub, browser, pages) -> None:
    """Logged in through the proxy, a student's notebook tries each of ``instructors_paths`` and to
    import the grader: every read refused, no module found."""
    first = ACCOUNTS["students"][0]
    paths = instructors_paths(hub)
    notebook = _home(first) / "probe.ipynb"
    cell = {"cell_type": "code", "execution_count": None, "id": "probe", "metadata": {}, "outputs": [],
            "source": PROBE % (paths,)}
    notebook.write_text(json.dumps({"cells": [cell], "metadata": {"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    account = pwd.getpwnam(first)
    os.chown(notebook, account.pw_uid, account.pw_gid)
    student = StudentBrowser(browser, hub, first)
    pages.append(student)
    student.login_or_resume()
    student.run_all("probe.ipynb", "PROBED")
    line = student.page.locator(".jp-OutputArea-output:has-text('PROBED')").first.inner_text()
    results = json.loads(line.split("PROBED", 1)[1])
    read = {what: how for what, how in results.items() if how == "read" or how.endswith(".py")}
    assert not read, f"a student could read {read}"
    assert results["import grading"] == "ModuleNotFoundError", results
    assert len(results) == len(paths) + 2
