"""A class takes a lab through the course hub, end to end, in headless Chromium.

The instructor releases lab 2 to nbgrader's exchange; a student logs in, fetches it, writes
part 1, runs the notebook (its checks launch ranks), runs `labutils check` in a JupyterLab
terminal and submits; a second student submits the lab untouched; the instructor collects,
grades with `course grade` and releases feedback; the first student fetches the feedback and
reads the score. Each step's duration is printed and written to
test-artifacts/hub/timings.md.
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
from course_hub import ACCOUNTS, REPO

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
        self.page.goto(f"{self.hub.url}/hub/login")
        self.page.fill("#username_input", self.name)
        self.page.fill("#password_input", self.hub.passwords[self.name])
        self.page.click("#login_submit")
        self.page.wait_for_selector(".jp-LauncherCard", timeout=SERVER_TIMEOUT_MS)

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
        self.page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=SERVER_TIMEOUT_MS)
        output = self.page.locator(f".jp-OutputArea-output:has-text('{expected_output}')")
        dialog = self.page.locator(".jp-Dialog:has-text('Select Kernel')")
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
    """Every account's browser page; each is saved as a screenshot when the test fails."""
    opened: list[StudentBrowser] = []
    yield opened
    for student in opened:
        student.screenshot("last")


def test_a_class_takes_a_lab_through_the_hub(hub, browser, pages):
    timings = Timings()
    class_dir, grade_dir = hub.workdir / "class", hub.workdir / "grading"
    class_dir.mkdir()
    first, second = ACCOUNTS["students"]
    with timings.step("instructor releases the lab (nbgrader release_assignment)"):
        hub.nbgrader("release_assignment", LAB, f"--CourseDirectory.root={class_dir}",
                     f"--CourseDirectory.release_directory={REPO / 'labs'}", cwd=class_dir)

    student = StudentBrowser(browser, hub, first)
    pages.append(student)
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
    pages.append(other)
    with timings.step("student 2 logs in, fetches and submits the lab untouched"):
        other.login()
        other.assignments()
        other.press("released_assignments_list", "Fetch", f"#fetched_assignments_list .list_item:has-text('{LAB}')")
        other.press("fetched_assignments_list", "Submit", f"#submitted_assignments_list .list_item:has-text('{LAB}')")

    with timings.step("instructor collects (nbgrader collect)"):
        hub.nbgrader("collect", LAB, f"--CourseDirectory.root={class_dir}", cwd=class_dir)
    assert sorted(p.name for p in (class_dir / "submitted").iterdir()) == sorted(ACCOUNTS["students"])
    with timings.step("instructor grades (course grade)"):
        hub.course("grade", LAB, str(class_dir / "submitted"), "--course-dir", str(grade_dir), "--workers", "2")
    with open(grade_dir / "grades.csv") as grades:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(grades)}
    assert scores == {first: 3.0, second: 0.0}, scores
    with timings.step("instructor releases feedback (nbgrader release_feedback)"):
        hub.nbgrader("release_feedback", LAB, f"--CourseDirectory.root={grade_dir}", cwd=grade_dir)

    with timings.step("student 1 fetches and reads the feedback"):
        student.assignments()
        student.press("submitted_assignments_list", "Fetch Feedback",
                      f"#submitted_assignments_list .list_item:has-text('{LAB}')")
        feedback = _wait_for_file_glob(_home(first) / LAB / "feedback", f"{LAB}.html")
        student.page.goto(f"{hub.url}/user/{first}/files/{feedback.relative_to(_home(first))}")
        student.page.wait_for_selector("text=Score", timeout=60_000)
        text = student.page.inner_text("body")
    student.screenshot("feedback")
    assert "3" in text and "16" in text, text[:500]
    assert "BEGIN HIDDEN TESTS" not in text and "grading.judge" not in text

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.md").write_text(timings.table() + "\n")
    print("\n" + timings.table())


def _wait_for_file_glob(folder: Path, name: str, timeout_s: float = 120) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.rglob(name)) if folder.exists() else []
        if found:
            return found[-1]
        time.sleep(1)
    raise AssertionError(f"no {name} under {folder}")
