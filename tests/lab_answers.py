"""A student's answers, taken from the solutions: what a lab looks like once some or all parts are written."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lab_notebook(folder: str, lab: str) -> Path:
    """The lab's notebook in ``solutions/`` or ``labs/``."""
    return next((ROOT / folder / lab).glob("*.ipynb"))


def solution_answers(lab: str) -> dict[str, str]:
    """{grade_id: the solution's code} of every answer cell, without nbgrader's markers."""
    cells = json.loads(lab_notebook("solutions", lab).read_text())["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(
        line for line in "".join(c["source"]).splitlines(keepends=True) if "### " not in line)
        for c in cells if c["metadata"].get("nbgrader", {}).get("solution")}


def release_with(lab: str, answers: dict[str, str], path: Path) -> Path:
    """The released lab with the answer cells named in ``answers`` replaced, written to ``path``."""
    release = json.loads(lab_notebook("labs", lab).read_text())
    for cell in release["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(release))
    return path
