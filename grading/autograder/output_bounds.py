"""Size bounds on what a submission's cells print, so one student's output bomb costs only that student.

A cell may print 50 MB, one 8 MB line, or display a JSON object nested 600 levels deep. Kept as is,
such output makes the autograded notebook, the feedback page and the time to clean it grow without
bound. ``bound_outputs(outputs, budget)`` keeps a cell's outputs within ``budget`` characters (text
cut, display data past the budget or nested past ``MAX_JSON_DEPTH`` replaced) and ends them with one
``CUT_MARK`` line saying what was cut, which the attention report quotes.

    budget = OutputBudget()                        # one per notebook
    cell.outputs = bound_outputs(cell.outputs, budget)
"""
from __future__ import annotations

from dataclasses import dataclass

from nbformat.v4 import new_output

#: Characters of output one cell keeps (all its outputs together).
MAX_CELL_CHARS = 100_000
#: Characters of output one notebook keeps (all its cells together).
MAX_NOTEBOOK_CHARS = 1_000_000
#: Deepest nesting of lists and dicts kept in display data (a JSON display, a widget's state).
MAX_JSON_DEPTH = 32
#: How the line that says an output was cut begins (the attention report looks for it).
CUT_MARK = "[output cut by the grader:"


@dataclass
class OutputBudget:
    """Characters a notebook's outputs may still take (``MAX_NOTEBOOK_CHARS`` to start with)."""

    left: int = MAX_NOTEBOOK_CHARS


def json_depth(value, limit: int = MAX_JSON_DEPTH + 1) -> int:
    """How deep lists and dicts nest in ``value`` (0 for a scalar), counted without recursion and
    at most to ``limit``."""
    deepest, level = 0, [value]
    while level and deepest < limit:
        children = [c for v in level if isinstance(v, (list, dict))
                    for c in (v.values() if isinstance(v, dict) else v)]
        if any(isinstance(v, (list, dict)) for v in level):
            deepest += 1
        level = children
    return deepest


def output_chars(output) -> int:
    """Characters an output holds: its text, error message and traceback, every string of its data
    (a deeply nested one counts as over any budget)."""
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    if output.get("output_type") == "error":
        return len(output.get("evalue", "")) + sum(len(line) for line in output.get("traceback", []))
    data = output.get("data", {})
    if json_depth(data) > MAX_JSON_DEPTH:
        return MAX_NOTEBOOK_CHARS + 1
    total, todo = 0, [data]
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
    return total


def _cut(output, room: int):
    """``output`` within ``room`` characters: a stream's text or an error's message cut there; other
    outputs (display data cannot be cut and stay valid) dropped: None."""
    if output.get("output_type") == "stream":
        output["text"] = output.get("text", "")[:room]
        return output
    if output.get("output_type") == "error":
        evalue = output.get("evalue", "")[:room]
        return new_output("error", ename=output.get("ename", "Error"), evalue=evalue,
                          traceback=[f"{output.get('ename', 'Error')}: {evalue}"])
    return None


def bound_outputs(outputs: list, budget: OutputBudget) -> list:
    """``outputs`` of one cell within ``MAX_CELL_CHARS`` and what is ``left`` in ``budget`` (which it
    lowers); when something was cut, a last stdout line starting with ``CUT_MARK`` says how much."""
    room = min(MAX_CELL_CHARS, max(budget.left, 0))
    kept, cut = [], 0
    for output in outputs:
        size = output_chars(output)
        if size <= room:
            kept.append(output)
            room -= size
            budget.left -= size
            continue
        cut += size - room
        shortened = _cut(output, room) if room else None
        if shortened is not None:
            kept.append(shortened)
            budget.left -= room
            room = 0
    if cut:
        kept.append(new_output("stream", name="stdout", text=f"\n{CUT_MARK} {cut} characters over the bound of "
                               f"{MAX_CELL_CHARS} per cell and {MAX_NOTEBOOK_CHARS} per notebook, or display data "
                               f"nested deeper than {MAX_JSON_DEPTH} levels]\n"))
    return kept
