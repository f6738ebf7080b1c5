"""labs/ is what nbgrader makes of solutions/ today, and every lab's hidden tests have a judge."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.release import differences, source_labs

LABS = source_labs()
_JUDGE_CALL = re.compile(r'^judge\("(?P<lab>[^"]+)", "(?P<test>[^"]+)", (?P<args>.*)\)$', re.MULTILINE)


def _source(lab: str):
    return nbformat.read(os.path.join(REPO, "solutions", lab, f"{lab}.ipynb"), as_version=4)


def test_there_is_a_lab():
    assert "lab01_tensor_parallel" in LABS


@pytest.mark.parametrize("lab", LABS)
def test_labs_is_what_generate_assignment_makes_of_solutions_today(lab):
    assert differences(lab) == [], "stale release: run  course release " + lab


def test_the_release_check_reports_a_stale_or_missing_release(tmp_path, monkeypatch):
    import shutil

    from grading import release

    lab = "lab01_tensor_parallel"

    def fresh_release(name, release_dir, course_root):  # stands in for nbgrader: today's labs/ is the fresh one
        shutil.copytree(os.path.join(REPO, "labs", name), os.path.join(release_dir, name))
        return os.path.join(release_dir, name)

    fake_repo = tmp_path / "repo"
    (fake_repo / "labs" / lab).mkdir(parents=True)
    (fake_repo / "labs" / lab / f"{lab}.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    (fake_repo / "labs" / lab / "notes.txt").write_text("stray")
    monkeypatch.setattr(release, "generate_release", fresh_release)
    assert differences(lab, str(fake_repo)) == [
        f"labs/{lab}/notes.txt is not in the release",
        f"labs/{lab}/{lab}.ipynb differs from a fresh release of solutions/{lab}/{lab}.ipynb"]
    shutil.rmtree(fake_repo / "labs" / lab)
    assert differences(lab, str(fake_repo)) == [f"labs/{lab} does not exist"]


@pytest.mark.parametrize("lab", LABS)
def test_every_hidden_test_cell_calls_its_judge_with_what_the_judge_needs(lab):
    from grading.judge.engine import load_lab

    tests = load_lab(lab).TESTS
    called = {}
    for cell in _source(lab).cells:
        meta = cell.metadata.get("nbgrader", {})
        if "BEGIN HIDDEN TESTS" in cell.source:
            assert meta.get("grade") and meta.get("points", 0) > 0, f"{meta.get('grade_id')} must be a graded test cell"
            (call,) = _JUDGE_CALL.finditer(cell.source)
            assert (call["lab"], call["test"]) == (lab, meta["grade_id"])
            called[call["test"]] = {arg.split("=")[0].strip() for arg in call["args"].split(",")}
    assert set(called) == set(tests)
    for test, names in called.items():
        assert set(tests[test].objects) <= names, test


@pytest.mark.parametrize("lab", LABS)
def test_the_lab_follows_the_template(lab):
    cells = _source(lab).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# Lab ")
    parameters = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    namespace = {}
    exec(parameters[0].source, namespace)
    assert (namespace["QUICK"], namespace["WORLD_SIZE"], namespace["BACKEND"]) == (True, 2, "auto")
    assert all(not c.get("outputs") for c in cells if c.cell_type == "code"), "outputs must be stripped"


def test_the_release_command_names_a_lab_that_does_not_exist():
    done = subprocess.run([sys.executable, "-m", "grading", "release", "no_such_lab", "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no lab 'no_such_lab' in solutions/" in done.stderr
    done = subprocess.run([sys.executable, "-m", "grading", "release"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "name one lab, or pass --all" in done.stderr
