"""Synthetic submissions, built from a lab's source notebook so they never go stale.

``student_solution(source, release)`` is the release with every solution cell filled in from
the source (markers removed): what a perfect student hands in. A fixture file then changes
that notebook, one section per cell::

    # Classic mistake 5: RowParallelLinear adds its bias on every shard.
    # loses: test_row_parallel
    # %% replace: row_parallel
    class RowParallelLinear(nn.Module):
        ...
    # %% append: check_f            (add lines to a cell)
    # %% delete: test_g             (remove a cell; no body)
    # %% insert: g                  (a new code cell after g; a first line "# nbgrader: {...}"
                                      gives it that nbgrader metadata)
    # %% metadata: f                (JSON merged into the cell's nbgrader metadata)
    # %% file: my_layers.py         (a file handed in beside the notebook: ``Fixture.files``)

Header lines ``# loses: CELL ...`` (test cells that must score zero), ``# reports: ...``
(tampering the report must list, ``kind role cell`` separated by ";") and ``# attention: ...``
(texts that lines of the report's attention list must contain, separated by ";") state what
grading the fixture must give; the rest of the header describes it.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field

_SECTION = re.compile(r"^# %% (replace|append|delete|insert|metadata|file): (\S+)\s*$")
_CELL_METADATA = "# nbgrader: "
_SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


@dataclass
class Fixture:
    """A parsed fixture file: what it changes, and what grading must make of it."""

    name: str
    description: str
    loses: set
    reports: list
    edits: list = field(default_factory=list)  # (action, grade_id, text)
    attention: list = field(default_factory=list)

    @property
    def files(self) -> dict:
        """{file name: text} of the files handed in beside the notebook."""
        return {name: text + "\n" for action, name, text in self.edits if action == "file"}


def parse_fixture(name: str, text: str) -> Fixture:
    """Parse a fixture file's text (format in the module docstring)."""
    fixture = Fixture(name, "", set(), [])
    description, current = [], None
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            current = [match[1], match[2], []]
            fixture.edits.append(current)
        elif current is not None:
            current[2].append(line)
        elif line.startswith("# loses:"):
            fixture.loses.update(line.split(":", 1)[1].split())
        elif line.startswith("# reports:"):
            fixture.reports += [item.strip() for item in line.split(":", 1)[1].split(";") if item.strip()]
        elif line.startswith("# attention:"):
            fixture.attention += [item.strip() for item in line.split(":", 1)[1].split(";") if item.strip()]
        elif line.startswith("#"):
            description.append(line.lstrip("# "))
    if not fixture.edits:
        raise ValueError(f"fixture {name} changes nothing: add a '# %% replace: CELL' section")
    fixture.description = " ".join(description)
    fixture.edits = [(action, cell, "\n".join(body).strip("\n")) for action, cell, body in fixture.edits]
    return fixture


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def student_solution(source, release):
    """The release notebook with each solution cell's code taken from the source notebook."""
    solutions = {_grade_id(c): c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    notebook = copy.deepcopy(release)
    for cell in notebook.cells:
        if _grade_id(cell) in solutions:
            cell.source = "\n".join(line for line in solutions[_grade_id(cell)].split("\n")
                                    if not _SOLUTION_MARKER.match(line))
    return notebook


def _inserted_cell(text: str):
    """A new code cell from an ``insert`` section's text (its nbgrader metadata from a first
    ``# nbgrader: {...}`` line)."""
    from nbformat.v4 import new_code_cell

    first, _, rest = text.partition("\n")
    if not first.startswith(_CELL_METADATA):
        return new_code_cell(text)
    cell = new_code_cell(rest)
    cell.metadata["nbgrader"] = json.loads(first[len(_CELL_METADATA):])
    return cell


def apply_fixture(notebook, fixture: Fixture):
    """A copy of ``notebook`` with the fixture's edits; KeyError names a cell that is not there.
    ``file`` sections are not the notebook's: see ``Fixture.files``."""
    notebook = copy.deepcopy(notebook)
    for action, grade_id, text in fixture.edits:
        if action == "file":
            continue
        index = next((i for i, c in enumerate(notebook.cells) if _grade_id(c) == grade_id), None)
        if index is None:
            raise KeyError(f"fixture {fixture.name}: no cell {grade_id!r} in the notebook")
        if action == "delete":
            del notebook.cells[index]
        elif action == "append":
            notebook.cells[index].source += "\n" + text
        elif action == "insert":
            notebook.cells.insert(index + 1, _inserted_cell(text))
        elif action == "metadata":
            notebook.cells[index].metadata["nbgrader"].update(json.loads(text))
        else:
            notebook.cells[index].source = text
    return notebook
