"""The fixtures, wrong submissions written as the solution plus their mistake
(grading/autograder/fixtures.py): the solution they start from, one definition of a cell replaced
(grading/autograder/definitions.py) or a few of its lines changed by hunks
(grading/autograder/fixture_hunks.py), the errors a fixture that names what is not there meets,
and every fixture under tests/fixtures building code that parses, with the definitions it names
where it names them. No kernel and no rank: the tests that grade the fixtures are the labs'."""
from __future__ import annotations

import ast
import functools
import os
import textwrap

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
LABS = sorted(os.listdir(os.path.join(REPO, "labs")))

from grading.autograder.definitions import replace_definition
from grading.autograder.fixture_hunks import edit_code
from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution


@functools.cache
def _notebooks(lab: str):
    """(source, release) of ``lab``."""
    return tuple(nbformat.read(os.path.join(REPO, folder, lab, f"{lab}.ipynb"), as_version=4)
                 for folder in ("solutions", "labs"))


@functools.cache
def _solution(lab: str):
    return student_solution(*_notebooks(lab))


def _cell(notebook, grade_id):
    return next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _lab_of(fixture: str) -> str:
    """The lab a fixture file (relative to tests/fixtures) is written for: labNN[/red_team]/NAME
    is lab NN's, attacks/LAB/NAME is LAB's, attacks/NAME lab 1's."""
    parts = fixture.split("/")
    if parts[0] == "attacks":
        return parts[1] if len(parts) == 3 else LABS[0]
    return next(lab for lab in LABS if lab.startswith(parts[0]))


FIXTURE_FILES = sorted(os.path.relpath(os.path.join(folder, name), FIXTURES)
                       for folder, _, names in os.walk(FIXTURES) for name in names if name.endswith(".py"))


def _fixture(relative: str):
    with open(os.path.join(FIXTURES, relative)) as f:
        return parse_fixture(os.path.basename(relative)[:-3], f.read())


# ----- the solution they start from -------------------------------------------------------------

def test_the_student_solution_is_the_release_with_the_source_solutions():
    source, release = _notebooks(LABS[0])
    solution = student_solution(source, release)
    assert [c.id for c in solution.cells] == [c.id for c in release.cells]
    f_cell = _cell(solution, "f").source
    assert "dist.all_reduce(grad_input, group=ctx.group)" in f_cell and "SOLUTION" not in f_cell
    assert "raise NotImplementedError" not in "".join(c.source for c in solution.cells)
    assert "HIDDEN TESTS" not in "".join(c.source for c in solution.cells)  # hidden tests stay out


# ----- one definition of a cell replaced ------------------------------------------------------------

CELL = '''import math


class Layer:
    """A layer."""

    # the scale every layer shares
    SCALE = 2

    @staticmethod
    def forward(x):
        return x * Layer.SCALE  # doubled

    def backward(self, g):
        return g


def helper():
    return math.pi'''


def test_a_method_is_replaced_in_place_at_its_indentation_and_the_rest_of_the_cell_stays_as_written():
    new = replace_definition(CELL, "Layer.forward", "    @staticmethod\n    def forward(x):\n        return x\n")
    assert new == CELL.replace("        return x * Layer.SCALE  # doubled", "        return x")
    assert replace_definition(CELL, "Layer.forward", "def forward(x):\n    return -x") == CELL.replace(
        "    @staticmethod\n    def forward(x):\n        return x * Layer.SCALE  # doubled",
        "    def forward(x):\n        return -x")


def test_a_top_level_function_or_class_is_replaced_whole():
    assert replace_definition(CELL, "helper", "def helper():\n    return 3") == CELL.replace("math.pi", "3")
    replaced = replace_definition(CELL, "Layer", "class Layer:\n    pass")
    assert replaced == "import math\n\n\nclass Layer:\n    pass\n\n\ndef helper():\n    return math.pi"


@pytest.mark.parametrize("path, text, error", [
    ("Layer.step", "def step(self):\n    pass", "no definition of Layer.step"),
    ("Model.forward", "def forward(x):\n    pass", "no definition of Model"),
    ("Layer.SCALE", "def SCALE():\n    return 3", "no definition of Layer.SCALE"),
    ("Layer.forward", "def backward(self, g):\n    pass", "one definition of forward"),
    ("Layer.forward", "import os\ndef forward(x):\n    pass", "one definition of forward"),
    ("Layer.forward", "def forward(x):\nreturn x", "not Python"),
])
def test_a_definition_that_is_not_there_or_a_replacement_that_is_not_one_is_refused(path, text, error):
    with pytest.raises(ValueError, match=error):
        replace_definition(CELL, path, text)


def test_a_name_defined_twice_is_refused():
    with pytest.raises(ValueError, match="2 definitions of twice"):
        replace_definition("def twice():\n    pass\n\n\ndef twice():\n    pass", "twice", "def twice():\n    return 1")


# ----- a few lines of a definition or a cell changed by hunks ----------------------------------------

def test_a_hunk_replaces_the_lines_it_removes_between_the_lines_it_keeps_trailing_whitespace_aside():
    hunk = "\n".join([" def helper():   ", "-    return math.pi", "+    x = 3", "+    return x"])
    assert edit_code(CELL, hunk, "helper") == CELL.replace("    return math.pi", "    x = 3\n    return x")


def test_a_hunk_of_removed_lines_only_removes_them():
    assert edit_code(CELL, "-    # the scale every layer shares\n-    SCALE = 2", "Layer") == CELL.replace(
        "    # the scale every layer shares\n    SCALE = 2\n", "")


def test_two_hunks_apply_one_after_the_other():
    hunks = "-import math\n+import cmath\n# @@\n-    return math.pi\n+    return cmath.pi"
    assert edit_code(CELL, hunks) == CELL.replace("math", "cmath")


def test_without_a_definition_a_hunk_applies_to_the_whole_cell():
    hunk = " import math\n+import os\n\n\n class Layer:"
    assert edit_code(CELL, hunk) == CELL.replace("import math\n", "import math\nimport os\n")


def test_a_hunk_on_a_method_finds_its_lines_in_that_method_only():
    hunk = "-        return g\n+        return -g"
    assert edit_code(CELL, hunk, "Layer.backward") == CELL.replace("return g", "return -g")
    with pytest.raises(ValueError, match="Layer.forward: the hunk that starts '-        return g' is not in the code"):
        edit_code(CELL, hunk, "Layer.forward")


def test_a_hunk_whose_lines_are_not_in_the_code_or_are_there_more_than_once_is_refused():
    with pytest.raises(ValueError, match="'-    return math.tau' is not in the code"):
        edit_code(CELL, "-    return math.tau")
    with pytest.raises(ValueError, match="' ' is in the code 7 times"):
        edit_code(CELL, " \n+    # a comment")


# ----- fixtures that name what is not there ------------------------------------------------------------

def _broken(sections: str):
    return parse_fixture("broken", "# A broken fixture.\n# loses: test_f\n" + sections)


@pytest.mark.parametrize("sections, words", [
    ("# %% replace: no_such_cell\npass\n", ["broken", "no_such_cell"]),
    ("# %% prepend: no_such_cell\nimport os\n", ["broken", "no_such_cell"]),
    ("# %% replace: f  def: CopyToTPRegion.sideways\ndef sideways(ctx):\n    pass\n",
     ["broken", "'f'", "no definition of CopyToTPRegion.sideways"]),
    ("# %% replace: f  def: NoSuchClass.forward\ndef forward(ctx):\n    pass\n", ["broken", "'f'", "NoSuchClass"]),
    ("# %% edit: f  def: CopyToTPRegion.sideways\n-        return x\n", ["broken", "'f'", "CopyToTPRegion.sideways"]),
    ("# %% edit: f  def: CopyToTPRegion.backward\n-        return grad_output, None\n",
     ["broken", "'f'", "CopyToTPRegion.backward", "'-        return grad_output, None'", "not in the code"]),
    ("# %% edit: f  def: CopyToTPRegion\n     @staticmethod\n+    # twice\n",
     ["broken", "'f'", "CopyToTPRegion", "'     @staticmethod'", "in the code 2 times"]),
    ("# %% edit: f\n-    return x.view_as(x)\n+    return x\n", ["broken", "'f'", "'-    return x.view_as(x)'"]),
])
def test_applying_a_fixture_that_names_a_missing_cell_definition_or_line_names_the_fixture_the_cell_and_the_name(
        sections, words):
    with pytest.raises(ValueError) as error:
        apply_fixture(_solution(LABS[0]), _broken(sections))
    assert all(word in str(error.value) for word in words), error.value


@pytest.mark.parametrize("text, error", [
    ("# loses: test_f\n", "changes nothing"),
    ("# %% append: f  def: copy_to_tp_region\npass\n", "only a replace or an edit names a definition"),
    ("# %% replace f\npass\n", "not a section header"),
])
def test_a_fixture_that_changes_nothing_or_misspells_a_section_is_refused_when_parsed(text, error):
    with pytest.raises(ValueError, match=error):
        parse_fixture("broken", text)


def test_an_edit_whose_body_is_not_hunks_is_refused_when_parsed():
    with pytest.raises(ValueError, match="broken: cell 'f': a hunk's line must start with '-', '[+]' or a space"):
        parse_fixture("broken", "# %% edit: f\n-import math\nimport os\n")
    with pytest.raises(ValueError, match="must keep or remove a line of the solution; this one starts with '[+]import"):
        parse_fixture("broken", "# %% edit: f\n-import math\n# @@\n+import os\n")
    with pytest.raises(ValueError, match="must keep or remove a line of the solution; this one starts with nothing"):
        parse_fixture("broken", "# %% edit: f\n-import math\n# @@\n# @@\n-    return math.pi\n")


# ----- every fixture builds the code it means ------------------------------------------------------

@pytest.mark.parametrize("relative", FIXTURE_FILES)
def test_every_fixture_builds_code_that_parses_with_each_change_where_it_names_it(relative):
    fixture = _fixture(relative)
    assert fixture.description, relative
    built = apply_fixture(_solution(_lab_of(relative)), fixture)
    cells = {edit.cell for edit in fixture.edits if edit.action in ("replace", "edit", "prepend", "append")}
    trees = {cell: ast.parse(_cell(built, cell).source) for cell in cells}   # every cell it writes parses
    for edit in fixture.edits:
        node = trees.get(edit.cell)
        for name in edit.definition.split(".") if edit.definition else ():   # the definition it names is there
            node = next(n for n in node.body if getattr(n, "name", None) == name)
        if edit.action == "edit":
            added = [line[1:] for line in edit.text.split("\n") if line.startswith("+")]
            assert set(added) <= set(_cell(built, edit.cell).source.split("\n")), edit.cell
        elif edit.definition:
            assert ast.dump(node) == ast.dump(ast.parse(textwrap.dedent(edit.text)).body[0]), edit.definition
        elif edit.action == "prepend":
            assert _cell(built, edit.cell).source.startswith(edit.text)
        elif edit.action == "replace":
            assert _cell(built, edit.cell).source == edit.text


@pytest.mark.parametrize("relative", [f for f in FIXTURE_FILES if f.startswith("lab01/") and "/red_team/" not in f])
def test_every_lab01_fixture_says_what_it_costs_in_test_cells_of_the_lab(relative):
    fixture = _fixture(relative)
    assert fixture.loses or fixture.reports, relative
    release = _notebooks(LABS[0])[1]
    assert fixture.loses <= {c.metadata.nbgrader["grade_id"] for c in release.cells
                             if c.metadata.get("nbgrader", {}).get("grade")}
