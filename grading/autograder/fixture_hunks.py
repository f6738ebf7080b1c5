"""A fixture's ``edit`` section: a few lines of the solution's code changed, written as a diff.

The section's body is one or more hunks separated by a line ``# @@``. Every line of a hunk starts
with a marker: ``-`` a line of the solution removed, ``+`` a line added, a space a line kept (an
empty line is a kept empty line), each written as the cell has it, at the same indentation::

    # %% edit: row_parallel  def: RowParallelLinear.forward
             x_local = x if self.input_is_parallel else scatter_to_tp_region(x, self.group)
    -        y = reduce_from_tp_region(F.linear(x_local, self.weight), self.group)
    +        y = F.linear(x_local, self.weight)
    # @@
    -        return y + self.bias if self.bias is not None else y
    +        return y

The removed and kept lines, in order, must stand exactly once as a run of consecutive lines of
the code edited (one definition, ``definitions.definition_lines``, or the whole cell), compared
without their trailing whitespace; the kept lines, as the code writes them, and the added lines,
in order, take the run's place. The hunks apply one after the other, each to the code the ones
before it left.
"""
from __future__ import annotations

from grading.autograder.definitions import definition_lines

_SEPARATOR = "# @@"
_MARKERS = ("-", "+", " ")


def edit_code(source: str, text: str, definition: str | None = None) -> str:
    """``source`` (a cell's code) with the hunks of ``text`` applied to the definition
    ``definition`` (a path as ``definitions`` takes it), or to the whole code without one.
    ValueError names the definition and the first line of a hunk that does not apply."""
    lines = source.split("\n")
    first, end = definition_lines(source, definition) if definition else (0, len(lines))
    edited = lines[first:end]
    for hunk in hunks(text):
        try:
            edited = _apply(edited, hunk)
        except ValueError as error:
            raise ValueError(f"{definition}: {error}" if definition else str(error)) from None
    return "\n".join(lines[:first] + edited + lines[end:])


def hunks(text: str) -> list:
    """The hunks of an ``edit`` section's body: lists of its lines, each with its marker.
    ValueError for a line without a marker, or a hunk that keeps or removes no line."""
    found = [[]]
    for line in text.split("\n"):
        if line.rstrip() == _SEPARATOR:
            found.append([])
        elif line and not line.startswith(_MARKERS):
            raise ValueError(f"a hunk's line must start with '-', '+' or a space: {line!r}")
        else:
            found[-1].append(line)
    for hunk in found:
        if all(line.startswith("+") for line in hunk):
            first = repr(hunk[0]) if hunk else "nothing"
            raise ValueError(f"a hunk must keep or remove a line of the solution; this one starts with {first}")
    return found


def _apply(lines: list, hunk: list) -> list:
    """``lines`` with the one run that ``hunk``'s removed and kept lines match replaced by its
    kept lines (as ``lines`` writes them) and its added lines."""
    old = [line[1:].rstrip() for line in hunk if not line.startswith("+")]
    stripped = [line.rstrip() for line in lines]
    starts = [i for i in range(len(lines) - len(old) + 1) if stripped[i:i + len(old)] == old]
    if len(starts) != 1:
        where = "not in the code" if not starts else f"in the code {len(starts)} times"
        raise ValueError(f"the hunk that starts {hunk[0]!r} is {where}")
    start = starts[0]
    run, new = iter(lines[start:start + len(old)]), []
    for line in hunk:
        if line.startswith("+"):
            new.append(line[1:])
        elif line.startswith("-"):
            next(run)
        else:
            new.append(next(run))
    return lines[:start] + new + lines[start + len(old):]
