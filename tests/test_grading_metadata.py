"""Metadata edits on a student's cells (grading.autograder.metadata): nbgrader's own check fails
the whole submission on them; after the repair the notebook validates and the edit is reported."""
from __future__ import annotations

import copy
import os

import nbformat
import pytest
from nbgrader.preprocessors import CheckCellMetadata

from grading.autograder.fixtures import student_solution
from grading.autograder.metadata import repair_cell_metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = "lab01_tensor_parallel"


def _release_and_solution():
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    return release, student_solution(source, release)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_an_answer_cell_marked_graded_fails_nbgrader_and_is_restored():
    release, solution = _release_and_solution()
    _cell(solution, "f").metadata.nbgrader["grade"] = True  # a graded cell without points
    with pytest.raises(Exception, match="metadata"):
        CheckCellMetadata().preprocess(copy.deepcopy(solution), {})
    assert repair_cell_metadata(release, solution) == [
        "edited the nbgrader metadata of cell f: restored from the release"]
    CheckCellMetadata().preprocess(solution, {})
    assert _cell(solution, "f").metadata.nbgrader == _cell(release, "f").metadata.nbgrader


def test_a_renamed_test_cell_is_found_by_its_cell_id_and_an_added_cell_becomes_ordinary():
    release, solution = _release_and_solution()
    _cell(solution, "test_f").metadata.nbgrader["grade_id"] = "my_test"
    added = nbformat.v4.new_code_cell("print(1)")
    added.metadata["nbgrader"] = {"grade": True, "grade_id": "extra", "points": 100, "solution": False,
                                  "locked": False, "schema_version": 3}
    solution.cells.append(added)
    lines = repair_cell_metadata(release, solution)
    assert _cell(solution, "test_f").metadata.nbgrader == _cell(release, "test_f").metadata.nbgrader
    assert "nbgrader" not in solution.cells[-1].metadata
    assert lines == ["edited the nbgrader metadata of cell my_test: restored from the release",
                     "cell extra carried nbgrader metadata of its own: graded as an ordinary cell"]


def test_an_untouched_notebook_needs_no_repair():
    release, solution = _release_and_solution()
    assert repair_cell_metadata(release, solution) == []
    assert repair_cell_metadata(release, release) == []
