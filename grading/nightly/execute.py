"""Executing one notebook with papermill, in a subprocess, and describing how it failed.

    result = execute_notebook(job, out_dir, settings)       # a report row, whatever happens
    python -m grading.nightly.execute SPEC                  # the subprocess: papermill on one notebook
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grading.nightly.notebooks import NotebookJob
from grading.nightly.processes import CommandOutcome, KernelChoice, run_watched
from grading.nightly.report import FAILED, PASSED, TIMED_OUT, Result

PARAMETERS_TAG = "parameters"
#: the tag of the cell papermill inserts after the ``parameters`` cell, setting the run's values
INJECTED_TAG = "injected-parameters"
#: cells papermill adds to the executed notebook (not counted when numbering cells)
PAPERMILL_TAGS = frozenset({INJECTED_TAG, "papermill-error-cell-tag"})
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Timeout)):?(.*)$")


@dataclass(frozen=True)
class RunSettings:
    """What every notebook gets: the injected ``parameters``, the kernel, the timeouts (seconds), the subprocess env."""

    parameters: dict
    kernel: KernelChoice
    timeout_s: float
    cell_timeout_s: float
    env: dict = field(repr=False)


def has_parameters_cell(notebook) -> bool:
    return any(PARAMETERS_TAG in cell.get("metadata", {}).get("tags", []) for cell in notebook.cells)


def execute_notebook(job: NotebookJob, out_dir: Path, settings: RunSettings,
                     stop: threading.Event | None = None) -> Result:
    """Execute ``job`` with papermill into ``out_dir/job.output``; a :class:`Result` whatever happens."""
    import nbformat

    out_dir = Path(out_dir)
    try:
        source = nbformat.read(job.path, as_version=4)
    except (OSError, ValueError) as exc:
        return Result(job.name, job.group, FAILED, 0.0, error=f"cannot read the notebook: {exc}")
    if not has_parameters_cell(source):
        return Result(job.name, job.group, FAILED, 0.0,
                      error=f"no cell tagged {PARAMETERS_TAG!r}: tag the cell that sets QUICK and WORLD_SIZE "
                            "so the nightly values replace them (papermill would only warn)")
    executed = out_dir / job.output
    log = out_dir / "logs" / job.output.with_suffix(".log")
    executed.parent.mkdir(parents=True, exist_ok=True)
    spec = {"input": str(job.path), "output": str(executed), "parameters": settings.parameters,
            "kernel": settings.kernel.name, "cwd": str(job.path.parent),
            "cell_timeout_s": math.ceil(settings.cell_timeout_s)}
    command = [sys.executable, "-m", "grading.nightly.execute", json.dumps(spec)]
    env, temp_dir = _own_temporary_directory(settings.env, job)
    try:
        outcome = run_watched(command, job.path.parent, log, settings.timeout_s, env=env, stop=stop)
        left_files = _left_in(temp_dir) if temp_dir else []
    finally:
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    result = Result(job.name, job.group, PASSED, outcome.duration_s, log=str(log.relative_to(out_dir)),
                    executed=str(job.output) if executed.is_file() else None)
    if outcome.left_behind:
        result.notes.append(f"{outcome.left_behind} process(es) it started were still running afterwards: killed")
    if left_files:
        result.notes.append(f"left in its temporary directory afterwards (removed): {', '.join(left_files)}")
    if outcome.returncode != 0:
        _describe_failure(result, outcome, executed, log, settings)
    return result


#: Names of what a notebook left in its temporary directory that a report lists (then "and N more").
LISTED_LEFTOVERS = 5
#: PyTorch's compiler cache (``torch._inductor``'s default cache dir, ``torchinductor_<user>``), made by
#: every import of ``torch._dynamo`` (an optimizer's first step makes one): one per user, reused by
#: every later run, so it never piles up and is not counted as left behind.
TORCH_CACHE_PREFIX = "torchinductor_"


def _own_temporary_directory(env: dict, job: NotebookJob) -> tuple[dict, str | None]:
    """(env, folder): ``env`` with TMPDIR a new folder of this notebook's inside the run's TMPDIR, so
    what the notebook leaves there is seen (``_left_in``); (env, None) where the run has no TMPDIR
    of its own (its path too long for the ranks' socket: ``subprocess_env``), or this folder's path would be."""
    from labutils.ranks._launch_folder import has_room_for_the_socket

    run_temp = env.get("TMPDIR")
    if not run_temp or not os.path.isdir(run_temp):
        return env, None
    folder = tempfile.mkdtemp(prefix=f"{job.output.stem[:16]}-", dir=run_temp)
    if not has_room_for_the_socket(folder):
        os.rmdir(folder)
        return env, None
    return {**env, "TMPDIR": folder}, folder


def _left_in(folder: str) -> list[str]:
    """What is in ``folder`` but PyTorch's compiler cache (sorted; a folder's name ends with /), at most
    ``LISTED_LEFTOVERS`` names."""
    try:
        entries = sorted((entry for entry in os.scandir(folder) if not entry.name.startswith(TORCH_CACHE_PREFIX)),
                         key=lambda entry: entry.name)
    except OSError:
        return []
    names = [entry.name + ("/" if entry.is_dir(follow_symlinks=False) else "") for entry in entries]
    if len(names) > LISTED_LEFTOVERS:
        names = names[:LISTED_LEFTOVERS] + [f"and {len(names) - LISTED_LEFTOVERS} more"]
    return names


def _papermill_subprocess(spec: dict) -> None:
    """What ``python -m grading.nightly.execute SPEC`` runs: ``papermill.execute_notebook`` on one notebook.

    Its kernel talks to papermill over Unix sockets (``UnixSocketKernelManager``), never over
    ports another process on the node could take first.

    One change to papermill's client: it does not act as a frontend for ipywidgets' Output
    widget (every ``interact`` has one). nbclient's handler for it writes to the kernel's
    shell socket while the client waits on that socket for the cell's reply; the reply is
    then noticed only when the cell timeout expires (jupyter/nbclient#312), so a cell the
    kernel ran in 1 s took the whole ``--cell-timeout`` about one time in four. Without the
    handler, what the widget prints lands in the cell's outputs.
    """
    import papermill
    import papermill.engines
    from papermill.clientwrap import PapermillNotebookClient

    from labutils.checks.notebook_kernel import UnixSocketKernelManager

    class ClientWithoutOutputWidgets(PapermillNotebookClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.widget_registry = {}

    papermill.engines.PapermillNotebookClient = ClientWithoutOutputWidgets
    papermill.execute_notebook(spec["input"], spec["output"], parameters=spec["parameters"],
                               kernel_name=spec["kernel"], cwd=spec["cwd"], progress_bar=False,
                               execution_timeout=spec["cell_timeout_s"],
                               kernel_manager_class=UnixSocketKernelManager)


def _describe_failure(result: Result, outcome: CommandOutcome, executed: Path, log: Path,
                      settings: RunSettings) -> None:
    """Fill status, failing cell, excerpt and error of a notebook that did not pass."""
    import nbformat

    try:
        cell = failing_cell(nbformat.read(executed, as_version=4))
    except (OSError, ValueError):  # never written, or cut off mid-write when it was stopped
        cell = None
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    last_exception = _last_exception_line(log_text)
    result.status = FAILED
    if cell is not None:
        describe_cell(result, cell)
    if outcome.timed_out:
        result.status = TIMED_OUT
        result.error = f"notebook still running after {settings.timeout_s:g} s (--timeout); stopped"
    elif outcome.returncode is None:
        result.error = "stopped: the run was interrupted"
    elif "CellTimeoutError" in last_exception:
        result.status = TIMED_OUT
        result.error = f"cell still running after {settings.cell_timeout_s:g} s (--cell-timeout); stopped"
    elif not result.error:
        result.error = last_exception or f"papermill exited with status {outcome.returncode}"
    if not result.traceback:
        result.traceback = "\n".join(log_text.splitlines()[-30:])


def describe_cell(result: Result, cell: tuple) -> None:
    """Fill ``result``'s cell, execution count, excerpt, traceback and error from ``cell``, as
    :func:`failing_cell` returns it."""
    result.cell, result.execution_count, source, error_output = cell
    traceback = _ANSI.sub("", "\n".join(error_output.get("traceback", []))) if error_output else ""
    result.excerpt = source_excerpt(source, _failing_line(traceback, result.execution_count))
    result.traceback = traceback
    if error_output:
        message = (error_output.get("evalue") or "").strip().splitlines()
        result.error = error_output.get("ename", "Error") + (f": {message[0]}" if message else "")


def failing_cell(notebook):
    """(1-based position in the source notebook, execution count, source, error output or None), or None.

    The first cell with an error output or papermill's exception flag; else the last cell
    papermill started (the one running when a timeout stopped it).
    """
    position, last_started = 0, None
    for cell in notebook.cells:
        if PAPERMILL_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        position += 1
        papermill = cell.get("metadata", {}).get("papermill", {})
        errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
        found = (position, cell.get("execution_count"), cell.source, errors[0] if errors else None)
        if errors or papermill.get("exception"):
            return found
        if papermill.get("start_time"):
            last_started = found
    return last_started


def _failing_line(traceback: str, execution_count: int | None) -> int | None:
    """The line of the cell the traceback points at (``Cell In[n], line k``), or None."""
    if execution_count is None:
        return None
    match = re.search(rf"Cell In\[{execution_count}\], line (\d+)", traceback)
    return int(match.group(1)) if match else None


def source_excerpt(source: str, line: int | None, context: int = 2, max_lines: int = 6) -> str:
    """A few numbered lines of a cell, the failing ``line`` (1-based) marked with ``->``."""
    lines = source.splitlines() or [""]
    if line is None or not 1 <= line <= len(lines):
        first, last, line = 1, min(len(lines), max_lines), None
    else:
        first, last = max(1, line - context), min(len(lines), line + context)
    width = len(str(last))
    excerpt = [f"{'->' if number == line else '  '} {number:>{width}} | {lines[number - 1]}"
               for number in range(first, last + 1)]
    if last < len(lines):
        excerpt.append(f"   {'':>{width}} | ...")
    return "\n".join(excerpt)


def exception_lines(log_text: str) -> list[str]:
    """The ``SomeError: message`` lines of a log, stripped, in order."""
    return [line.strip() for line in log_text.splitlines() if _EXCEPTION_LINE.match(line.strip())]


def _last_exception_line(log_text: str) -> str:
    """The last ``SomeError: message`` line of a log (papermill's own failure), or ''."""
    return (exception_lines(log_text) or [""])[-1]


if __name__ == "__main__":  # the subprocess execute_notebook() starts for each notebook
    _papermill_subprocess(json.loads(sys.argv[1]))
