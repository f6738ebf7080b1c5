"""Which protected cells a submission changed: the instructor-facing half of tamper-proofing.

nbgrader quietly restores an edited read-only or test cell from the source, and only marks a
deleted test cell "needs manual grade". This module compares a submitted notebook with the
release, cell by cell, through nbgrader's own metadata (``grade_id``) and checksum.
"""
from __future__ import annotations

from dataclasses import dataclass

from nbgrader import utils


@dataclass(frozen=True)
class Tampering:
    """One protected cell a submission changed. ``kind``: "edited", "deleted" or "duplicated";
    ``role``: "test cell" (graded) or "read-only cell"."""

    cell: str
    kind: str
    role: str

    def __str__(self) -> str:
        return f"{self.kind} {self.role} {self.cell}"


def _role(cell) -> str | None:
    """"test cell", "read-only cell", or None for a cell the student may change."""
    if utils.is_grade(cell) and not utils.is_solution(cell):
        return "test cell"
    if utils.is_locked(cell):
        return "read-only cell"
    return None


def _checksum_or_none(cell) -> str | None:
    try:
        return utils.compute_checksum(cell)
    except (KeyError, TypeError, ValueError):  # metadata mangled beyond nbgrader's format
        return None


def find_tampering(release, submitted) -> list[Tampering]:
    """The protected cells of ``release`` (a notebook) that ``submitted`` edited, deleted or
    duplicated, in release order. Outputs and execution counts do not count as edits."""
    by_id: dict[str, list] = {}
    for cell in submitted.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None:
            by_id.setdefault(grade_id, []).append(cell)
    found = []
    for cell in release.cells:
        role = _role(cell)
        if role is None:
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        copies = by_id.get(grade_id, [])
        if not copies:
            found.append(Tampering(grade_id, "deleted", role))
            continue
        if len(copies) > 1:
            found.append(Tampering(grade_id, "duplicated", role))
        if _checksum_or_none(copies[0]) != utils.compute_checksum(cell):
            found.append(Tampering(grade_id, "edited", role))
    return found
