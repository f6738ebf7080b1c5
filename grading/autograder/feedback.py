"""Feedback that never shows hidden tests: a preprocessor for ``nbgrader generate_feedback``.

nbgrader's feedback HTML shows a graded cell's full source, hidden tests included, and the
tracebacks of its errors (which quote that source). ``SanitizeHiddenTests``:

- removes the hidden region from every cell's source;
- replaces a hidden-test cell's outputs with the judge's verdict (from the verdict files
  ``course grade`` writes) or, without one, keeps only its verdict lines ("✓ ...",
  "✗ ...") and a one-line error;
- cuts any other traceback that passes through the grading folder to its last line;
- drops any output that quotes a line of the hidden regions (a submission can print the
  source of the cells that run after its own) or of the grader's files (``GRADER_FOLDERS``:
  the judge's tests and the reference kernels), wherever it was printed, verdicts included;
  lines the student's own cells hold too are not counted (a verdict quotes the student's line).
"""
from __future__ import annotations

import functools
import glob
import json
import os

from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from grading.paths import GRADING_DIR

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
#: Longest error message kept in feedback (characters).
MAX_ERROR_CHARS = 500
#: Hidden lines shorter than this (characters) are too common to be a sign of a leak.
MIN_LEAK_LINE_CHARS = 20
REDACTED = "[output removed from the feedback: it quoted the grader's hidden tests or files]\n"
#: Folders of grading/ whose source must never reach feedback.
GRADER_FOLDERS = ("judge", "reference")


@functools.lru_cache(maxsize=1)
def grader_lines() -> frozenset:
    """Stripped lines of at least ``MIN_LEAK_LINE_CHARS`` characters of every .py in ``GRADER_FOLDERS``."""
    lines = set()
    for folder in GRADER_FOLDERS:
        for path in glob.glob(os.path.join(GRADING_DIR, folder, "*.py")):
            with open(path, encoding="utf-8") as f:
                lines.update(line.strip() for line in f if len(line.strip()) >= MIN_LEAK_LINE_CHARS)
    return frozenset(lines)


def split_hidden_region(source: str) -> tuple[str, list]:
    """(source without its BEGIN/END HIDDEN TESTS regions, the lines those regions held)."""
    kept, hidden, inside = [], [], False
    for line in source.split("\n"):
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        elif inside:
            hidden.append(line)
        else:
            kept.append(line)
    return "\n".join(kept).rstrip("\n"), hidden


def _output_text(output) -> str:
    if output.output_type == "stream":
        return output.get("text", "")
    if output.output_type == "error":
        return output.get("evalue", "") + "\n".join(output.get("traceback", []))
    return str(output.get("data", {}).get("text/plain", ""))


def _one_line_error(output):
    evalue = output.get("evalue", "")[:MAX_ERROR_CHARS]
    return new_output("error", ename=output.get("ename", "Error"), evalue=evalue,
                      traceback=[f"{output.get('ename', 'Error')}: {evalue}"])


def _verdict_text(verdict: dict) -> str:
    return "\n".join(verdict.get("lines", []) + ([verdict["note"]] if verdict.get("note") else [])) + "\n"


def _verdict_lines_only(outputs) -> list:
    """A hidden-test cell's outputs without a judge verdict file: its ✓/✗ lines and errors, one line each."""
    kept = []
    for output in outputs:
        if output.output_type == "error":
            kept.append(_one_line_error(output))
        elif output.output_type == "stream" and output.name == "stdout":
            lines = [line for line in output.text.splitlines() if line.startswith(("✓ ", "✗ "))]
            if lines:
                kept.append(new_output("stream", name="stdout", text="\n".join(lines) + "\n"))
    return kept


class SanitizeHiddenTests(NbGraderPreprocessor):
    """Hide hidden tests in feedback; show the judge's verdict in their place."""

    verdicts_dir = Unicode("", help="folder of <assignment>/<student>.json verdicts written by course grade").tag(config=True)

    def preprocess(self, nb, resources):
        self._verdicts = {}
        info = resources.get("nbgrader", {})
        path = os.path.join(self.verdicts_dir, info.get("assignment", ""), f"{info.get('student', '')}.json")
        if self.verdicts_dir and os.path.exists(path):
            with open(path) as f:
                self._verdicts = json.load(f)
        self._hidden_lines, own = set(), set()
        for cell in nb.cells:
            visible, hidden = split_hidden_region(cell.source)
            self._hidden_lines.update(line.strip() for line in hidden if len(line.strip()) >= MIN_LEAK_LINE_CHARS)
            own.update(line.strip() for line in visible.splitlines())
        self._hidden_lines |= grader_lines() - own
        return super().preprocess(nb, resources)

    def _quotes_hidden_tests(self, output) -> bool:
        text = _output_text(output)
        return any(line in text for line in self._hidden_lines)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        cell.source, hidden = split_hidden_region(cell.source)
        if hidden and utils.is_grade(cell):
            verdict = self._verdicts.get(cell.metadata.nbgrader["grade_id"])
            outputs = ([new_output("stream", name="stdout", text=_verdict_text(verdict))] if verdict is not None
                       else _verdict_lines_only(cell.outputs))
        else:
            outputs = [_one_line_error(o) if o.output_type == "error" and GRADING_DIR in "".join(o.get("traceback", []))
                       else o for o in cell.outputs]
        cell.outputs = [new_output("stream", name="stdout", text=REDACTED) if self._quotes_hidden_tests(o) else o
                        for o in outputs]
        return cell, resources
