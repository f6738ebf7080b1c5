"""`labutils check LAB.ipynb`: one line per graded part, from the visible checks, as the grader runs them."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lab_answers import lab_notebook as _notebook
from lab_answers import release_with, solution_answers

from labutils.command.cli import main as labutils_main

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


def _check(path: Path, capsys) -> tuple[int, list[str]]:
    status = labutils_main(["check", str(path), "--timeout", "240"])
    out = capsys.readouterr()
    return status, out.out.splitlines() + out.err.splitlines()


def _part_lines(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.startswith("  ")]


def test_an_untouched_lab_fails_with_every_part_not_attempted_and_no_warning_of_the_kernel():
    """`python -m labutils check` as a student types it (one check of the lab, the command's process
    and its report whole: jupyter_client's warnings would show there)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "labutils", "check", str(_notebook("labs", "lab01_tensor_parallel"))],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = result.stdout.splitlines() + result.stderr.splitlines()
    parts = _part_lines(lines)
    assert result.returncode == 1, result
    assert len(parts) == 5 and all(line.startswith("not attempted") for line in parts), lines
    assert "0 of 5 parts pass their visible checks" in "\n".join(lines)
    assert "without encryption" not in result.stdout + result.stderr, result.stderr


def test_one_part_written_passes_and_the_others_are_not_attempted(tmp_path, capsys):
    answer = solution_answers("lab02_collectives")["ring_basics"]
    path = release_with("lab02_collectives", {"ring_basics": answer}, tmp_path / "lab02_collectives.ipynb")
    status, lines = _check(path, capsys)
    parts = _part_lines(lines)
    assert status == 1
    assert parts[0].startswith("passed") and "Part 1 (3 points)" in parts[0], parts
    assert all(line.startswith(("not attempted", "failed")) for line in parts[1:]), parts


def test_a_wrong_answer_fails_with_the_check_message(tmp_path, capsys):
    right = solution_answers("lab02_collectives")["ring_basics"]
    wrong = right.replace("stop = start + base + (1 if index < extra else 0)", "stop = start + base")
    assert wrong != right
    status, lines = _check(release_with("lab02_collectives", {"ring_basics": wrong}, tmp_path / "lab02.ipynb"), capsys)
    first = _part_lines(lines)[0]
    assert status == 1
    assert first.startswith("failed") and "Part 1" in first and "CheckFailed" in first, first


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS)
def test_every_solution_passes_every_visible_check(lab, capsys):
    status, lines = _check(_notebook("solutions", lab), capsys)
    assert status == 0, "\n".join(lines)
    assert all(line.startswith("passed") for line in _part_lines(lines)), lines


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    chapter = ROOT / "notebooks" / "05_collectives.ipynb"
    foreign = tmp_path / "other_course.ipynb"
    foreign.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {"nbgrader": {
        "grade": True, "grade_id": "t", "points": 1}}, "source": "assert 1 + 1 == 2", "outputs": []}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    text = tmp_path / "notes.ipynb"
    text.write_text("not json")
    cases = {tmp_path / "missing.ipynb": "no such notebook", chapter: "is not a graded lab",
             foreign: "from another course", text: "is not a Jupyter notebook"}
    for path, message in cases.items():
        assert labutils_main(["check", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def _graded_notebook(answers: list[str]) -> dict:
    """A graded notebook of one set-up cell and, for each answer, its answer cell and hidden-test cell."""
    def cell(source, **nbgrader):
        return {"cell_type": "code", "metadata": {"nbgrader": nbgrader} if nbgrader else {}, "source": source,
                "outputs": [], "execution_count": None}

    cells = [cell("import os, time")]
    for k, answer in enumerate(answers):
        cells += [cell(answer, solution=True, grade_id=f"answer_{k}"),
                  cell(f"# Hidden tests of Part {k} (1 point)", grade=True, grade_id=f"test_{k}", points=1)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


def test_a_cell_past_the_timeout_and_a_kernel_that_dies_are_reported_not_raised(tmp_path):
    """A cell still running at --timeout is interrupted and the next parts still run; a kernel that
    dies fails its part and every later part says it did not run."""
    from labutils.checks.labcheck import execute_visible, part_results

    notebook = _graded_notebook(["time.sleep(600)", "y = 2", "os.kill(os.getpid(), 9)", "z = 3"])
    results = part_results(execute_visible(notebook, tmp_path, cell_timeout_s=3))
    assert [r.status for r in results] == ["failed", "passed", "failed", "failed"], results
    assert "CellTimeout: still running after 3 s (--timeout): interrupted" in results[0].message
    assert "KernelDied: the kernel died while this cell ran" in results[2].message
    assert "KernelDied: not run: the kernel died in an earlier cell" in results[3].message


def test_a_kernel_that_cannot_start_is_one_clear_line(tmp_path):
    import subprocess
    import sys

    spec = tmp_path / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": ["python", "-c", "raise SystemExit(3)", "{connection_file}"],
                                                  "display_name": "broken", "language": "python"}))
    result = subprocess.run([sys.executable, "-m", "labutils", "check", str(_notebook("labs", "lab01_tensor_parallel"))],
                            env={**os.environ, "JUPYTER_PATH": str(tmp_path / "share" / "jupyter")},
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines()[1:] == [
        "labutils check: error: the Jupyter kernel python3 exited as it started, before running any cell: "
        "open a notebook with it in JupyterLab to see its error"], result.stderr
