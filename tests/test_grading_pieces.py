"""The grading machinery's parts that need no kernel: memory cap, wire format, tampering, feedback."""
from __future__ import annotations

import copy
import io
import json
import os
import sys

import nbformat
import pytest
from nbformat.v4 import new_output

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.autograder.feedback import REDACTED, SanitizeHiddenTests, split_hidden_region
from grading.autograder.fixtures import student_solution
from grading.autograder.tampering import find_tampering
from grading.judge import limits
from grading.judge.protocol import MAX_HEADER_BYTES, ProtocolError, read_message, write_message

LAB = "lab01_tensor_parallel"


def _notebook(kind: str):
    folder = "solutions" if kind == "source" else "labs"
    return nbformat.read(os.path.join(REPO, folder, LAB, f"{LAB}.ipynb"), as_version=4)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


# ----- memory cap ---------------------------------------------------------------------------

def test_the_default_memory_cap_shares_the_machine_between_1_and_8_gib(monkeypatch):
    monkeypatch.setattr(limits, "total_memory_bytes", lambda: 24 * limits.GIB)
    assert limits.default_memory_limit_gib(2) == 1.5          # 24 GiB over 2 workers x 8 processes
    assert limits.default_memory_limit_gib(16) == 1.0         # never below 1 GiB
    monkeypatch.setattr(limits, "total_memory_bytes", lambda: 1024 * limits.GIB)
    assert limits.default_memory_limit_gib(4) == 8.0          # never above 8 GiB


def test_a_capped_process_and_its_children_fail_to_allocate_past_the_cap():
    import subprocess

    code = ("import subprocess, sys\n"
            "from grading.judge.limits import limit_memory\n"
            "limit_memory(0.25)\n"
            "child = 'try:\\n    bytearray(2**29)\\nexcept MemoryError:\\n    print(\"child capped\")'\n"
            "subprocess.run([sys.executable, '-c', child])\n"
            "try:\n    bytearray(2**29)\nexcept MemoryError:\n    print('capped')\n"
            "limit_memory(0)\n")  # 0 changes nothing
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.stdout.split() == ["child", "capped", "capped"], done.stdout + done.stderr


# ----- wire format --------------------------------------------------------------------------

def test_a_message_round_trips_with_its_blob():
    stream = io.BytesIO()
    write_message(stream, {"lab": LAB, "names": ["f"]}, b"\x00blob")
    write_message(stream, {"ok": True})
    stream.seek(0)
    assert read_message(stream) == ({"lab": LAB, "names": ["f"]}, b"\x00blob")
    assert read_message(stream) == ({"ok": True}, b"")
    with pytest.raises(EOFError):
        read_message(stream)


def test_garbage_and_oversized_frames_are_refused():
    with pytest.raises(ProtocolError, match="too large"):
        read_message(io.BytesIO((MAX_HEADER_BYTES + 1).to_bytes(4, "big") + (0).to_bytes(8, "big")))
    with pytest.raises(ProtocolError, match="not JSON"):
        read_message(io.BytesIO((3).to_bytes(4, "big") + (0).to_bytes(8, "big") + b"{{{"))
    with pytest.raises(EOFError):
        read_message(io.BytesIO((10).to_bytes(4, "big") + (0).to_bytes(8, "big") + b"{}"))


# ----- tampering --------------------------------------------------------------------------------

def test_an_untouched_or_solved_release_is_not_tampered_with():
    release = _notebook("release")
    solved = student_solution(_notebook("source"), release)
    _cell(solved, "check_f").outputs = [new_output("stream", name="stdout", text="f: passed\n")]
    assert find_tampering(release, release) == []
    assert find_tampering(release, solved) == []


def test_edited_deleted_and_duplicated_protected_cells_are_found():
    release = _notebook("release")
    submitted = copy.deepcopy(release)
    _cell(submitted, "check_helpers").source += "\ncheck_close = lambda *a, **k: None"
    _cell(submitted, "test_row_parallel").metadata.nbgrader["points"] = 40
    submitted.cells = [c for c in submitted.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_g"]
    submitted.cells.append(copy.deepcopy(_cell(release, "test_f")))
    found = {str(t) for t in find_tampering(release, submitted)}
    assert found == {"edited read-only cell check_helpers", "edited test cell test_row_parallel",
                     "deleted test cell test_g", "duplicated test cell test_f"}


def test_stripping_nbgrader_metadata_counts_as_deleting_the_cell():
    release = _notebook("release")
    submitted = copy.deepcopy(release)
    del _cell(submitted, "check_f").metadata["nbgrader"]
    assert [str(t) for t in find_tampering(release, submitted)] == ["deleted read-only cell check_f"]


# ----- the judge's verdict over the notebook's -------------------------------------------------------

def _verdict(passed: bool, judge_error: bool = False) -> dict:
    return {"test": "test_x", "passed": passed, "lines": ["✓ case" if passed else "✗ case"],
            "judge_error": judge_error, "detail": "Traceback ... the reference failed"}


@pytest.mark.parametrize("notebook_points, verdict, points, status, note", [
    (2.0, _verdict(True), 2.0, "passed", ""),
    (0.0, _verdict(False), 0.0, "failed", ""),
    (2.0, _verdict(False), 0.0, "failed", "forged: the notebook showed this cell as passed, the judge failed it"),
    (2.0, None, 0.0, "not judged", "forged: the notebook showed this cell as passed, the judge never saw it"),
    (0.0, _verdict(True), 2.0, "passed", "the cell failed after the judge passed it"),
    (0.0, _verdict(False, judge_error=True), 0.0, "judge error", "judge error, left for manual grading"),
    # a judge error fails the cell in the kernel: a notebook showing it passed tampered with the judge's call
    (2.0, _verdict(False, judge_error=True), 0.0, "judge error", "forged: "),
])
def test_a_part_scores_the_judges_verdict_and_names_what_the_notebook_forged(notebook_points, verdict, points,
                                                                             status, note):
    from grading.autograder.runner import _part_from_verdict

    part = _part_from_verdict("test_x", 2.0, notebook_points, verdict)
    assert (part.points, part.status) == (points, status)
    assert part.note.startswith(note) if note else part.note == ""


# ----- feedback ---------------------------------------------------------------------------------

def _graded_cell(source: str, outputs: list):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "locked": True, "points": 2.0,
                                 "schema_version": 3, "solution": False, "task": False}
    cell.outputs = outputs
    return cell


HIDDEN = ('# Hidden tests of x (2 points).\n### BEGIN HIDDEN TESTS\n'
          'from grading.judge import judge\njudge("lab01_tensor_parallel", "test_x", thing=thing)\n### END HIDDEN TESTS')
TRACEBACK = ["AssertionError Traceback", '----> 4 judge("lab01_tensor_parallel", "test_x", thing=thing)',
             "AssertionError: 1 hidden check failed"]


def _sanitized(cells: list, tmp_path, verdicts: dict | None = None):
    nb = nbformat.v4.new_notebook(cells=cells)
    preprocessor = SanitizeHiddenTests()
    if verdicts is not None:
        os.makedirs(tmp_path / LAB)
        (tmp_path / LAB / "alice.json").write_text(json.dumps(verdicts))
        preprocessor.verdicts_dir = str(tmp_path)
    nb, _ = preprocessor.preprocess(nb, {"nbgrader": {"assignment": LAB, "student": "alice"}})
    return nb


def test_split_hidden_region_keeps_the_visible_part():
    visible, hidden = split_hidden_region(HIDDEN)
    assert visible == "# Hidden tests of x (2 points)."
    assert hidden == ["from grading.judge import judge", 'judge("lab01_tensor_parallel", "test_x", thing=thing)']


def test_feedback_shows_the_judges_verdict_instead_of_the_hidden_cell(tmp_path):
    cell = _graded_cell(HIDDEN, [new_output("stream", name="stdout", text="✗ case 1: output differs\n"),
                                 new_output("error", ename="HiddenTestsFailed", evalue="1 failed", traceback=TRACEBACK)])
    nb = _sanitized([cell], tmp_path, {"test_x": {"passed": False, "lines": ["✗ case 1: rank 0 output differs"]}})
    (out,) = nb.cells[0].outputs
    assert nb.cells[0].source == "# Hidden tests of x (2 points)."
    assert out.text == "✗ case 1: rank 0 output differs\n"


def test_without_a_verdict_only_check_lines_and_a_one_line_error_remain(tmp_path):
    printed = "leaked: from grading.judge import judge\n✗ case 1: output differs\nsomething else\n"
    cell = _graded_cell(HIDDEN, [new_output("stream", name="stdout", text=printed),
                                 new_output("stream", name="stderr", text="warning\n"),
                                 new_output("error", ename="HiddenTestsFailed", evalue="1 failed", traceback=TRACEBACK)])
    outputs = _sanitized([cell], tmp_path).cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream", "error"]
    assert outputs[0].text == "✗ case 1: output differs\n"
    assert outputs[1].traceback == ["HiddenTestsFailed: 1 failed"]


def test_outputs_quoting_hidden_lines_and_tracebacks_through_the_grader_are_cut(tmp_path):
    from grading.autograder.feedback import GRADING_DIR

    leak = nbformat.v4.new_code_cell("print(stolen)")
    leak.outputs = [new_output("stream", name="stdout", text='judge("lab01_tensor_parallel", "test_x", thing=thing)\n')]
    through = nbformat.v4.new_code_cell("judge('x', 'y')")
    through.outputs = [new_output("error", ename="ValueError", evalue="bad",
                                  traceback=[f"File {GRADING_DIR}/judge/client.py, line 3", "ValueError: bad"])]
    harmless = nbformat.v4.new_code_cell("1/0")
    harmless.outputs = [new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                   traceback=["----> 1 1/0", "ZeroDivisionError: division by zero"])]
    nb = _sanitized([_graded_cell(HIDDEN, []), leak, through, harmless], tmp_path)
    assert nb.cells[1].outputs[0].text == REDACTED
    assert nb.cells[2].outputs[0].traceback == ["ValueError: bad"]
    assert nb.cells[3].outputs == harmless.outputs


# ----- where the grading processes find the package -------------------------------------------

def test_the_course_root_given_explicitly_is_the_grading_package_imported(tmp_path):
    """Kernels get the course root first on PYTHONPATH; the judge and the workers run `-E -s -m` in
    it (PYTHONPATH ignored, the course root first): both import that course's grading, not the installed one."""
    import shutil
    import subprocess

    from grading.paths import isolated_module, with_course_on_pythonpath

    course = tmp_path / "course"
    shutil.copytree(os.path.join(REPO, "grading"), course / "grading",
                    ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    (course / "probe_root.py").write_text("import grading.paths\nprint(grading.paths.COURSE_ROOT)\n")
    kernel_env = with_course_on_pythonpath(dict(os.environ), str(course))
    kernel = subprocess.run([sys.executable, "-c", "import grading.paths; print(grading.paths.COURSE_ROOT)"],
                            capture_output=True, text=True, timeout=60, env=kernel_env, cwd=tmp_path)
    assert kernel.stdout.strip() == str(course), kernel.stderr
    isolated = subprocess.run(isolated_module("probe_root"), capture_output=True, text=True, timeout=60, cwd=course,
                              env={**os.environ, "PYTHONPATH": REPO})  # -E: a PYTHONPATH pointing elsewhere is ignored
    assert isolated.stdout.strip() == str(course), isolated.stderr
    assert with_course_on_pythonpath({"PYTHONPATH": f"/a{os.pathsep}{course}"}, str(course))["PYTHONPATH"] == \
        f"{course}{os.pathsep}/a"


def test_outputs_quoting_the_graders_files_are_cut_wherever_printed_but_the_students_own_lines_stay(tmp_path):
    from grading.autograder.feedback import GRADING_DIR

    with open(os.path.join(GRADING_DIR, "reference", "tp_communications.py")) as f:
        reference_line = next(line.strip() for line in f if "all_reduce" in line and len(line.strip()) >= 20
                              and not line.strip().startswith("#"))
    printed = nbformat.v4.new_code_cell("print(open(path).read())")
    printed.outputs = [new_output("stream", name="stdout", text=f"... {reference_line} ...\n")]
    own = nbformat.v4.new_code_cell(f"def f(x):\n    {reference_line}\n")
    own.outputs = [new_output("stream", name="stdout", text=f"{reference_line}\n")]
    verdict = {"test_x": {"passed": False, "lines": [f"✗ rank 0 failed: {reference_line} ..."]}}
    nb = _sanitized([_graded_cell(HIDDEN, []), printed], tmp_path / "a", verdict)
    assert nb.cells[0].outputs[0].text == REDACTED  # the verdict quoted the grader's source
    assert nb.cells[1].outputs[0].text == REDACTED
    nb = _sanitized([_graded_cell(HIDDEN, []), own], tmp_path / "b", verdict)
    assert nb.cells[1].outputs[0].text == f"{reference_line}\n"  # the student's own line


def test_the_summary_table_has_the_parts_columns_when_the_first_student_was_refused():
    from grading.autograder.report import summary_lines
    from grading.autograder.runner import ClassReport, PartScore, SubmissionOutcome

    refused = SubmissionOutcome("aaron", failure="lab.ipynb is not JSON: not graded (scores zero)")
    graded = SubmissionOutcome("zoe", parts=[PartScore("test_f", 2.0, 2.0, "passed", 2.0)])
    lines = summary_lines(ClassReport("lab", "/c", 2.0, [refused, graded], 1.0, "/c/grades.csv", "/c/feedback"))
    assert lines[0].split() == ["student", "score", "test_f"]
    assert lines[1].split()[:3] == ["aaron", "0/2", "-"] and lines[1].endswith("!")
    assert "  aaron: lab.ipynb is not JSON: not graded (scores zero)" in lines


def _schema_and_version(path: str) -> tuple:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        schema = sorted(db.execute("SELECT type, name, sql FROM sqlite_master"))
        version = db.execute("SELECT version_num FROM alembic_version").fetchall()
        courses = db.execute("SELECT id FROM course").fetchall()
    return schema, version, courses


def test_a_seeded_gradebook_is_the_one_nbgrader_makes_itself(tmp_path, monkeypatch):
    """The course folders' empty gradebook (made without nbgrader's ``alembic heads`` process) has
    nbgrader's tables and the schema revision nbgrader's own ``alembic`` command names."""
    from nbgrader.api import Gradebook

    from grading.autograder.course import seed_gradebook
    from grading.autograder.nbgrader_cli import nbgrader_environment

    seeded = seed_gradebook(str(tmp_path / "course"))
    monkeypatch.setenv("PATH", nbgrader_environment()["PATH"])
    with Gradebook(f"sqlite:///{tmp_path / 'by_nbgrader.db'}"):
        pass
    ours, theirs = _schema_and_version(seeded), _schema_and_version(str(tmp_path / "by_nbgrader.db"))
    assert ours == theirs and len(ours[1]) == 1 and ours[0]
    assert seed_gradebook(str(tmp_path / "course")) == seeded  # an existing gradebook is kept


def test_this_interpreters_bin_goes_first_on_path_once_however_often_a_class_is_graded():
    from grading.autograder.nbgrader_cli import path_with_this_interpreter_first
    bin_dir = os.path.dirname(sys.executable)
    path = os.pathsep.join(["/usr/bin", bin_dir, "", "/bin"])
    once = path_with_this_interpreter_first(path)
    assert once.split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]
    assert path_with_this_interpreter_first(once) == once
