"""labutils' layout: one subpackage per concern, each saying what it holds, no import circles."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "labutils"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """Every module of labutils by dotted name (a package by its ``__init__``), data files excluded."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] == "data":
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The labutils modules ``path`` imports anywhere (inside functions too), except for type checking."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    targets = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                targets.add(submodule if submodule in modules else node.module)
    return {name for name in targets if name in modules}


def test_labutils_top_level_holds_only_its_entry_points_and_subpackages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules at labutils' top level, outside any subpackage: {loose}"


def test_every_subpackage_says_what_it_holds_and_names_each_of_its_modules():
    modules = _modules()
    for name, path in modules.items():
        if path.name != "__init__.py" or name == "labutils":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"{path.relative_to(ROOT)} has no docstring saying what the subpackage is for"
        children = [m.rsplit(".", 1)[1] for m in modules if m.rsplit(".", 1)[0] == name]
        missing = [child for child in children if f"``{child}``" not in doc and f".{child}`" not in doc]
        assert not missing, f"{path.relative_to(ROOT)}'s docstring does not name {missing}"


def test_no_module_of_labutils_is_longer_than_400_lines():
    for name, path in _modules().items():
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES})"


def test_labutils_modules_import_each_other_without_circles():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    graph["labutils"] = set()  # the top level re-exports; every module's import passes through it anyway
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError("labutils modules import each other in a circle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_circle_check_sees_a_lazy_import(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from labutils.machine import topology\n")
    assert _imports(a, _modules()) == {"labutils.machine.topology"}
    b = tmp_path / "b.py"
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from labutils.machine import topology\n")
    assert _imports(b, _modules()) == set()
