"""Feedback that never shows hidden tests: a preprocessor for ``nbgrader generate_feedback``.

nbgrader's feedback HTML shows a graded cell's full source, hidden tests included, and the
tracebacks of its errors (which quote that source). ``SanitizeHiddenTests``:

- removes the hidden region from every cell's source;
- replaces a hidden-test cell's outputs with the judge's verdict (from the verdict files
  ``course grade`` writes) or, without one, keeps only its verdict lines ("✓ ...",
  "✗ ...") and a one-line error;
- cuts any other traceback that passes through the grading folder to its last line;
- puts the grader's notices first (``STUDENT.notices.json`` beside the verdicts: a helper file handed in
  beside the notebook, repaired nbgrader metadata), so the student learns what to change;
- drops any output that quotes a line of the hidden regions (a submission can print the
  source of the cells that run after its own) or of the grader's files (``GRADER_FOLDERS``:
  the judge's tests and the reference kernels), wherever it was printed (stdout, stderr, an
  error, any type of display data, HTML as rendered), verdicts included;
  lines the student's own cells hold too are not counted (a verdict quotes the student's line);
- shortens the grading folder's path to "grading" wherever an output names it;
- keeps every cell's outputs within ``output_bounds`` first, and finds quoted lines in time linear in
  the output's length (``LeakFinder``), so a notebook's output bombs cost its own page little time.

The page itself (``feedback_template/feedback``, nbgrader's feedback template extended) loads nothing from
the network: ``offline_mathjax`` puts MathJax 3 (the npm package ``make site`` installs under
``build/mathjax/``, or ``$COURSE_MATHJAX``) inside the page instead of nbgrader's CDN script, and
``part_titles`` names each entry of the table of contents after its part ("Part 1: ...") where
nbgrader writes "Test cell" and "Comment".
"""
from __future__ import annotations

import functools
import glob
import html
import json
import os
import re

from nbconvert import HTMLExporter
from nbformat.v4 import new_markdown_cell, new_output
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode, default

from grading.autograder.output_bounds import OutputBudget, bound_outputs
from grading.paths import COURSE_ROOT, GRADING_DIR

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


_TAG = re.compile(r"<[^>]*>")


class LeakFinder:
    """Whether a text contains one of many lines (each at least ``MIN_LEAK_LINE_CHARS`` long), in time
    linear in the text: every occurrence of a line covers one position that is a multiple of ``STEP``,
    where the ``STEP`` characters starting there are one of the line's first ``STEP`` windows."""

    STEP = MIN_LEAK_LINE_CHARS // 2

    def __init__(self, lines):
        self._windows: dict = {}
        for line in lines:
            if len(line) >= 2 * self.STEP:
                for offset in range(self.STEP):
                    self._windows.setdefault(line[offset:offset + self.STEP], []).append((offset, line))

    def found_in(self, text: str) -> bool:
        for position in range(0, len(text), self.STEP):
            for offset, line in self._windows.get(text[position:position + self.STEP], ()):
                if position >= offset and text.startswith(line, position - offset):
                    return True
        return False


def _strings(value) -> list:
    """Every string inside ``value`` (display data: a dict of strings, lists, JSON objects)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _output_text(output) -> str:
    """Every text an output shows, in every form it may be rendered: each of its data's types
    (text/plain, HTML, Markdown, JSON, SVG...), and HTML as a browser reads it (entities decoded,
    tags dropped)."""
    if output.output_type == "stream":
        text = output.get("text", "")
    elif output.output_type == "error":
        text = output.get("evalue", "") + "\n".join(output.get("traceback", []))
    else:
        text = "\n".join(_strings(output.get("data", {})))
    readable = html.unescape(text)
    return "\n".join((text, readable, _TAG.sub("", readable)))


def _without_grader_paths(output, folders: tuple = ()):
    """``output`` with each of ``folders`` (``(path, shown as)``, the course folder of the grading run)
    and the grading folder's path (in a stack a submission printed) shortened: the feedback does not
    say where the grader lives."""
    names = (*folders, (GRADING_DIR, "grading"), (COURSE_ROOT, "course"))

    def shorten(value):
        if isinstance(value, str):
            for path, shown in names:
                value = value.replace(path, shown)
            return value
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    for key in ("text", "evalue", "traceback"):
        if key in output:
            output[key] = shorten(output[key])
    for kind, value in output.get("data", {}).items():
        output["data"][kind] = shorten(value)
    return output


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


def _read_json(path: str, missing):
    """The JSON in ``path``, or ``missing`` when there is no such file."""
    if not os.path.exists(path):
        return missing
    with open(path) as f:
        return json.load(f)


class SanitizeHiddenTests(NbGraderPreprocessor):
    """Hide hidden tests in feedback; show the judge's verdict in their place."""

    verdicts_dir = Unicode("", help="folder of <assignment>/<student>.json verdicts (and .notices.json) written by course grade").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        stem = os.path.join(self.verdicts_dir, info.get("assignment", ""), info.get("student", ""))
        self._verdicts, notices = (_read_json(f"{stem}{suffix}", empty) if self.verdicts_dir else empty
                                   for suffix, empty in ((".json", {}), (".notices.json", [])))
        self._hidden_lines, own = set(), set()
        for cell in nb.cells:
            visible, hidden = split_hidden_region(cell.source)
            self._hidden_lines.update(line.strip() for line in hidden if len(line.strip()) >= MIN_LEAK_LINE_CHARS)
            own.update(line.strip() for line in visible.splitlines())
        self._hidden_lines |= grader_lines() - own
        self._leaks, self._budget = LeakFinder(self._hidden_lines), OutputBudget()
        nb, resources = super().preprocess(nb, resources)
        if notices:
            nb.cells.insert(0, new_markdown_cell("**From the grader:**\n\n" + "\n".join(f"- {line}" for line in notices)))
        return nb, resources

    def _quotes_hidden_tests(self, output) -> bool:
        return self._leaks.found_in(_output_text(output))

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        cell.outputs = bound_outputs(cell.outputs, self._budget)
        cell.source, hidden = split_hidden_region(cell.source)
        if hidden and utils.is_grade(cell):
            verdict = self._verdicts.get(cell.metadata.nbgrader["grade_id"])
            outputs = ([new_output("stream", name="stdout", text=_verdict_text(verdict))] if verdict is not None
                       else _verdict_lines_only(cell.outputs))
        else:
            outputs = [_one_line_error(o) if o.output_type == "error" and GRADING_DIR in "".join(o.get("traceback", []))
                       else o for o in cell.outputs]
        course = ((os.path.dirname(os.path.abspath(self.verdicts_dir)), "COURSE"),) if self.verdicts_dir else ()
        cell.outputs = [new_output("stream", name="stdout", text=REDACTED) if self._quotes_hidden_tests(o)
                        else _without_grader_paths(o, course) for o in outputs]
        return cell, resources


#: The folder holding the course's ``feedback`` template, found before nbgrader's of the same name
#: (nbgrader's API always asks for ``feedback``), which it extends.
FEEDBACK_TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "feedback_template")
#: MathJax 3's TeX-to-SVG bundle, as ``make site`` installs it; ``$COURSE_MATHJAX`` names another.
MATHJAX_BUNDLE = os.path.join(COURSE_ROOT, "build", "mathjax", "node_modules", "mathjax", "es5", "tex-svg.js")
_CDN_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
_MATHJAX_CONFIG = ("window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], processEscapes: true, "
                   "processEnvironments: true}, svg: {fontCache: 'global'}, options: {enableMenu: false}};")


def _nbgrader_templates() -> str:
    import nbgrader

    return os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")


class FeedbackPage(HTMLExporter):
    """nbconvert's HTMLExporter that also finds nbgrader's templates by name (the course's template
    extends ``feedback/index.html.j2``)."""

    @default("template_paths")
    def _template_paths(self, prune=True, root_dirs=None):
        return [*super()._template_paths(prune=prune, root_dirs=root_dirs), _nbgrader_templates()]


def configure_feedback_page(c) -> None:
    """Point nbgrader's GenerateFeedback at the course's template and its two filters."""
    c.GenerateFeedback.exporter_class = FeedbackPage
    c.HTMLExporter.template_name = "feedback"
    c.HTMLExporter.extra_template_basedirs = [FEEDBACK_TEMPLATE_DIR, _nbgrader_templates()]
    c.HTMLExporter.filters = {"offline_mathjax": offline_mathjax, "part_titles": part_titles}


def offline_mathjax(head: str) -> str:
    """The page's head with nbgrader's CDN MathJax replaced by MathJax 3 inside the page; without the
    bundle (``make site`` not run), a comment saying how to get it, and formulas stay as TeX."""
    bundle = os.environ.get("COURSE_MATHJAX") or MATHJAX_BUNDLE
    try:
        with open(bundle) as f:
            code = f.read().replace("</script", "<\\/script")
        script = f"<script>{_MATHJAX_CONFIG}</script>\n<script>{code}</script>"
    except OSError:
        script = f"<!-- no MathJax at {html.escape(bundle)}: `make site` installs it (npm mathjax@3) -->"
    return _CDN_MATHJAX.sub(lambda _: script, head)


def part_title(cell) -> str:
    """A graded cell's part, from its first line when that is a comment ("# Part 1: ..."), else its id."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    first = (cell.get("source") or "").lstrip().splitlines()[:1]
    if first and first[0].startswith("#"):
        return first[0].lstrip("#").strip()
    return meta.get("grade_id", "")


def part_titles(body: str, nb) -> str:
    """nbgrader's table of contents with each "Test cell" and "Comment" entry named after its part."""
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if not grade_id:
            continue
        title = html.escape(part_title(cell))
        anchor = re.escape(html.escape(grade_id, quote=True))
        body = re.sub(rf'(<a href="#{anchor}">)Test cell(</a>)', lambda m: f"{m.group(1)}{title}{m.group(2)}", body)
        body = re.sub(rf'(<a href="#comment-{anchor}">)Comment(</a>)',
                      lambda m: f"{m.group(1)}Comment on {title}{m.group(2)}", body)
    return body
