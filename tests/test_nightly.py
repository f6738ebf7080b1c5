"""course nightly: the runner on small synthetic notebooks, and what its reports say.

One full run (module fixture, through the command line, with relative --root and --out as
a user types them) executes tests/nightly_fixtures/ copied into a throwaway course: a
passing, a failing, a hanging (short cell timeout) and a parameter-less notebook, one tiny
nbgrader lab (solution and release) and one broken lab (its solution loses points to a line
on stderr and has a cell that raises, its release passes a test without student code). The
labs' solutions are executed by nbgrader alone, with the run's parameters injected. The tests then assert the
contents of results.json, report.md, report.html and junit.xml.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from functools import partial
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from proctree import descendants, wait_until_gone
from grading import cli
from grading.nightly import execute, notebooks, processes, runner
from grading.nightly.labs import Lab, _pairing_problems, discover_labs
from grading.nightly.progress import Progress
from grading.nightly.report import (
    FAILED, NO_LABS, PASSED, TIMED_OUT, NightlyRun, Result, duration_change, junit_xml, markdown_report,
    previous_durations,
)

FIXTURES = Path(__file__).parent / "nightly_fixtures"
LAB = "lab01_tiny"
BROKEN_LAB = "lab02_broken"
CELL_TIMEOUT_S = 4


def make_course(root: Path, chapters=("passing", "failing", "hanging", "no_parameters"), lab=True,
                broken_lab=False) -> Path:
    """A course folder: notebooks/ with the chosen fixtures, and the labs in solutions/ and labs/."""
    (root / "notebooks").mkdir(parents=True)
    for name in chapters:
        shutil.copy(FIXTURES / f"{name}.ipynb", root / "notebooks" / f"{name}.ipynb")
    labs = [(LAB, "lab")] * lab + [(BROKEN_LAB, "lab_broken")] * broken_lab
    for lab_name, fixture in labs:
        for kind, version in (("solutions", "source"), ("labs", "released")):
            (root / kind / lab_name).mkdir(parents=True)
            shutil.copy(FIXTURES / f"{fixture}_{version}.ipynb", root / kind / lab_name / f"{lab_name}.ipynb")
    return root


@pytest.fixture(scope="module")
def processes_before_the_run():
    """This worker's children before the nightly runs (the ranks' template an earlier test's launch
    started lives as long as the worker): only those the run started must be gone after it."""
    return descendants()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, processes_before_the_run):
    """`course nightly` on the whole fixture course: (exit status, course root, run folder, results by name)."""
    base = tmp_path_factory.mktemp("nightly")
    root = make_course(base / "course", broken_lab=True)
    out = base / "runs" / "first"
    here = os.getcwd()
    os.chdir(base)  # papermill and nbgrader run in other folders: relative paths must still work
    try:
        status = cli.main(["nightly", "--root", "course", "--out", "runs/first", "--quick", "--world-size", "2",
                           "--backend", "gloo", "-j", "3", "--cell-timeout", str(CELL_TIMEOUT_S), "--timeout", "120"])
    finally:
        os.chdir(here)
    results = {row["name"]: row for row in json.loads((out / "results.json").read_text())["results"]}
    return status, root, out, results


# ---------------------------------------------------------------- the full run


def test_exit_status_is_nonzero_when_anything_failed(full_run):
    status, _root, _out, results = full_run
    assert status == 1
    assert {name: row["status"] for name, row in results.items()} == {
        "notebooks/passing.ipynb": PASSED,
        "notebooks/failing.ipynb": FAILED,
        "notebooks/hanging.ipynb": TIMED_OUT,
        "notebooks/no_parameters.ipynb": FAILED,
        f"{LAB} (solution)": PASSED,
        f"{LAB} (released)": PASSED,
        f"{BROKEN_LAB} (solution)": FAILED,
        f"{BROKEN_LAB} (released)": FAILED,
    }


def test_notebooks_run_several_at_a_time(full_run):
    """-j 3: a task starts while another is still running (each row says when its task began)."""
    from datetime import datetime, timedelta

    _status, _root, _out, results = full_run
    task_seconds = {}  # a lab's two rows are one task, graded one after the other
    for row in results.values():
        task_seconds[row["started"]] = task_seconds.get(row["started"], 0.0) + row["duration_s"]
    spans = sorted((datetime.fromisoformat(started), datetime.fromisoformat(started) + timedelta(seconds=seconds))
                   for started, seconds in task_seconds.items())
    assert len(spans) == 6  # 4 notebooks, 2 labs
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), spans


def test_parameters_are_injected_and_the_kernel_is_this_interpreter(full_run):
    import nbformat

    _status, _root, out, _results = full_run
    executed = nbformat.read(out / "notebooks" / "passing.ipynb", as_version=4)
    printed = "".join(output.get("text", "") for cell in executed.cells for output in cell.get("outputs", []))
    assert "QUICK=True WORLD_SIZE=2 BACKEND=gloo" in printed
    assert f"executable={sys.executable}" in printed


def test_what_a_notebook_leaves_in_the_temporary_directory_is_named_and_goes_with_the_run(full_run):
    import nbformat

    _status, _root, out, results = full_run
    executed = nbformat.read(out / "notebooks" / "passing.ipynb", as_version=4)
    printed = "".join(output.get("text", "") for cell in executed.cells for output in cell.get("outputs", []))
    left = Path(re.search(r"left=(\S+)", printed).group(1))
    # the notebook's own folder, inside the run's
    assert left.parent.name.startswith("passing-") and left.parent.parent.name == "tmp", left
    assert left.parent.parent.parent != Path(tempfile.gettempdir())
    assert not left.exists() and not left.parent.parent.exists()
    assert results["notebooks/passing.ipynb"]["notes"] == [
        f"left in its temporary directory afterwards (removed): {left.name}/"]
    assert results["notebooks/failing.ipynb"]["notes"] == []


def test_interact_output_lands_in_the_cell(full_run):
    """papermill runs without nbclient's Output-widget handler, whose shell-socket writes made a
    1 s cell wait for the whole cell timeout (jupyter/nbclient#312); what interact prints stays visible."""
    import nbformat

    _status, _root, out, results = full_run
    cell = nbformat.read(out / "notebooks" / "passing.ipynb", as_version=4).cells[-1]
    assert "interact x=3\n" in [output.get("text") for output in cell.outputs]
    assert cell.metadata.papermill.duration < CELL_TIMEOUT_S


def test_failing_notebook_names_its_cell_source_and_error(full_run):
    row = full_run[3]["notebooks/failing.ipynb"]
    assert row["cell"] == 4  # the fourth cell of the source notebook (markdown included)
    assert row["execution_count"] == 4  # papermill's injected parameters cell took In [3]
    assert row["error"] == "ValueError: fixture failure: total is 6"
    assert '-> 3 |     raise ValueError(f"fixture failure: total is {total}")' in row["excerpt"]
    assert "Traceback" in row["traceback"] and row["executed"] == "notebooks/failing.ipynb"


def test_hanging_notebook_is_stopped_by_the_cell_timeout(full_run):
    row = full_run[3]["notebooks/hanging.ipynb"]
    assert row["cell"] == 4
    assert row["error"] == f"cell still running after {CELL_TIMEOUT_S} s (--cell-timeout); stopped"
    assert "-> 3 |     time.sleep(0.1)" in row["excerpt"]  # where it was stuck
    assert row["duration_s"] < CELL_TIMEOUT_S + 30


def test_notebook_without_parameters_is_a_failure_row(full_run):
    row = full_run[3]["notebooks/no_parameters.ipynb"]
    assert row["status"] == FAILED and row["executed"] is None
    assert row["error"].startswith("no cell tagged 'parameters'")


def test_labs_solution_scores_full_marks_and_release_zero(full_run):
    results = full_run[3]
    assert results[f"{LAB} (solution)"]["score"] == [2.0, 2.0]
    assert results[f"{LAB} (released)"]["score"] == [0.0, 2.0]


def test_a_lab_solution_runs_once_through_nbgrader_with_the_parameters_injected(full_run):
    """Not also by papermill: the solution's executed copy is its autograded notebook, the run's
    parameters injected after its parameters cell (the release got them too)."""
    import nbformat

    _status, _root, out, results = full_run
    assert results[f"{LAB} (solution)"]["executed"] == f"solutions/{LAB}/{LAB}.ipynb"
    for executed in (out / f"solutions/{LAB}/{LAB}.ipynb", out / f"grading/{LAB}/autograded/released/{LAB}/{LAB}.ipynb"):
        cells = nbformat.read(executed, as_version=4).cells
        assert "injected-parameters" in cells[2].metadata.tags, executed
        assert 'QUICK = True\nWORLD_SIZE = 2\nBACKEND = "gloo"\n' in cells[2].source
    assert not (out / "logs" / "solutions").exists()


def test_broken_lab_says_which_test_lost_or_won_points_and_why(full_run):
    results = full_run[3]
    solution, released = results[f"{BROKEN_LAB} (solution)"], results[f"{BROKEN_LAB} (released)"]
    assert solution["score"] == [1.0, 2.0] and released["score"] == [1.0, 2.0]
    assert solution["error"] == (
        f"{BROKEN_LAB}.ipynb: cell 6 raised RuntimeError: a cell of the solution that raises; "
        f"the solution scored 1 of 2; lost points in {BROKEN_LAB}:test_noisy (0 of 1: it wrote to stderr "
        "('a warning on stderr'), and nbgrader gives 0 to a test cell with any stderr output)")
    assert solution["cell"] == 6 and solution["executed"] == f"solutions/{BROKEN_LAB}/{BROKEN_LAB}.ipynb"
    assert '-> 1 | raise RuntimeError("a cell of the solution that raises")' in solution["excerpt"]
    assert released["error"] == (f"the untouched release scored 1 of 2 (expected 0): these tests pass without "
                                 f"student code: {BROKEN_LAB}:test_always_passes (1 of 1)")


def test_markdown_report_has_environment_rows_and_failure_details(full_run):
    _status, _root, out, _results = full_run
    report = (out / "report.md").read_text()
    assert report.index("## Environment") < report.index("## Chapters")
    assert "torch       " in report and "Backend" in report  # labutils.command.doctor's environment text
    assert "**3 of 8 passed, 5 failed (1 timed out)" in report
    glance = report[report.index("**3 of 8"):report.index("Settings:")]  # what broke, before anything else
    assert "- notebooks/failing.ipynb: failed at cell 4 (In [4]): ValueError: fixture failure: total is 6\n" in glance
    assert "- notebooks/hanging.ipynb: timed out at cell 4 (In [4]): cell still running after" in glance
    assert f"- {BROKEN_LAB} (released): failed: the untouched release scored 1 of 2" in glance
    assert glance.count("\n- ") == 5
    assert ("| [notebooks/failing.ipynb](notebooks/failing.ipynb) | FAILED |" in report
            and "| cell 4 (In [4]) | ValueError: fixture failure: total is 6 |" in report)
    assert "### notebooks/hanging.ipynb: timed out at cell 4 (In [4])" in report
    assert "No previous run to compare durations with." in report


def test_html_report_escapes_and_links_failures(full_run):
    _status, _root, out, _results = full_run
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert '<td class="failed">failed</td>' in page and '<td class="timed-out">timed out</td>' in page
    assert "if total &gt; 5:" in page  # the excerpt, escaped
    assert '<a href="#fail-notebooks-failing-ipynb">' in page and 'id="fail-notebooks-failing-ipynb"' in page
    glance = page[page.index('<ul class="failures">'):page.index("<p>Settings:")]
    assert ('<li><a href="#fail-notebooks-failing-ipynb">notebooks/failing.ipynb</a>: failed at cell 4 (In [4]): '
            "ValueError: fixture failure: total is 6</li>") in glance
    assert glance.count("<li>") == 5


def test_junit_counts_failures_per_suite(full_run):
    _status, _root, out, _results = full_run
    suites = ElementTree.parse(out / "junit.xml").getroot()
    assert (suites.get("tests"), suites.get("failures")) == ("8", "5")
    chapters = suites.find("testsuite[@name='chapters']")
    assert (chapters.get("tests"), chapters.get("failures")) == ("4", "3")
    failure = chapters.find("testcase[@name='notebooks/failing.ipynb']/failure")
    assert failure.get("message") == "failed at cell 4 (In [4]): ValueError: fixture failure: total is 6"
    assert suites.find("testsuite[@name='grading']").get("failures") == "2"


def test_run_folder_holds_executed_notebooks_and_logs(full_run):
    _status, _root, out, _results = full_run
    for relative in ("notebooks/passing.ipynb", f"solutions/{LAB}/{LAB}.ipynb", "logs/notebooks/hanging.log",
                     f"logs/grading/{LAB}-solution.log", "report.md", "report.html", "junit.xml"):
        assert (out / relative).is_file(), relative


def test_no_process_outlives_the_run(full_run, processes_before_the_run):
    _status, root, _out, _results = full_run
    child_pid = int((root / "notebooks" / "hanging_child.pid").read_text())
    assert not wait_until_gone({child_pid}, timeout_s=5.0)
    assert not wait_until_gone(descendants() - processes_before_the_run, timeout_s=5.0)


# ---------------------------------------------------------------- a second run next to the first


def test_second_run_notebook_timeout_previous_durations_and_fallback_kernel(full_run, tmp_path, monkeypatch):
    """--timeout stops a hung notebook and everything it started; durations are compared with the
    first run; a python3 kernelspec pointing at another Python is replaced by one for this interpreter;
    where GPUs are visible the notebooks get full sizes and one rank per GPU unless told otherwise."""
    _status, _root, first_out, first_results = full_run
    elsewhere = tmp_path / "jupyter" / "kernels" / "python3"
    elsewhere.mkdir(parents=True)
    (elsewhere / "kernel.json").write_text(json.dumps(
        {"argv": ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "elsewhere", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr("labutils.devices.backend.visible_gpu_count", lambda: 4)  # as on a 4-GPU node
    root = make_course(tmp_path / "course", chapters=("passing", "hanging"), lab=False)
    progress = io.StringIO()
    before = descendants()
    run, out = runner.run_nightly([], root=root, out_dir=first_out.parent / "second", backend="gloo", jobs=2,
                                   timeout_s=12, cell_timeout_s=120, progress_stream=progress)

    rows = {result.name: result for result in run.results}
    hanging, passing = rows["notebooks/hanging.ipynb"], rows["notebooks/passing.ipynb"]
    assert hanging.status == TIMED_OUT and hanging.cell == 4
    assert hanging.error == "notebook still running after 12 s (--timeout); stopped"
    assert not wait_until_gone({int((root / "notebooks" / "hanging_child.pid").read_text())}, timeout_s=5.0)
    assert not wait_until_gone(descendants() - before, timeout_s=5.0)

    assert "temporary kernelspec" in run.settings["kernel"] and passing.ok
    printed = (out / "notebooks" / "passing.ipynb").read_text()
    assert f"executable={sys.executable}" in printed
    assert "QUICK=False WORLD_SIZE=4 BACKEND=gloo" in printed

    assert run.previous_run == "first"
    assert passing.previous_duration_s == pytest.approx(first_results["notebooks/passing.ipynb"]["duration_s"])
    report = (out / "report.md").read_text()
    assert "Durations compared with earlier runs (latest: `first`)." in report
    assert f"## Labs graded with nbgrader\n\n{NO_LABS}" in report

    lines = progress.getvalue().splitlines()  # not a terminal: one line per finished notebook, no redraws
    assert "\r" not in progress.getvalue()
    assert any(line.startswith("passed     notebooks/passing.ipynb") for line in lines)
    assert any(line.startswith("TIMED OUT  notebooks/hanging.ipynb") for line in lines)
    assert lines[-1].startswith("1 of 2 passed, 1 failed (1 timed out)")


# ---------------------------------------------------------------- bad input: clear errors before anything runs


def run_cli(capsys, *args) -> tuple[int, str]:
    status = cli.main(["nightly", *args])
    return status, capsys.readouterr().err


def test_unknown_notebook_lists_the_available_ones(tmp_path, capsys):
    root = make_course(tmp_path / "course", chapters=("passing", "failing"))
    status, err = run_cli(capsys, "--root", str(root), "03_roofline")
    assert status == 2
    assert "unknown notebook '03_roofline'" in err and f"available: failing, passing, {LAB}" in err
    assert not (root / "build").exists()


def test_missing_kernel_is_an_error_before_starting(tmp_path, capsys):
    root = make_course(tmp_path / "course", chapters=("passing",))
    status, err = run_cli(capsys, "--root", str(root), "-k", "no-such-kernel", "passing")
    assert status == 2 and "kernel 'no-such-kernel' is not installed (installed: " in err
    assert not (root / "build").exists()


def test_unwritable_output_folder(tmp_path, capsys):
    root = make_course(tmp_path / "course", chapters=("passing",))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    status, err = run_cli(capsys, "--root", str(root), "--out", str(blocker / "run"), "passing")
    assert status == 2 and f"cannot write the output folder {blocker / 'run'}" in err


def test_empty_course_and_bad_numbers(tmp_path, capsys):
    status, err = run_cli(capsys, "--root", str(tmp_path))
    assert status == 2 and "nothing to run" in err
    root = make_course(tmp_path / "course", chapters=("passing",), lab=False)
    status, err = run_cli(capsys, "--root", str(root), "-j", "0")
    assert status == 2 and "-j must be at least 1, got 0" in err
    status, err = run_cli(capsys, "--root", str(root), "--backend", "nccl", "--world-size", "2")
    assert status == 2 and "nccl" in err


def test_list_and_selection_by_name_lab_or_path(tmp_path, capsys):
    root = make_course(tmp_path / "course", chapters=("passing", "failing"))
    assert cli.main(["nightly", "--root", str(root), "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "notebooks/failing.ipynb", "notebooks/passing.ipynb", f"{LAB} (nbgrader)"]
    picked = notebooks.select_notebooks(root, ["passing", LAB, "notebooks/failing", str(FIXTURES / "hanging.ipynb")])
    assert [(job.name, job.group, str(job.output)) for job in picked] == [
        ("notebooks/passing.ipynb", "chapters", "notebooks/passing.ipynb"),
        (f"solutions/{LAB}/{LAB}.ipynb", "solutions", f"solutions/{LAB}/{LAB}.ipynb"),
        ("notebooks/failing.ipynb", "chapters", "notebooks/failing.ipynb"),
        (str(FIXTURES / "hanging.ipynb"), "other", "other/hanging.ipynb"),
    ]


def test_a_lab_step_nbgrader_refuses_fails_both_rows_with_its_reason(tmp_path):
    """generate_assignment refuses a source with a grade id used twice: the steps stop there, both
    rows say so and point at that step's log."""
    import nbformat

    from grading.nightly.labs import grade_lab

    root = make_course(tmp_path / "course", chapters=())
    path = root / "solutions" / LAB / f"{LAB}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[3].metadata.nbgrader.grade_id = "double"  # the test cell takes the solution cell's id
    nbformat.write(notebook, path)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}  # alembic
    rows = grade_lab(discover_labs(root)[0], tmp_path / "work", out, partial(processes.run_watched, env=env),
                     kernel="python3", cell_timeout_s=60, timeout_s=120, parameters={"QUICK": True})
    assert [(row.name, row.status) for row in rows] == [(f"{LAB} (solution)", FAILED), (f"{LAB} (released)", FAILED)]
    for row in rows:
        assert row.error.startswith("nbgrader generate_assignment failed: ") and "double" in row.error, row.error
        assert row.log == f"logs/grading/{LAB}-generate_assignment.log"
    assert not (out / "logs" / "grading" / f"{LAB}-solution.log").exists()


# ---------------------------------------------------------------- pieces, without executing anything


def test_default_kernel_runs_this_interpreter_or_gets_a_temporary_spec(tmp_path, monkeypatch):
    assert processes._runs_this_interpreter(["python", "-m", "ipykernel_launcher"])
    assert processes._runs_this_interpreter([sys.executable, "-m", "ipykernel_launcher"])
    assert not processes._runs_this_interpreter(["/nonexistent/python", "-m", "ipykernel_launcher"])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "empty"))
    found = KernelSpecManager().get_kernel_spec("python3").argv
    choice = processes.resolve_kernel(None, tmp_path / "scratch")
    assert choice.name == "python3"
    assert (choice.jupyter_path is None) == processes._runs_this_interpreter(found)
    if choice.jupyter_path is not None:  # a user-level python3 kernelspec starts another Python
        spec = json.loads((tmp_path / "scratch" / "kernels" / "python3" / "kernel.json").read_text())
        assert spec["argv"][0] == sys.executable


def test_source_excerpt_marks_the_failing_line():
    source = "\n".join(f"line{number}" for number in range(1, 11))
    assert execute.source_excerpt(source, 5).splitlines() == [
        "   3 | line3", "   4 | line4", "-> 5 | line5", "   6 | line6", "   7 | line7", "     | ..."]
    assert execute.source_excerpt("a = 1\nb = 2", None) == "   1 | a = 1\n   2 | b = 2"


def test_previous_durations_come_from_the_latest_earlier_run_that_has_each_row(tmp_path):
    def write_run(name, started, durations):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(
            {"started": started, "results": [{"name": n, "duration_s": s} for n, s in durations.items()]}))

    write_run("old", "2026-11-20T03:00:00", {"notebooks/a.ipynb": 10.0, "notebooks/b.ipynb": 20.0})
    write_run("latest_earlier", "2026-11-21T03:00:00", {"notebooks/a.ipynb": 12.0})
    write_run("later", "2026-11-23T03:00:00", {"notebooks/a.ipynb": 99.0})
    (tmp_path / "not_a_run").mkdir()
    (tmp_path / "now").mkdir()
    assert previous_durations(tmp_path / "now", "2026-11-22T03:00:00") == (
        "latest_earlier", {"notebooks/a.ipynb": 12.0, "notebooks/b.ipynb": 20.0})
    assert previous_durations(tmp_path / "now", "2026-11-19T03:00:00") == (None, {})


def test_report_text_for_a_slower_notebook_and_no_labs():
    row = Result("notebooks/a.ipynb", "chapters", PASSED, 15.0, previous_duration_s=10.0)
    run = NightlyRun("2026-11-22T03:00:00", 15.0, {"QUICK": True}, {"error": "probe failed"}, [row],
                     labs_note=NO_LABS, previous_run="2026-11-21_030000")
    report = markdown_report(run)
    assert "| notebooks/a.ipynb | passed | 15.0 | 10.0 | +5.0 s (+50%) ! |  |  |" in report
    assert f"## Labs graded with nbgrader\n\n{NO_LABS}" in report
    assert "could not be collected: probe failed" in report
    assert 'failures="0"' in junit_xml(run)
    with pytest.raises(ValueError, match="status must be one of"):
        Result("x", "chapters", "broken", 1.0)


def test_labs_pairing(tmp_path):
    for kind in ("solutions", "labs"):
        (tmp_path / kind / "lab01_a").mkdir(parents=True)
    (tmp_path / "solutions" / "lab01_a" / "lab01_a.ipynb").write_text("{}")
    (tmp_path / "solutions" / "lab01_a" / "extra.ipynb").write_text("{}")
    (tmp_path / "labs" / "lab01_a" / "lab01_a.ipynb").write_text("{}")
    (tmp_path / "labs" / "lab02_b").mkdir(parents=True)
    (tmp_path / "labs" / "lab02_b" / "lab02_b.ipynb").write_text("{}")
    labs = discover_labs(tmp_path)
    assert [(lab.name, lab.source_dir is not None, lab.released_dir is not None) for lab in labs] == [
        ("lab01_a", True, True), ("lab02_b", False, True)]
    assert "lacks extra.ipynb" in _pairing_problems(labs[0])["released"]
    assert "solutions/lab02_b/ is missing" in _pairing_problems(labs[1])["released"]
    assert "labs/lab03_c/ is missing" in _pairing_problems(Lab("lab03_c", tmp_path, None))["released"]


def test_progress_on_a_terminal_redraws_one_status_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress(stream, total=2)
    progress.started("notebooks/a.ipynb")
    progress.finished("notebooks/a.ipynb", [Result("notebooks/a.ipynb", "chapters", FAILED, 1.5, error="boom")])
    progress.close()
    text = stream.getvalue()
    assert "\r\x1b[K[0/2 done, 0 failed] running: notebooks/a.ipynb (0 s)" in text
    assert "\r\x1b[KFAILED     notebooks/a.ipynb  1.5 s  boom\n" in text
    assert "[1/2 done, 1 failed] running: -" in text


def test_injected_parameters_quick_on_cpu_full_on_gpus_unless_told():
    assert runner.injected_parameters(0) == {"QUICK": True, "WORLD_SIZE": 2, "BACKEND": "auto"}
    assert runner.injected_parameters(1) == {"QUICK": False, "WORLD_SIZE": 2, "BACKEND": "auto"}
    assert runner.injected_parameters(8) == {"QUICK": False, "WORLD_SIZE": 8, "BACKEND": "auto"}
    assert runner.injected_parameters(8, quick=True, world_size=4, backend="nccl") == {
        "QUICK": True, "WORLD_SIZE": 4, "BACKEND": "nccl"}
    assert runner.injected_parameters(0, quick=False)["QUICK"] is False


def test_progress_line_fits_the_terminal():
    """A status line wider than the terminal wraps, and redrawing it would then leave a trail of lines."""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()  # no file descriptor: 80 columns assumed
    progress = Progress(stream, total=3)
    for name in ("solutions/lab03_data_parallel/lab03_data_parallel.ipynb", "lab04_zero (nbgrader)"):
        progress.started(name)
    progress.close()
    last = stream.getvalue().split("\r\x1b[K")[-2]  # the last status line drawn
    assert last.startswith("[0/3 done, 0 failed] running: solutions/lab03") and last.endswith("...")
    assert len(last) == 79


def test_small_duration_changes_are_not_flagged():
    assert duration_change(Result("a", "chapters", PASSED, 1.0, previous_duration_s=0.5)) == "+0.5 s (+100%)"
    assert duration_change(Result("a", "chapters", PASSED, 20.0, previous_duration_s=10.0)) == "+10.0 s (+100%) !"
    assert duration_change(Result("a", "chapters", PASSED, 10.0, previous_duration_s=20.0)) == "-10.0 s (-50%) !"
    assert duration_change(Result("a", "chapters", PASSED, 11.0, previous_duration_s=10.0)) == "+1.0 s (+10%)"


def test_default_jobs():
    assert runner.default_jobs(gpu_count=4) == 1  # notebooks on a GPU node share the GPUs
    assert runner.default_jobs(gpu_count=0) >= 2


def test_subprocess_env_puts_this_interpreter_and_the_temporary_kernelspec_first():
    choice = processes.KernelChoice("python3", "/tmp/spec", "x")
    env = processes.subprocess_env(choice)
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["JUPYTER_PATH"].split(os.pathsep)[0] == "/tmp/spec"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == processes.COURSE_ROOT  # `python -m grading.nightly.execute`
    assert processes.subprocess_env(choice, "/tmp/run/tmp")["TMPDIR"] == "/tmp/run/tmp"
    too_long = "/tmp/" + "x" * 80  # no room for the ranks' socket in it: TMPDIR stays as it is
    assert processes.subprocess_env(choice, too_long).get("TMPDIR") == os.environ.get("TMPDIR")
