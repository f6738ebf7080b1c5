"""Repair the nbgrader metadata of a submission's cells before nbgrader reads it.

nbgrader fails a whole submission when the nbgrader metadata of a cell does not validate or
does not match the gradebook (a student who toggled a cell's type in the Create Assignment
toolbar, or edited the JSON, loses every part). Here every cell that the release has (same cell
id, or same grade_id) gets the release's nbgrader metadata back, and a cell the student added
with nbgrader metadata of its own loses it (it becomes an ordinary cell); each repair is reported.

    lines = repair_cell_metadata(release_notebook, submitted_notebook)  # edits submitted in place
"""
from __future__ import annotations

import copy

KEY = "nbgrader"


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get(KEY, {}).get("grade_id")


def repair_cell_metadata(release, submitted) -> list:
    """Give ``submitted``'s cells (nbformat notebooks) the release's nbgrader metadata; report lines."""
    by_id = {cell.get("id"): cell for cell in release.cells if KEY in cell.metadata and cell.get("id")}
    by_grade_id = {_grade_id(cell): cell for cell in release.cells if _grade_id(cell)}
    lines = []
    for index, cell in enumerate(submitted.cells):
        original = by_id.get(cell.get("id")) or by_grade_id.get(_grade_id(cell))
        name = _grade_id(cell) or cell.get("id") or f"#{index + 1}"
        if original is not None and original.cell_type == cell.cell_type:
            if cell.metadata.get(KEY) != original.metadata[KEY]:
                cell.metadata[KEY] = copy.deepcopy(original.metadata[KEY])
                lines.append(f"edited the nbgrader metadata of cell {name}: restored from the release")
        elif KEY in cell.metadata:
            del cell.metadata[KEY]
            lines.append(f"cell {name} carried nbgrader metadata of its own: graded as an ordinary cell")
    return lines
