"""The install is what the README promises: one pin of torch, conda and pip agree."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

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


def test_console_script_and_ci_entry_point():
    assert _pyproject()["project"]["scripts"]["labutils"] == "labutils.cli:main"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_notebooks_are_committed_without_outputs():
    import json

    for path in sorted(ROOT.glob("**/*.ipynb")):
        if any(part.startswith(".") or part == "build" for part in path.relative_to(ROOT).parts):
            continue
        cells = json.loads(path.read_text())["cells"]
        dirty = [i for i, c in enumerate(cells) if c.get("outputs") or c.get("execution_count")]
        assert not dirty, f"{path.relative_to(ROOT)}: cells {dirty} have outputs; strip them before committing"
