"""The instructor's report of a class: who scored what, and what needs a human look.

``write_report(report)`` writes ``reports/<lab>.md`` (to read) and ``reports/<lab>.json`` (to
process) in the course folder and returns their paths; ``summary_lines(report)`` is the
short version ``course grade`` prints.
"""
from __future__ import annotations

import json
import os

#: What nbgrader did with a changed protected cell (tampering kinds x roles).
_REPAIR = {
    ("edited", "test cell"): "restored from the source before grading",
    ("edited", "read-only cell"): "restored from the source before grading",
    ("deleted", "test cell"): "put back and run by the grader",
    ("deleted", "read-only cell"): "put back and run by the grader",
    ("duplicated", "test cell"): "the copies were renamed and not graded",
    ("duplicated", "read-only cell"): "the copies were renamed",
}


def attention_items(outcome) -> list:
    """Lines an instructor should read about one submission (empty when all is well)."""
    items = []
    if outcome.failure:
        items.append(outcome.failure)
    items += [f"{part.cell}: {part.note}" for part in outcome.parts if part.note]
    items += [f"{t}: {_REPAIR.get((t.kind, t.role), '')}" for t in outcome.tampering]
    items += outcome.errors
    items += outcome.suspicious
    return items


#: Marks after a part's score in the summary table.
_MARKS = {"failed": " ✗", "not judged": " ?", "judge error": " !"}


def _score(part) -> str:
    points = "?" if part.points is None else f"{part.points:g}"
    return f"{points}/{part.max_points:g}"


def summary_lines(report) -> list:
    """A table of students and scores (✗ failed, ? never judged, ! judge error), then the
    submissions that need attention."""
    graded = [o for o in report.outcomes if o.parts]  # a refused notebook has none
    cells = [p.cell for p in graded[0].parts] if graded else []
    width = max([len("student")] + [len(o.student) for o in report.outcomes])
    lines = [f"{'student':<{width}}  {'score':>7}  " + "  ".join(cells)]
    for outcome in report.outcomes:
        parts = {p.cell: _score(p) + _MARKS.get(p.status, "") for p in outcome.parts}
        flag = "  !" if attention_items(outcome) else ""
        score = f"{outcome.points:g}/{report.max_points:g}"
        lines.append(f"{outcome.student:<{width}}  {score:>7}  "
                     + "  ".join(f"{parts.get(c, '-'):<{len(c)}}" for c in cells) + flag)
    flagged = [(o.student, attention_items(o)) for o in report.outcomes if attention_items(o)]
    flagged += [(student, [f"no {report.lab} notebook in the folder: not graded"]) for student in report.without_notebook]
    if flagged:
        lines.append("")
        lines.append("needs your attention (!):")
        for student, items in flagged:
            lines += [f"  {student}: {item}" for item in items]
    return lines


def _markdown(report) -> str:
    scores = [o.points for o in report.outcomes]
    mean = sum(scores) / len(scores) if scores else 0.0
    out = [f"# {report.lab}: {len(report.outcomes)} submissions",
           "",
           f"Graded in {report.seconds:.0f} s; mean score {mean:.2f} of {report.max_points:g}. "
           f"Grades: `{report.grades_csv}`; feedback: `{report.feedback_dir}`.",
           "Judged cells are scored by the judge, whatever the notebook shows.",
           "", "```", *summary_lines(report), "```", "", "## Per submission", ""]
    for outcome in report.outcomes:
        out.append(f"### {outcome.student}: {outcome.points:g} of {report.max_points:g} ({outcome.seconds:.0f} s)")
        out.append("")
        for item in attention_items(outcome):
            out.append(f"- **{item}**")
        for part in outcome.parts:
            out.append(f"- {part.cell}: {_score(part)}, {part.status}")
            out += [f"    - {line}" for line in part.lines]
        out.append("")
    return "\n".join(out)


def _json(report) -> dict:
    return {
        "lab": report.lab, "max_points": report.max_points, "seconds": report.seconds,
        "grades_csv": report.grades_csv, "feedback_dir": report.feedback_dir,
        "without_notebook": report.without_notebook,
        "submissions": [{
            "student": o.student, "points": o.points, "seconds": o.seconds, "failure": o.failure,
            "attention": attention_items(o),
            "tampering": [{"cell": t.cell, "kind": t.kind, "role": t.role} for t in o.tampering],
            "errors": o.errors, "suspicious": o.suspicious,
            "parts": [{"cell": p.cell, "points": p.points, "max_points": p.max_points, "status": p.status,
                       "notebook_points": p.notebook_points, "note": p.note, "lines": p.lines} for p in o.parts],
        } for o in report.outcomes],
    }


def write_report(report) -> tuple:
    """Write reports/<lab>.md and reports/<lab>.json in the course folder; return both paths."""
    folder = os.path.join(report.course_dir, "reports")
    os.makedirs(folder, exist_ok=True)
    markdown_path, json_path = (os.path.join(folder, f"{report.lab}.{ext}") for ext in ("md", "json"))
    with open(markdown_path, "w") as f:
        f.write(_markdown(report))
    with open(json_path, "w") as f:
        json.dump(_json(report), f, indent=1, ensure_ascii=False)
    return markdown_path, json_path
