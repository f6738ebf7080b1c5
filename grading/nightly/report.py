"""The nightly run's results and the files it writes: results.json, report.md, report.html, junit.xml.

    from grading.nightly.report import NightlyRun, write_reports
    write_reports(run, out_dir)        # the four files, durations compared with earlier runs

One :class:`Result` per row: an executed notebook, or one nbgrader check of a lab (its
solution must score full marks, its released version zero). Durations are in seconds.
``results.json`` is what a later run reads to compare durations
(:func:`previous_durations`): each row against the latest earlier run next to this one that has it.
"""
from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASSED = "passed"
FAILED = "failed"
TIMED_OUT = "timed out"
STATUSES = (PASSED, FAILED, TIMED_OUT)

#: group -> section title, in report order
GROUPS = {
    "chapters": "Chapters (notebooks/)",
    "solutions": "Lab solutions (solutions/)",
    "other": "Other notebooks",
    "grading": "Labs graded with nbgrader",
}
RESULTS_FILE = "results.json"
NO_LABS = "no labs found"
#: a change of duration larger than this fraction of the previous one, and than
#: :data:`DURATION_CHANGE_MIN_S` seconds, is flagged (smaller ones are the noise of a busy machine)
DURATION_CHANGE_FLAG = 0.25
DURATION_CHANGE_MIN_S = 3.0


@dataclass
class Result:
    """One row of the report.

    ``cell`` is the 1-based position of the failing (or, after a timeout, the running) cell
    among the cells of the source notebook, markdown cells included; ``execution_count``
    is the ``In [n]`` the executed notebook shows for it. ``executed`` is the executed
    notebook's path relative to the run folder. ``score`` is ``(points, max_points)`` for
    grading rows. ``started`` is when the row's task began (ISO 8601, local time, microseconds).
    """

    name: str
    group: str
    status: str
    duration_s: float
    error: str = ""
    traceback: str = ""
    cell: int | None = None
    execution_count: int | None = None
    excerpt: str = ""
    executed: str | None = None
    log: str | None = None
    score: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)
    previous_duration_s: float | None = None
    started: str | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")

    @property
    def ok(self) -> bool:
        return self.status == PASSED


@dataclass
class NightlyRun:
    """Everything the report shows: the settings, the environment, every result (in the order shown).

    ``started`` is local time, ISO 8601; ``settings`` maps a name (QUICK, WORLD_SIZE, ...)
    to its value; ``environment`` is :func:`labutils.command.doctor.environment`'s dict;
    ``labs_note`` is :data:`NO_LABS` when there was no lab to grade.
    """

    started: str
    duration_s: float
    settings: dict
    environment: dict
    results: list[Result]
    labs_note: str | None = None
    previous_run: str | None = None
    interrupted: bool = False
    #: the website (``course nightly --site``): its index relative to the run folder, and what it shows
    site_link: str | None = None
    site_note: str | None = None

    @property
    def failures(self) -> list[Result]:
        return [result for result in self.results if not result.ok]


# ---------------------------------------------------------------- results.json and earlier runs


def write_results_json(run: NightlyRun, out_dir: Path) -> Path:
    path = Path(out_dir) / RESULTS_FILE
    path.write_text(json.dumps(asdict(run), indent=2, default=str) + "\n")
    return path


def previous_durations(out_dir: Path, started: str) -> tuple[str | None, dict[str, float]]:
    """(the latest earlier run's folder name, {row name: seconds in the latest earlier run that has it}).

    Earlier runs are the sibling folders of ``out_dir`` whose readable ``results.json`` says
    they started before ``started`` (ISO 8601); a run of a few notebooks does not hide the
    durations of the others. (None, {}) when there is none.
    """
    out_dir = Path(out_dir).resolve()
    runs = []
    for sibling in out_dir.parent.iterdir() if out_dir.parent.is_dir() else ():
        if sibling == out_dir or not (sibling / RESULTS_FILE).is_file():
            continue
        try:
            data = json.loads((sibling / RESULTS_FILE).read_text())
            runs.append((str(data["started"]), sibling.name,
                         {row["name"]: float(row["duration_s"]) for row in data["results"]}))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a run folder, or one from an incompatible version
    earlier = sorted((run for run in runs if run[0] < started), reverse=True)
    durations: dict[str, float] = {}
    for _started, _name, run_durations in reversed(earlier):  # oldest first: later runs overwrite
        durations.update(run_durations)
    return (earlier[0][1] if earlier else None), durations


def attach_previous_durations(run: NightlyRun, out_dir: Path) -> None:
    """Fill ``run.previous_run`` and each result's ``previous_duration_s`` from the earlier runs."""
    run.previous_run, durations = previous_durations(out_dir, run.started)
    for result in run.results:
        result.previous_duration_s = durations.get(result.name)


def duration_change(result: Result) -> str:
    """'+3.2 s (+40%)' against the previous run, ' !' appended when :func:`duration_flagged`."""
    if result.previous_duration_s is None:
        return ""
    delta = result.duration_s - result.previous_duration_s
    if result.previous_duration_s <= 0:
        return f"{delta:+.1f} s"
    flag = " !" if duration_flagged(result) else ""
    return f"{delta:+.1f} s ({delta / result.previous_duration_s:+.0%}){flag}"


def duration_flagged(result: Result) -> bool:
    """Whether the duration changed by more than :data:`DURATION_CHANGE_FLAG` and :data:`DURATION_CHANGE_MIN_S`."""
    if result.previous_duration_s is None or result.previous_duration_s <= 0:
        return False
    delta = abs(result.duration_s - result.previous_duration_s)
    return delta > DURATION_CHANGE_MIN_S and delta / result.previous_duration_s > DURATION_CHANGE_FLAG


# ---------------------------------------------------------------- shared wording


def summary_line(run: NightlyRun) -> str:
    """'3 of 5 passed, 2 failed (1 timed out) in 42.1 s'."""
    total, failures = len(run.results), run.failures
    timed_out = sum(result.status == TIMED_OUT for result in failures)
    text = f"{total - len(failures)} of {total} passed"
    if failures:
        text += f", {len(failures)} failed" + (f" ({timed_out} timed out)" if timed_out else "")
    text += f" in {run.duration_s:.1f} s"
    return text + (" (interrupted)" if run.interrupted else "")


def settings_line(run: NightlyRun) -> str:
    return ", ".join(f"{name}={value}" for name, value in run.settings.items())


def failure_line(result: Result) -> str:
    """'notebooks/a.ipynb: failed at cell 4 (In [3]): ValueError: ...', one line per failure."""
    where = f" at {where_text(result)}" if result.cell else ""
    return f"{result.name}: {result.status}{where}" + (f": {result.error}" if result.error else "")


def where_text(result: Result) -> str:
    """'cell 4 (In [3])', 'cell 4', or '' when no cell is known."""
    if result.cell is None:
        return ""
    return f"cell {result.cell}" + (f" (In [{result.execution_count}])" if result.execution_count else "")


def score_text(result: Result) -> str:
    return "" if result.score is None else f"{result.score[0]:g} / {result.score[1]:g}"


def _grouped(run: NightlyRun):
    for group, title in GROUPS.items():
        rows = [result for result in run.results if result.group == group]
        if rows or (group == "grading" and run.labs_note):
            yield group, title, rows


def table_columns(group: str) -> list[str]:
    """The column titles of a group's table (the grading table has a score, the others a failing cell)."""
    if group == "grading":
        return ["Lab", "Status", "Score", "Duration (s)", "Previous (s)", "Change", "Error"]
    return ["Notebook", "Status", "Duration (s)", "Previous (s)", "Change", "Failing cell", "Error"]


def table_row(result: Result) -> list[str]:
    """A result's cells as text, in the order of :func:`table_columns` (name and status first)."""
    previous = "" if result.previous_duration_s is None else f"{result.previous_duration_s:.1f}"
    timing = [f"{result.duration_s:.1f}", previous, duration_change(result)]
    if result.group == "grading":
        return [result.name, result.status, score_text(result), *timing, result.error]
    return [result.name, result.status, *timing, where_text(result), result.error]


def _failures_in_report_order(run: NightlyRun) -> list[Result]:
    return [row for _group, _title, rows in _grouped(run) for row in rows if not row.ok]


def _environment_text(environment: dict) -> str:
    from labutils.command.doctor import environment_text

    if "error" in environment:
        return f"could not be collected: {environment['error']}"
    return environment_text(environment)


# ---------------------------------------------------------------- report.md


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_report(run: NightlyRun) -> str:
    """The report as Markdown: summary and one line per failure, environment, one table per group, then
    each failure in detail."""
    lines = [f"# Nightly run {run.started}", "", f"**{summary_line(run)}**", ""]
    if run.failures:  # what broke, before anything else: the details are under "Failures" below
        lines += [f"- {_md_cell(failure_line(row))}" for row in _failures_in_report_order(run)] + [""]
    lines += [f"Settings: {settings_line(run)}", ""]
    if run.site_link or run.site_note:
        link = f"[{run.site_link}]({run.site_link})" if run.site_link else ""
        lines += [f"Website: {link}" + (f" ({run.site_note})" if run.site_note else ""), ""]
    lines += [f"Durations compared with earlier runs (latest: `{run.previous_run}`)." if run.previous_run
              else "No previous run to compare durations with.", ""]
    lines += ["## Environment", "", "```text", _environment_text(run.environment), "```", ""]
    for group, title, rows in _grouped(run):
        lines += [f"## {title}", ""]
        if group == "grading" and not rows:
            lines += [run.labs_note, ""]
            continue
        columns = table_columns(group)
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in rows:
            name, status, *rest = table_row(row)
            name = f"[{name}]({row.executed})" if row.executed else name
            cells = [name, status if row.ok else status.upper(), *rest]
            lines.append("| " + " | ".join(_md_cell(cell) for cell in cells) + " |")
        lines.append("")
    if run.failures:
        lines += ["## Failures", ""]
        for row in _failures_in_report_order(run):
            lines += [f"### {row.name}: {row.status}" + (f" at {where_text(row)}" if row.cell else ""), ""]
            if row.executed:
                lines += [f"Executed notebook: [{row.executed}]({row.executed})", ""]
            if row.log:
                lines += [f"Log: [{row.log}]({row.log})", ""]
            if row.excerpt:
                lines += ["```python", row.excerpt, "```", ""]
            lines += [f"Error: `{row.error}`" if "`" not in row.error else f"Error: {row.error}", ""]
            lines += [f"- {note}" for note in row.notes] + ([""] if row.notes else [])
    notes = [(row.name, note) for row in run.results if row.ok for note in row.notes]
    if notes:
        lines += ["## Notes", ""] + [f"- {name}: {note}" for name, note in notes] + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------- report.html

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
.passed { color: #146c2e; } .failed, .timed-out { color: #b3261e; font-weight: bold; }
.flagged { font-weight: bold; } ul.failures { color: #b3261e; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; }
"""


def _h(text) -> str:
    return html.escape(str(text))


def html_report(run: NightlyRun) -> str:
    """The report as one self-contained HTML page (same content as :func:`markdown_report`)."""
    out = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8">', f"<title>Nightly run {_h(run.started)}</title>",
           f"<style>{_STYLE}</style></head><body>", f"<h1>Nightly run {_h(run.started)}</h1>",
           f"<p><strong>{_h(summary_line(run))}</strong></p>"]
    if run.failures:  # what broke, before anything else, each linked to its details
        out.append('<ul class="failures">' + "".join(
            f'<li><a href="#{_anchor(row)}">{_h(row.name)}</a>{_h(failure_line(row)[len(row.name):])}</li>'
            for row in _failures_in_report_order(run)) + "</ul>")
    if run.site_link or run.site_note:
        link = f'<a href="{_h(run.site_link)}">the course website</a>' if run.site_link else ""
        out.append(f"<p>Website: {link}" + (f" ({_h(run.site_note)})" if run.site_note else "") + "</p>")
    out += [f"<p>Settings: {_h(settings_line(run))}</p>",
            f"<p>Durations compared with earlier runs (latest: <code>{_h(run.previous_run)}</code>).</p>"
            if run.previous_run else "<p>No previous run to compare durations with.</p>",
            "<h2>Environment</h2>", f"<pre>{_h(_environment_text(run.environment))}</pre>"]
    for group, title, rows in _grouped(run):
        out.append(f"<h2>{_h(title)}</h2>")
        if group == "grading" and not rows:
            out.append(f"<p>{_h(run.labs_note)}</p>")
            continue
        out.append("<table><tr>" + "".join(f"<th>{_h(title)}</th>" for title in table_columns(group)) + "</tr>")
        for row in rows:
            name, status, *rest = table_row(row)
            target = row.executed if row.ok else f"#{_anchor(row)}"  # a failure links to its details
            name = f'<a href="{_h(target)}">{_h(name)}</a>' if target else _h(name)
            cells = [f"<td>{name}</td>", f'<td class="{status.replace(" ", "-")}">{_h(status)}</td>']
            cells += [f'<td class="flagged">{_h(cell)}</td>' if column == "Change" and duration_flagged(row)
                      else f"<td>{_h(cell)}</td>" for column, cell in zip(table_columns(group)[2:], rest)]
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
    if run.failures:
        out.append("<h2>Failures</h2>")
        for row in _failures_in_report_order(run):
            where = f" at {where_text(row)}" if row.cell else ""
            out.append(f'<h3 id="{_anchor(row)}">{_h(row.name)}: {_h(row.status)}{_h(where)}</h3>')
            links = [f'<a href="{_h(row.executed)}">executed notebook</a>'] if row.executed else []
            links += [f'<a href="{_h(row.log)}">log</a>'] if row.log else []
            if links:
                out.append("<p>" + " · ".join(links) + "</p>")
            if row.excerpt:
                out.append(f"<pre>{_h(row.excerpt)}</pre>")
            out.append(f"<p>Error: <code>{_h(row.error)}</code></p>")
            if row.notes:
                out.append("<ul>" + "".join(f"<li>{_h(note)}</li>" for note in row.notes) + "</ul>")
            if row.traceback:
                out.append(f"<details><summary>traceback</summary><pre>{_h(row.traceback)}</pre></details>")
    notes = [(row.name, note) for row in run.results if row.ok for note in row.notes]
    if notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_h(n)}: {_h(t)}</li>" for n, t in notes) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def _anchor(result: Result) -> str:
    return "fail-" + "".join(ch if ch.isalnum() else "-" for ch in result.name)


# ---------------------------------------------------------------- junit.xml


def junit_xml(run: NightlyRun) -> str:
    """JUnit XML for CI systems: one <testsuite> per group, one <testcase> per row, time in seconds."""
    suites = ElementTree.Element("testsuites", name="course nightly", tests=str(len(run.results)),
                                 failures=str(len(run.failures)), errors="0", time=f"{run.duration_s:.3f}")
    for group, _title, rows in _grouped(run):
        if not rows:
            continue
        failed = [row for row in rows if not row.ok]
        suite = ElementTree.SubElement(suites, "testsuite", name=group, tests=str(len(rows)),
                                       failures=str(len(failed)), errors="0", skipped="0",
                                       time=f"{sum(row.duration_s for row in rows):.3f}", timestamp=run.started)
        for row in rows:
            case = ElementTree.SubElement(suite, "testcase", classname=f"nightly.{group}", name=row.name,
                                          time=f"{row.duration_s:.3f}")
            if not row.ok:
                where = f" at {where_text(row)}" if row.cell else ""
                failure = ElementTree.SubElement(case, "failure", type=row.status,
                                                 message=f"{row.status}{where}: {row.error}")
                failure.text = "\n\n".join(part for part in (row.excerpt, row.traceback or row.error) if part)
            if row.executed or row.log:
                output = ElementTree.SubElement(case, "system-out")
                output.text = "\n".join(f"{label}: {path}" for label, path in
                                        (("executed notebook", row.executed), ("log", row.log)) if path)
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


def write_reports(run: NightlyRun, out_dir: Path) -> dict[str, Path]:
    """Compare durations with earlier runs, then write results.json, report.md, report.html, junit.xml."""
    out_dir = Path(out_dir)
    attach_previous_durations(run, out_dir)
    paths = {"results": write_results_json(run, out_dir)}
    for key, filename, render in (("markdown", "report.md", markdown_report), ("html", "report.html", html_report),
                                  ("junit", "junit.xml", junit_xml)):
        paths[key] = out_dir / filename
        paths[key].write_text(render(run))
    return paths
