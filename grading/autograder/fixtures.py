"""Synthetic submissions, built from a lab's source notebook so they never go stale.

``student_solution(source, release)`` is the release with every solution cell filled in from
the source (markers removed): what a perfect student hands in. A fixture file then changes
that notebook, one section per change, and shows only the mistake it teaches::

    # Classic mistake 5: RowParallelLinear adds its bias on every shard.
    # loses: test_row_parallel
    # %% replace: row_parallel  def: RowParallelLinear.forward
    def forward(self, x):
        ...
    # %% prepend: row_parallel      (lines put before a cell's code: the imports and helpers
                                      that a replaced definition needs)
    # %% edit: parallel_mlp         (lines of a cell's code, or with ``def:`` of one definition,
                                      removed, added and kept: hunks, below)
    # %% replace: parallel_mlp      (a whole cell's code)
    # %% append: check_f            (add lines to a cell)
    # %% delete: test_g             (remove a cell; no body)
    # %% insert: g                  (a new code cell after g; a first line "# nbgrader: {...}"
                                      gives it that nbgrader metadata)
    # %% metadata: f                (JSON merged into the cell's nbgrader metadata)
    # %% file: my_layers.py         (a file handed in beside the notebook: ``Fixture.files``)

``replace: CELL  def: NAME`` replaces one definition of the cell, the rest of the cell kept as
the solution writes it: NAME is a top-level function or class (``ring_neighbours``) or a method
(``DataParallel.no_sync``), and the section's body is its new definition, of the same name, at
any indentation (``definitions.replace_definition``). ``edit: CELL  def: NAME`` changes a few
lines of the definition instead and shows only them (without ``def:``, of the whole cell): its
body is hunks separated by ``# @@`` lines, each line marked ``-`` (a line of the solution
removed), ``+`` (added) or a space (kept), written as the cell has them (``fixture_hunks``)::

    # %% edit: f  def: CopyToTPRegion.backward
             grad_input = grad_output.clone()
    -        dist.all_reduce(grad_input, group=ctx.group)
             return grad_input, None

Sections apply in order, so several may change one cell. A cell or definition that is not
there, or a hunk whose lines are not in it once, is a ValueError naming the fixture.

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
from typing import NamedTuple

from grading.autograder.definitions import replace_definition
from grading.autograder.fixture_hunks import edit_code, hunks

_SECTION = re.compile(r"^# %% (replace|edit|prepend|append|delete|insert|metadata|file): (\S+)(?:\s+def: (\S+))?\s*$")
_CELL_METADATA = "# nbgrader: "
_SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


class Edit(NamedTuple):
    """One section of a fixture: ``action`` on ``cell`` (a grade_id, or a file name) with
    ``text``; ``definition``, for a ``replace`` or an ``edit`` of one definition only, names it."""

    action: str
    cell: str
    text: str
    definition: str | None = None


@dataclass
class Fixture:
    """A parsed fixture file: what it changes, and what grading must make of it."""

    name: str
    description: str
    loses: set
    reports: list
    edits: list = field(default_factory=list)  # of Edit
    attention: list = field(default_factory=list)

    @property
    def files(self) -> dict:
        """{file name: text} of the files handed in beside the notebook."""
        return {edit.cell: edit.text + "\n" for edit in self.edits if edit.action == "file"}


def parse_fixture(name: str, text: str) -> Fixture:
    """Parse a fixture file's text (format in the module docstring)."""
    fixture = Fixture(name, "", set(), [])
    description, current = [], None
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            if match[3] and match[1] not in ("replace", "edit"):
                raise ValueError(f"fixture {name}: only a replace or an edit names a definition: {line!r}")
            current = [match[1], match[2], [], match[3]]
            fixture.edits.append(current)
        elif line.startswith("# %% "):
            raise ValueError(f"fixture {name}: not a section header: {line!r}")
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
    fixture.edits = [Edit(action, cell, "\n".join(body).strip("\n"), definition)
                     for action, cell, body, definition in fixture.edits]
    for edit in [edit for edit in fixture.edits if edit.action == "edit"]:   # hunks misspelled: refused now
        try:
            hunks(edit.text)
        except ValueError as error:
            raise ValueError(f"fixture {name}: cell {edit.cell!r}: {error}") from None
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
    """A copy of ``notebook`` with the fixture's edits; ValueError names a cell, a definition or
    a hunk's lines that are not there. ``file`` sections are not the notebook's: see ``Fixture.files``."""
    notebook = copy.deepcopy(notebook)
    for edit in fixture.edits:
        if edit.action == "file":
            continue
        index = next((i for i, c in enumerate(notebook.cells) if _grade_id(c) == edit.cell), None)
        if index is None:
            raise ValueError(f"fixture {fixture.name}: no cell {edit.cell!r} in the notebook")
        cell = notebook.cells[index]
        if edit.action == "delete":
            del notebook.cells[index]
        elif edit.action == "append":
            cell.source += "\n" + edit.text
        elif edit.action == "prepend":
            cell.source = edit.text + "\n\n\n" + cell.source
        elif edit.action == "insert":
            notebook.cells.insert(index + 1, _inserted_cell(edit.text))
        elif edit.action == "metadata":
            cell.metadata["nbgrader"].update(json.loads(edit.text))
        else:
            try:
                cell.source = _changed_code(cell.source, edit)
            except ValueError as error:
                raise ValueError(f"fixture {fixture.name}: cell {edit.cell!r}: {error}") from None
    return notebook


def _changed_code(source: str, edit: Edit) -> str:
    """A cell's code ``source`` after a ``replace`` or an ``edit`` section."""
    if edit.action == "edit":
        return edit_code(source, edit.text, edit.definition)
    if edit.definition:
        return replace_definition(source, edit.definition, edit.text)
    return edit.text
