"""The students' copy (`course student`): what it holds, and that nothing of the instructors' leaks."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from grading import student_copy
from grading.student_copy import LeakError, build_student_copy, find_leaks, write_archive

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def copy_dir(tmp_path_factory):
    return build_student_copy(tmp_path_factory.mktemp("copy") / "student")


def test_the_copy_holds_chapters_labs_and_labutils_only(copy_dir):
    top = sorted(p.name for p in copy_dir.iterdir())
    assert top == sorted([".students-copy", "Makefile", "README.md", "environment.yml", "labs", "labutils",
                          "notebooks", "pyproject.toml"])
    chapters = sorted(p.name for p in (copy_dir / "notebooks").glob("*.ipynb"))
    assert chapters == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    labs = sorted(p.name for p in (copy_dir / "labs").iterdir())
    assert labs == sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    assert not list(copy_dir.rglob("__pycache__"))


def test_the_copy_installs_labutils_alone(copy_dir):
    project = tomllib.loads((copy_dir / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["labutils*"]
    assert all(target.startswith("labutils") for target in project["project"]["scripts"].values())
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == course["project"]["dependencies"]


def test_labutils_in_the_copy_imports_no_grader(copy_dir):
    modules = sorted(".".join(p.relative_to(copy_dir).with_suffix("").parts)
                     for p in (copy_dir / "labutils").rglob("*.py")
                     if p.name != "__main__.py" and "data" not in p.relative_to(copy_dir).parts)
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "import labutils\nassert labutils.__file__.startswith(sys.argv[1]), labutils.__file__\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grading', 'nbgrader', 'papermill')))\n")
    result = subprocess.run([sys.executable, "-c", code, str(copy_dir)], cwd=copy_dir, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"labutils imports instructors' packages: {result.stdout}"


def test_no_solution_hidden_test_or_grader_text_in_the_copy(copy_dir):
    assert find_leaks(copy_dir) == []
    for notebook in copy_dir.rglob("*.ipynb"):
        text = notebook.read_text()
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, notebook


def _longest_solution(lab: str) -> str:
    """The body of the lab's solution region with the most lines."""
    cells = json.loads(next((ROOT / "solutions" / lab).glob("*.ipynb")).read_text())["cells"]
    bodies = [part.split("### END SOLUTION", 1)[0] for c in cells
              for part in "".join(c["source"]).split("### BEGIN SOLUTION")[1:]]
    return max(bodies, key=lambda body: len(body.splitlines()))


def test_a_pasted_solution_is_found(copy_dir, tmp_path):
    lab = sorted(p.name for p in (copy_dir / "labs").iterdir())[0]
    body = _longest_solution(lab)
    planted = copy_dir / "labutils" / "planted_answer.py"
    planted.write_text(body)
    try:
        leaks = find_leaks(copy_dir)
    finally:
        planted.unlink()
    assert any("planted_answer.py" in leak and "solution" in leak for leak in leaks), leaks


def test_a_grading_folder_or_a_reference_kernel_is_found(copy_dir):
    kernel = sorted((ROOT / "grading" / "reference").glob("*.py"))[-1]
    planted = copy_dir / "labutils" / "kernel_copy.py"
    planted.write_text(kernel.read_text())
    (copy_dir / "grading").mkdir()
    try:
        leaks = find_leaks(copy_dir)
    finally:
        planted.unlink()
        (copy_dir / "grading").rmdir()
    assert "grading: instructors' file" in leaks
    assert any("kernel_copy.py" in leak and "grading/reference" in leak for leak in leaks), leaks


def test_a_dirty_copy_fails_the_build(tmp_path, monkeypatch):
    monkeypatch.setattr(student_copy, "COPIED_FOLDERS", student_copy.COPIED_FOLDERS + ("solutions",))
    with pytest.raises(LeakError, match="solutions"):
        build_student_copy(tmp_path / "student")


def _tried_checkout(tmp_path: Path) -> Path:
    """A copy of the course where chapter 1 was run (outputs) and lab 2 worked on in labs/."""
    root = tmp_path / "course"
    for name in ("notebooks", "labs", "labutils", "solutions", "grading"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("environment.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    chapter = next((root / "notebooks").glob("01_*.ipynb"))
    content = json.loads(chapter.read_text())
    code = next(c for c in content["cells"] if c["cell_type"] == "code")
    code["execution_count"] = 3
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran in the checkout\n"]}]
    chapter.write_text(json.dumps(content, indent=1))
    return root


def test_chapters_run_in_the_checkout_ship_without_outputs(tmp_path):
    root = _tried_checkout(tmp_path)
    copy = build_student_copy(tmp_path / "build" / "student", course_root=root)
    chapter = json.loads(next((copy / "notebooks").glob("01_*.ipynb")).read_text())
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in chapter["cells"] if c["cell_type"] == "code")
    assert "ran in the checkout" not in (copy / "notebooks").joinpath(next((root / "notebooks").glob("01_*.ipynb")).name).read_text()


def test_a_lab_worked_on_in_the_checkout_fails_with_how_to_fix_it(tmp_path):
    root = _tried_checkout(tmp_path)
    solution = json.loads((root / "solutions" / "lab02_collectives" / "lab02_collectives.ipynb").read_text())
    lab = root / "labs" / "lab02_collectives" / "lab02_collectives.ipynb"
    worked = json.loads(lab.read_text())
    worked["cells"] = solution["cells"]
    lab.write_text(json.dumps(worked, indent=1))
    with pytest.raises(LeakError) as error:
        build_student_copy(tmp_path / "build" / "student", course_root=root)
    assert "labs/lab02_collectives" in str(error.value) and "git checkout -- labs/" in str(error.value)


def test_the_build_never_replaces_a_folder_that_is_not_a_copy(tmp_path):
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("...")
    with pytest.raises(ValueError, match="not a students' copy"):
        build_student_copy(precious)
    assert (precious / "chapter1.tex").exists()
    with pytest.raises(ValueError, match="under build/"):
        build_student_copy(ROOT / "notebooks")


def test_the_archive_has_one_top_folder(copy_dir, tmp_path):
    archive = write_archive(copy_dir, tmp_path / "course.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert {name.split("/")[0] for name in names} == {"multigpu-course"}
    assert "multigpu-course/labs" in names and "multigpu-course/README.md" in names


def test_the_command_reports_the_copy_and_the_archive(tmp_path, capsys):
    from grading.cli import main

    assert main(["student", "--out", str(tmp_path / "build" / "student"), "--archive"]) == 0
    out = capsys.readouterr().out
    assert "students' copy:" in out and "archive:" in out
    assert (tmp_path / "build" / "multigpu-course-student.tar.gz").exists()


def test_the_copy_has_the_check_my_lab_button(copy_dir):
    """The copy's `make lab` reads the copy's labutils/data/jupyter, which enables the button's
    server side and holds the prebuilt button: no node, no build, no install step."""
    from test_jupyter_check import button_setup

    config = copy_dir / "labutils" / "data" / "jupyter"
    setup = button_setup([config])
    assert setup["jpserver_extensions"] == {"labutils.command.jupyter_check": True}
    assert setup["labextensions"] == {"labutils-check": config / "labextensions" / "labutils-check"}
    lab = next(line for line in (copy_dir / "Makefile").read_text().splitlines() if "$(BIN)/jupyter lab " in line)
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/labutils/data/jupyter" in lab, lab
