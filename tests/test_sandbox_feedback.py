"""What leaves a sandboxed submission for the student: the feedback (grading.autograder.feedback)
drops any output quoting the hidden tests or the grader's files, in whatever form it was shown,
and puts the grader's notices (a helper file, repaired metadata) first."""
from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

from grading.autograder.feedback import REDACTED, SanitizeHiddenTests, grader_lines
from grading.paths import GRADING_DIR

LAB = "lab01_tensor_parallel"
HIDDEN = ('# Hidden tests of x (2 points).\n### BEGIN HIDDEN TESTS\n'
          'from grading.judge import judge\njudge("lab01_tensor_parallel", "test_x", thing=thing)\n### END HIDDEN TESTS')
QUOTED = 'judge("lab01_tensor_parallel", "test_x", thing=thing)'


def _feedback(cells: list, tmp_path, notices=None):
    nb = nbformat.v4.new_notebook(cells=cells)
    hidden = new_code_cell(HIDDEN)
    hidden.metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "points": 2, "solution": False,
                                   "locked": True, "schema_version": 3}
    nb.cells.append(hidden)
    preprocessor = SanitizeHiddenTests()
    if notices is not None:
        (tmp_path / LAB).mkdir()
        (tmp_path / LAB / "alice.notices.json").write_text(json.dumps(notices))
        preprocessor.verdicts_dir = str(tmp_path)
    nb, _ = preprocessor.preprocess(nb, {"nbgrader": {"assignment": LAB, "student": "alice"}})
    return nb


def _with_output(output):
    cell = new_code_cell("show(stolen)")
    cell.outputs = [output]
    return cell


@pytest.mark.parametrize("output", [
    new_output("stream", name="stderr", text=QUOTED + "\n"),
    new_output("display_data", data={"text/html": "<pre>" + QUOTED.replace('"', "&quot;") + "</pre>",
                                     "text/plain": "<IPython.core.display.HTML object>"}),
    new_output("display_data", data={"text/html": QUOTED.replace("judge(", "<b></b>judge(")}),
    new_output("display_data", data={"text/markdown": "    " + QUOTED}),
    new_output("execute_result", data={"application/json": {"leak": QUOTED}}, execution_count=1),
    new_output("error", ename="RuntimeError", evalue="see below", traceback=["RuntimeError", QUOTED]),
], ids=["stderr", "html-entities", "html-tags", "markdown", "json", "error"])
def test_an_output_quoting_a_hidden_line_is_removed_whatever_its_form(tmp_path, output):
    nb = _feedback([_with_output(output)], tmp_path)
    assert [o.get("text") for o in nb.cells[0].outputs] == [REDACTED]


def test_a_line_of_the_graders_files_is_removed_and_its_path_shortened(tmp_path):
    line = sorted(grader_lines())[0]
    nb = _feedback([_with_output(new_output("stream", name="stdout", text=f"x\n{line}\n")),
                    _with_output(new_output("stream", name="stdout", text=f"{GRADING_DIR}/judge/rankside.py\n"))],
                   tmp_path)
    assert nb.cells[0].outputs[0].text == REDACTED
    assert nb.cells[1].outputs[0].text == "grading/judge/rankside.py\n"


def test_a_students_own_output_is_kept(tmp_path):
    plot = new_output("display_data", data={"text/html": "<b>my own table</b>", "text/plain": "table"})
    nb = _feedback([_with_output(plot)], tmp_path)
    assert nb.cells[0].outputs[0].data["text/html"] == "<b>my own table</b>"


def test_the_graders_notices_come_first(tmp_path):
    notices = ["handed in my_layers.py beside the notebook: put that code in the notebook"]
    nb = _feedback([_with_output(new_output("stream", name="stdout", text="hi\n"))], tmp_path, notices)
    assert nb.cells[0].cell_type == "markdown" and notices[0] in nb.cells[0].source
    assert _feedback([], tmp_path / "none").cells[0].cell_type == "code"  # no notices, no cell
