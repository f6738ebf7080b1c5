"""The widget cells of each chapter, and the chapter cells they need, as a short scratch notebook.

A chapter's widget cell is a code cell whose source displays a ``labutils.widgets``
dashboard (``figure_explorer(``, ``*_explorer(``, ``zero_calculator(``, ``strategy_chooser(``).
Running the whole chapter in the browser takes minutes; the widget cells need only the
cells that define the names they use. :func:`widget_notebook_cells` keeps, in chapter order,
the parameters cell, the cells that import, and every cell that defines a name a kept cell
reads (the last such cell before it, transitively), up to the chapter's last widget cell, so a
chapter's widgets run in seconds with the chapter's own code.
"""
from __future__ import annotations

import ast
import builtins
import json
import re
from dataclasses import dataclass
from pathlib import Path

#: Calls that display a labutils dashboard.
WIDGET_CALL = re.compile(r"\b(figure_explorer|\w+_explorer|zero_calculator|strategy_chooser)\(")


@dataclass(frozen=True)
class CodeCell:
    """One code cell: its source, the names it binds and the names it reads."""

    source: str
    defines: frozenset
    reads: frozenset
    is_parameters: bool

    @property
    def shows_widget(self) -> bool:
        return bool(WIDGET_CALL.search(self.source))


def _python_of(source: str) -> str:
    """The cell without IPython magics and shell lines, which ``ast`` cannot parse."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _names(source: str) -> tuple[frozenset, frozenset]:
    """(names bound at the top level, names read anywhere) of a cell."""
    tree = ast.parse(_python_of(source))
    defines, reads = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defines.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else defines).add(node.id)
    return frozenset(defines), frozenset(reads - set(dir(builtins)))


def code_cells(notebook: Path) -> list[CodeCell]:
    cells = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        defines, reads = _names(source)
        cells.append(CodeCell(source, defines, reads, "parameters" in cell.get("metadata", {}).get("tags", [])))
    return cells


def widget_notebook_cells(notebook: Path) -> tuple[list[str], list[int]]:
    """(sources of the cells to run, indices among them of the widget cells) for one chapter."""
    cells = code_cells(notebook)
    widget_cells = [index for index, cell in enumerate(cells) if cell.shows_widget]
    set_up = ("import", "%matplotlib", "from")
    last = max(widget_cells, default=-1)  # what runs after the last widget cell is nothing a widget cell needs
    keep = set(widget_cells) | {index for index, cell in enumerate(cells[:last + 1])
                                if cell.is_parameters or cell.source.lstrip().startswith(set_up)}
    pending = sorted(keep)
    while pending:   # each name a kept cell reads comes from the last cell before it that binds the name
        reader = pending.pop()
        for name in cells[reader].reads:
            source = next((index for index in range(reader - 1, -1, -1) if name in cells[index].defines), None)
            if source is not None and source not in keep:
                keep.add(source)
                pending.append(source)
    kept = sorted(keep)
    return [cells[index].source for index in kept], [kept.index(index) for index in widget_cells]
