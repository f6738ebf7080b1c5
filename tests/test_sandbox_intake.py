"""A bad submission costs only its owner: what ``course grade`` makes of a notebook that is not one
(grading.autograder.intake) and of output bombs (grading.autograder.output_bounds, the feedback's
cleaning). Small files, no kernel: the class run is in test_grading_e2e."""
from __future__ import annotations

import json
import os

import nbformat
import pytest
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from grading.autograder.course import copy_submission
from grading.autograder.feedback import LeakFinder, SanitizeHiddenTests, grader_lines
from grading.autograder.intake import MAX_CELLS, screen_notebook
from grading.autograder.output_bounds import (CUT_MARK, MAX_CELL_CHARS, MAX_JSON_DEPTH, MAX_NOTEBOOK_CHARS,
                                              OutputBudget, bound_outputs, json_depth)


def _deep(depth: int):
    value = "bottom"
    for _ in range(depth):
        value = {"down": value}
    return value


def _deep_display():
    """A display of JSON nested 600 levels deep (nbformat's own constructors would recurse on it)."""
    return NotebookNode(output_type="display_data", metadata={}, data={"application/json": _deep(600)})


def _valid_text(cells=None) -> str:
    return nbformat.writes(new_notebook(cells=cells or [new_code_cell("x = 1")]))


BAD = {
    "not_json": "this is not a notebook",
    "truncated": _valid_text()[:-40],
    "schema_invalid": json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                  "cells": [{"cell_type": "code", "source": 3}]}),
    "json_not_a_notebook": "[1, 2, 3]",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_that_is_no_notebook_is_refused_with_a_line(tmp_path, name):
    path = tmp_path / "lab.ipynb"
    path.write_text(BAD[name])
    screening = screen_notebook(str(path))
    assert screening.refused
    (line,) = screening.lines
    assert line.startswith("lab.ipynb ") and line.endswith("not graded (scores zero)")


def test_bytes_that_are_not_text_and_a_folder_in_the_notebooks_place_are_refused(tmp_path):
    (tmp_path / "a.ipynb").write_bytes(b"\xff\xfe\x00 not utf-8")
    (tmp_path / "b.ipynb").mkdir()
    assert "not UTF-8" in screen_notebook(str(tmp_path / "a.ipynb")).lines[0]
    assert "not a regular file" in screen_notebook(str(tmp_path / "b.ipynb")).lines[0]


def test_a_notebook_of_a_hundred_thousand_cells_is_refused(tmp_path):
    path = tmp_path / "lab.ipynb"
    cells = [{"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": "x"} for i in range(10**5)]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    screening = screen_notebook(str(path))
    assert screening.refused and f"has 100000 cells, more than {MAX_CELLS}" in screening.lines[0]


def test_outputs_handed_in_are_dropped_even_50_mb_and_a_600_deep_display(tmp_path):
    cell = new_code_cell("print('x')")
    cell.outputs = [new_output("stream", name="stdout", text="y" * (50 * 2**20)),
                    _deep_display()]
    path = tmp_path / "lab.ipynb"
    path.write_text(json.dumps(new_notebook(cells=[new_markdown_cell("# lab"), cell])))
    screening = screen_notebook(str(path))
    assert not screening.refused
    assert "with 50.0 MiB of outputs: dropped" in screening.lines[0]
    kept = nbformat.read(str(path), as_version=4)
    assert kept.cells[1].outputs == [] and kept.cells[1].source == "print('x')"
    assert os.path.getsize(path) < 10_000


def test_a_good_notebook_passes_without_a_line(tmp_path):
    path = tmp_path / "lab.ipynb"
    path.write_text(_valid_text())
    assert screen_notebook(str(path)).lines == [] and not screen_notebook(str(path)).refused


def test_a_fifo_and_a_dangling_link_beside_the_notebook_do_not_stop_the_copy(tmp_path):
    source = tmp_path / "alice"
    source.mkdir()
    (source / "lab.ipynb").write_text(_valid_text())
    os.mkfifo(source / "pipe")
    os.symlink("/no/such/file", source / "gone.py")
    copied = copy_submission(str(tmp_path / "course"), "alice", "lab", str(source))
    assert sorted(os.listdir(copied)) == ["lab.ipynb"]


def test_an_8_mb_line_and_a_deep_display_are_cut_with_a_line_saying_so():
    budget = OutputBudget()
    kept = bound_outputs([new_output("stream", name="stdout", text="z" * (8 * 2**20)),
                          _deep_display()], budget)
    assert len(kept) == 2 and len(kept[0].text) == MAX_CELL_CHARS
    assert kept[1].text.lstrip().startswith(CUT_MARK)
    assert json_depth(_deep(600)) == MAX_JSON_DEPTH + 1 and json_depth(_deep(3)) == 3


def test_the_notebooks_budget_bounds_many_cells_together():
    budget = OutputBudget()
    total = 0
    for _ in range(MAX_NOTEBOOK_CHARS // MAX_CELL_CHARS + 5):
        kept = bound_outputs([new_output("stream", name="stdout", text="w" * MAX_CELL_CHARS)], budget)
        total += sum(len(o.text) for o in kept if CUT_MARK not in o.text)
    assert total == MAX_NOTEBOOK_CHARS


def test_the_leak_finder_finds_a_line_at_any_offset_and_only_a_whole_line():
    lines = {"judge('lab01', 'test_x', thing=thing)", "a line of the reference kernel, long"}
    finder = LeakFinder(lines)
    for line in lines:
        for prefix in range(0, 13):
            assert finder.found_in("p" * prefix + line + " tail")
        assert not finder.found_in("p" * 7 + line[:-1])


def test_the_feedback_of_an_output_bomb_is_small_and_quotes_no_grader_line():
    leak = sorted(grader_lines())[0]
    bomb = new_code_cell("print(bomb)")
    bomb.outputs = [new_output("stream", name="stdout", text="q" * (50 * 2**20)),
                    new_output("stream", name="stdout", text="r" * 1000 + leak),
                    _deep_display()]
    small = new_code_cell("print(leak)")
    small.outputs = [new_output("stream", name="stdout", text="s" * 1000 + leak + "\n")]
    nb, _ = SanitizeHiddenTests().preprocess(new_notebook(cells=[bomb, small]), {"nbgrader": {}})
    page = nbformat.writes(nb)
    assert len(page) < 2 * MAX_CELL_CHARS + 10_000
    assert leak not in page
