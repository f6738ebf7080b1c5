"""nbgrader's Validate agrees with `labutils check`: it never says success on a lab with unwritten parts.

Validate is what the "Validate" button of JupyterLab runs; in the course's JupyterLab
(`make lab`, the hub) JUPYTER_CONFIG_PATH points at labutils/data/jupyter, whose
nbgrader_config.py makes it judge every cell.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lab_answers import release_with, solution_answers

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab02_collectives"


def _validate(notebook: Path) -> str:
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "labutils" / "data" / "jupyter")}
    result = subprocess.run([sys.executable, "-m", "nbgrader", "validate", notebook.name], cwd=notebook.parent,
                            env=env, capture_output=True, text=True, timeout=600)
    return result.stdout + result.stderr


@pytest.mark.slow
def test_validate_fails_an_untouched_lab(tmp_path):
    untouched = tmp_path / "untouched" / f"{LAB}.ipynb"
    untouched.parent.mkdir()
    untouched.write_text((ROOT / "labs" / LAB / f"{LAB}.ipynb").read_text())
    report = _validate(untouched)
    assert "VALIDATION FAILED" in report and "Success" not in report, report[-2000:]
    assert "NotImplementedError" in report


@pytest.mark.slow
def test_validate_passes_a_finished_lab(tmp_path):
    report = _validate(release_with(LAB, solution_answers(LAB), tmp_path / "done" / f"{LAB}.ipynb"))
    assert "Success! Your notebook passes all the tests." in report, report[-2000:]
