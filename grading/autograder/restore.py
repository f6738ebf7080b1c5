"""Put back the protected cells a submission deleted, before autograding.

nbgrader 0.9.6's ``OverwriteCells.add_missing_cells`` re-inserts a deleted test cell after
the previous *graded or solution* cell, and raises ``KeyError`` when a read-only cell comes
in between (as a visible check cell does in our labs), which fails the whole submission. It
also leaves deleted read-only cells out. ``RestoreDeletedCells`` re-inserts every deleted
test cell and read-only cell after the nearest earlier cell that is still there.
"""
from __future__ import annotations

from nbgrader.preprocessors import OverwriteCells


def _grade_ids(nb) -> list:
    return [cell.metadata.get("nbgrader", {}).get("grade_id") for cell in nb.cells]


class RestoreDeletedCells(OverwriteCells):
    """OverwriteCells that restores deleted test and read-only cells where they were."""

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        max_scores = {cell.name: cell.max_score for cell in source_nb.grade_cells}
        solutions = {cell.name for cell in source_nb.solution_cells}
        anchor = -1  # index in nb.cells after which the next restored cell goes
        for source_cell in source_nb.source_cells:  # in the source notebook's order
            ids = _grade_ids(nb)
            if source_cell.name in ids:
                anchor = ids.index(source_cell.name)
                continue
            if source_cell.name not in max_scores and not source_cell.locked:
                continue  # a deleted answer is the student's to lose
            self.log.warning("Cell %s was deleted from the submission; putting it back", source_cell.name)
            cell = self.missing_cell_transform(source_cell, max_scores.get(source_cell.name, 0.0),
                                               is_solution=source_cell.name in solutions)
            if source_cell.name not in max_scores:  # read-only, not graded
                cell.metadata.nbgrader["grade"] = False
                del cell.metadata.nbgrader["points"]
            anchor += 1
            nb.cells.insert(anchor, cell)
        return nb, resources
