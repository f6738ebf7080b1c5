"""The install is what the README promises: one pin of torch, conda and pip agree."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _environment_pip_requirements() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    reqs = []
    for line in lines[start + 1:]:
        m = re.match(r"^\s+-\s+(.*)$", line)
        if not m:
            break
        reqs.append(m.group(1).strip())
    return reqs


def test_environment_yml_installs_what_pyproject_asks_for():
    project = _pyproject()["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["course"])
    listed = set(_environment_pip_requirements())
    assert "-e ." in listed, "environment.yml must install labutils itself"
    listed.discard("-e .")
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"


def test_torch_is_pinned_exactly_everywhere():
    deps = _pyproject()["project"]["dependencies"]
    assert [d for d in deps if d.startswith("torch")] == ["torch==2.13.0"]
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install -q torch==2.13.0" in makefile
    for extra in _pyproject()["project"]["optional-dependencies"].values():
        assert not [d for d in extra if re.match(r"torch\b", d)], "a second torch requirement could pull another build"


def test_console_scripts_one_per_audience_and_ci_entry_point():
    scripts = _pyproject()["project"]["scripts"]
    assert scripts["labutils"] == "labutils.command.cli:main"  # students
    assert scripts["course"] == "grading.cli:main"  # instructors
    assert set(_pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]) == {"labutils*", "grading*"}
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def _make_dry_run(target: str, tmp_path, uid: str = None) -> list[str]:
    """The commands ``make TARGET`` would run with a fresh .venv (``make -n``; nothing runs)."""
    env = {key: value for key, value in os.environ.items() if key not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    if uid is not None:  # a stand-in `id` that reports this uid
        fake = tmp_path / "bin"
        fake.mkdir(exist_ok=True)
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    out = subprocess.run(["make", "-n", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target, command", [("test", "bin/python -m pytest"), ("nightly", "bin/course nightly")])
def test_make_test_and_nightly_create_the_venv_on_first_use(tmp_path, target, command):
    lines = _make_dry_run(target, tmp_path)
    venv = str(tmp_path / "venv")
    assert lines[0].startswith(f"test -x {venv}/bin/python || ") and lines[0].endswith(f"-m venv {venv}")
    torch_at = next(i for i, line in enumerate(lines) if "pip install -q torch==2.13.0" in line)
    package_at = next(i for i, line in enumerate(lines) if "pip install -q -e '.[course,test]'" in line)
    assert torch_at < package_at, "torch goes first, with its pin, so no resolver picks another build"
    assert command in lines[-1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("uid, allow_root", [("0", True), ("1000", False)])
def test_make_lab_adds_allow_root_only_for_root(tmp_path, uid, allow_root):
    lab = [line for line in _make_dry_run("lab", tmp_path, uid) if "jupyter lab" in line]
    assert len(lab) == 1 and ("--allow-root" in lab[0]) == allow_root
    assert lab[0].endswith("notebooks/00_start_here.ipynb")


def test_notebooks_are_committed_without_outputs():
    import json

    for path in sorted(ROOT.glob("**/*.ipynb")):
        if any(part.startswith(".") or part == "build" for part in path.relative_to(ROOT).parts):
            continue
        cells = json.loads(path.read_text())["cells"]
        dirty = [i for i, c in enumerate(cells) if c.get("outputs") or c.get("execution_count")]
        assert not dirty, f"{path.relative_to(ROOT)}: cells {dirty} have outputs; strip them before committing"


def test_the_course_command_runs_as_a_module_too():
    import sys

    done = subprocess.run([sys.executable, "-m", "grading", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for verb in ("release", "grade", "nightly", "doctor", "bench", "model"):
        assert verb in done.stdout


def _python_sources(*folders: str):
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_code_edits_sys_path_and_labutils_never_imports_the_instructors_package():
    edit = re.compile(r"sys\.path\s*(\.(insert|append|extend)\(|\[[^\]]*\]\s*=)")
    for path in _python_sources("grading", "labutils"):
        assert not edit.search(path.read_text()), f"{path.relative_to(ROOT)} edits sys.path"
    for path in _python_sources("labutils"):
        assert not re.search(r"^\s*(from|import) grading\b", path.read_text(), re.MULTILINE), path
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")) + sorted(ROOT.glob("labs/*/*.ipynb")):
        assert "sys.path" not in path.read_text(), path.relative_to(ROOT)


def test_modules_stay_small():
    import ast

    for path in [*_python_sources("labutils"), *_python_sources("grading")]:
        text = path.read_text()
        assert len(text.splitlines()) <= 500, f"{path.relative_to(ROOT)} has more than 500 lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 60, f"{path.relative_to(ROOT)}: {node.name} has {length} lines"
