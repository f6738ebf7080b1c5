"""What a handed-in notebook is, before anything reads it with nbformat: one bad file costs its owner only.

A file that cannot be read, is not JSON (truncated, damaged), has more cells than a lab could need, or
that nbformat's schema refuses is not graded: it scores zero, its owner's feedback page says why, and
the attention report has a line. The outputs a notebook was handed in with are dropped (the grader
runs every cell itself, and nbgrader would clear them anyway), so 50 MB of them, or a display nested
600 levels deep, cost nothing further.

    verdict = screen_notebook(path)      # rewrites the file without its outputs when it is usable
    if verdict.refused: ...              # verdict.lines: what the report and the feedback say
"""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field

import nbformat

#: Largest notebook file read, in bytes.
MAX_NOTEBOOK_BYTES = 100 * 2**20
#: Most cells a graded notebook may have (the labs have under 100).
MAX_CELLS = 5000
#: Bytes of handed-in outputs worth a line in the report when dropped.
NOTABLE_OUTPUT_BYTES = 2**20


@dataclass
class Screening:
    """What ``screen_notebook`` found: ``refused`` (not graded) and the report's ``lines``."""

    refused: bool = False
    lines: list = field(default_factory=list)


def _refused(name: str, why: str) -> Screening:
    return Screening(True, [f"{name} {why}: not graded (scores zero)"])


def _load(path: str):
    """The notebook's JSON, or a Screening that refuses it."""
    name = os.path.basename(path)
    try:
        if not os.path.isfile(path):
            return _refused(name, "is not a regular file")
        if os.path.getsize(path) > MAX_NOTEBOOK_BYTES:
            return _refused(name, f"is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return _refused(name, f"could not be read ({exc.strerror or exc})")
    try:
        return json.loads(data.decode("utf-8")), len(data)
    except UnicodeDecodeError:
        return _refused(name, "is not UTF-8 text (a notebook is JSON)")
    except (ValueError, RecursionError) as exc:
        return _refused(name, f"is not JSON, maybe truncated or damaged ({str(exc)[:120]})")


def _drop_outputs(content: dict) -> int:
    """Empty the outputs of every code cell of a version-4 notebook's JSON; the bytes they held."""
    dropped = 0
    for cell in content.get("cells", []) if isinstance(content.get("cells"), list) else []:
        if isinstance(cell, dict) and cell.get("outputs"):
            dropped += len(json.dumps(cell["outputs"]))
            cell["outputs"] = []
        if isinstance(cell, dict) and "execution_count" in cell:
            cell["execution_count"] = None
    return dropped


def screen_notebook(path: str) -> Screening:
    """Screen the notebook at ``path``; a usable one is rewritten without its outputs (valid nbformat 4)."""
    name = os.path.basename(path)
    loaded = _load(path)
    if isinstance(loaded, Screening):
        return loaded
    content, size = loaded
    if not isinstance(content, dict):
        return _refused(name, "is JSON but not a notebook")
    cells = content.get("cells", content.get("worksheets", []))
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        return _refused(name, f"has {len(cells)} cells, more than {MAX_CELLS}")
    dropped = _drop_outputs(content)
    try:
        notebook = nbformat.reads(json.dumps(content), as_version=4)
        nbformat.validate(notebook)
    except Exception as exc:  # nbformat raises many kinds for a notebook its schema refuses
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _refused(name, f"is not a valid notebook ({first[:160]})")
    nbformat.write(notebook, path)
    screening = Screening()
    if dropped >= NOTABLE_OUTPUT_BYTES:
        screening.lines.append(f"{name} was handed in with {dropped / 2**20:.1f} MiB of outputs: dropped "
                               f"(the grader runs every cell itself)")
    return screening


def refusal_page(lab: str, lines: list) -> str:
    """The feedback page of a submission that was not graded: what was wrong, and what to do."""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(lab)}</title></head><body>"
            f"<h1>{html.escape(lab)}: not graded</h1><p>The grader could not use what you handed in:</p>"
            f"<ul>{items}</ul><p>Open the notebook in JupyterLab, save it, and hand it in again.</p></body></html>\n")


def screen_submissions(course_dir: str, lab: str, students: list, notebooks: list) -> dict:
    """{student: Screening} of every submission copied into ``course_dir`` (``submitted/STUDENT/LAB``):
    a student with one unusable notebook is refused whole."""
    screenings = {}
    for student in students:
        screening = Screening()
        for name in notebooks:
            path = os.path.join(course_dir, "submitted", student, lab, name)
            found = screen_notebook(path) if os.path.lexists(path) else _refused(name, "could not be read")
            screening.refused |= found.refused
            screening.lines += found.lines
        screenings[student] = screening
    return screenings


def record_refused(course_dir: str, lab: str, refused: dict, notebooks: list) -> None:
    """Each refused student (``{student: report lines}``) in the gradebook of ``course_dir`` (a zero in
    grades.csv), with a feedback page per notebook saying why."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{os.path.join(course_dir, 'gradebook.db')}") as gradebook:
        for student in refused:
            gradebook.update_or_create_student(student)
    for student, lines in refused.items():
        folder = os.path.join(course_dir, "feedback", student, lab)
        os.makedirs(folder, exist_ok=True)
        for name in notebooks:
            with open(os.path.join(folder, name[:-len(".ipynb")] + ".html"), "w") as f:
                f.write(refusal_page(lab, lines))
