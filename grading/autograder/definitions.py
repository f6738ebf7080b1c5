"""Replace one definition in a cell's code by a new one, and keep the rest of the cell as written.

A definition is named by its path: ``ring_neighbours`` (a top-level function or class) or
``DataParallel.no_sync`` (a method; any depth, each step a function or class defined directly in
the previous one's body). Its lines, decorators included, are found with ``ast`` and the new
text takes their place, indented as the old definition was; the comments and blank lines
around it stay. ``definition_lines`` finds those lines for a change of a few of them
(``fixture_hunks``).
"""
from __future__ import annotations

import ast
import textwrap

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def replace_definition(source: str, path: str, text: str) -> str:
    """``source`` with the definition ``path`` replaced by ``text``, which must be one definition
    of the same name (at any indentation). ValueError when ``source`` has no such definition,
    more than one, or ``text`` is not one."""
    new = textwrap.dedent(text).strip("\n")
    _check_replacement(new, path)
    first, end = definition_lines(source, path)
    lines = source.split("\n")
    indent = lines[first][:len(lines[first]) - len(lines[first].lstrip())]
    replacement = [indent + line if line.strip() else "" for line in new.split("\n")]
    return "\n".join(lines[:first] + replacement + lines[end:])


def definition_lines(source: str, path: str) -> tuple[int, int]:
    """(first, end): the definition ``path`` is ``source.split("\\n")[first:end]``, decorators
    included. ValueError when ``source`` is not Python, or has no such definition or more than one."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise ValueError(f"the cell is not Python: {error}") from None
    node = _find(tree.body, path)
    return min([node.lineno] + [decorator.lineno for decorator in node.decorator_list]) - 1, node.end_lineno


def _find(body: list, path: str):
    """The one definition ``path`` names, looked for from the statements ``body``."""
    node, name = None, ""
    for part in path.split("."):
        name = f"{name}.{part}" if name else part
        scope = node.body if node is not None else body
        found = [n for n in scope if isinstance(n, _DEFINITIONS) and n.name == part]
        if not found:
            raise ValueError(f"no definition of {name}")
        if len(found) > 1:
            raise ValueError(f"{len(found)} definitions of {name}")
        node = found[0]
    return node


def _check_replacement(text: str, path: str) -> None:
    """ValueError unless ``text`` is one function or class definition named as ``path`` ends."""
    name = path.rsplit(".", 1)[-1]
    try:
        body = ast.parse(text).body
    except SyntaxError as error:
        raise ValueError(f"the new {path} is not Python: {error}") from None
    if len(body) != 1 or not isinstance(body[0], _DEFINITIONS) or body[0].name != name:
        raise ValueError(f"the new {path} must be one definition of {name}, and nothing else")
