"""A released lab, untouched, run from JupyterLab: Run All stops at the first visible check, and
what the student reads there is one clear failure (which rank, what is not implemented), not a
wall of tracebacks from every rank."""
from __future__ import annotations

import re

import nbformat
import pytest

from course_paths import LABS, REPO
from jupyterlab_ui import NotebookUI

LAB = "lab01_tensor_parallel"
#: Lines a student should have to read to learn why a visible test failed.
MAX_ERROR_LINES = 60
#: A remote traceback as labutils shows it: "on rank K of N:" then Python's traceback.
RANK_TRACEBACK = re.compile(r"on rank \d+ of \d+:\s*\n\s*Traceback", re.IGNORECASE)


RELEASES = sorted((LABS / LAB).glob("*.ipynb"))


def _is_visible_check(cells, index: int) -> bool:
    """Whether cell ``index`` is a check the student cannot edit (nbgrader read-only or test cell)
    that comes after a cell the student writes (so it is not the lab's setup)."""
    grading = cells[index].metadata.get("nbgrader", {})
    after_a_solution = any(c.metadata.get("nbgrader", {}).get("solution") for c in cells[:index])
    return grading.get("locked", False) and not grading.get("solution", False) and after_a_solution


@pytest.mark.skipif(not RELEASES, reason=f"labs/{LAB} holds no released notebook yet "
                                         "(nbgrader generate_assignment makes it)")
def test_untouched_lab_fails_its_first_visible_check_readably(page, lab_server, workspace, artifacts_dir):
    assert len(RELEASES) == 1, f"labs/{LAB} should hold one notebook, found {[p.name for p in RELEASES]}"
    path = str(RELEASES[0].relative_to(REPO))
    cells = nbformat.read(RELEASES[0], 4).cells
    lab = NotebookUI.open(page, lab_server, path, workspace)
    lab.run_all()
    lab.wait_until_run_finished(timeout_s=120)

    errors = lab.cells_with_errors()
    assert len(errors) == 1, f"Run All should stop at the first failure, cells with errors: {errors}"
    failed = errors[0]
    lab.scroll_to_cell(failed)
    lab.screenshot(artifacts_dir / "released_lab.png")
    lab.scroll_to_output_end(failed)
    lab.screenshot(artifacts_dir / "released_lab_error_end.png")
    assert _is_visible_check(cells, failed), \
        f"the first error is in cell {failed}, which is not a visible check:\n{lab.cell_source(failed)}"

    message = lab.output_text(failed)
    assert re.search(r"NotImplementedError|not implemented", message, re.IGNORECASE), message
    assert re.search(r"\brank \d", message), f"the failure does not say which rank:\n{message}"
    assert len(RANK_TRACEBACK.findall(message)) <= 1, f"one traceback per rank:\n{message}"
    assert len(message.splitlines()) <= MAX_ERROR_LINES, \
        f"{len(message.splitlines())} lines of error output:\n{message}"
