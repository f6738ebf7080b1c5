"""`labutils nightly`: execute every notebook with papermill, check the labs with nbgrader, write a report.

    labutils nightly                          # every chapter and lab solution; QUICK on CPU, full on GPUs
    labutils nightly 03_roofline lab01_tensor_parallel    # only these: a chapter, a lab folder, a path
    labutils nightly --full -j 2 --world-size 4 --timeout 1200 --cell-timeout 300 --out /tmp/run
    make nightly NIGHTLY_ARGS="--quick"

Each notebook runs in its own kernel (papermill, as a subprocess) with ``QUICK``,
``WORLD_SIZE`` and ``BACKEND`` injected after its ``parameters`` cell; ``--timeout`` bounds
a whole notebook and ``--cell-timeout`` each cell (papermill's execution timeout), in
seconds. One failure never stops the others. Then each lab is autograded with nbgrader
(:mod:`labutils.nightly_labs`): its solution must score full marks, its release zero.

The run folder (default ``build/nightly/YYYY-MM-DD_HHMMSS/``) receives the executed
notebooks, ``logs/``, ``report.md``, ``report.html``, ``junit.xml`` and ``results.json``
(:mod:`labutils.nightly_report`). The exit status is 1 when anything failed, 2 for a
mistake on the command line, 130 when interrupted.

From Python: ``run_nightly(["03_roofline"], root=".")`` returns the run and its folder.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback as traceback_module
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from labutils.nightly_report import FAILED, NO_LABS, PASSED, TIMED_OUT, NightlyRun, Result, summary_line

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_CELL_TIMEOUT_S = 600.0
PARAMETERS_TAG = "parameters"
#: cells papermill adds to the executed notebook (not counted when numbering cells)
PAPERMILL_TAGS = frozenset({"injected-parameters", "papermill-error-cell-tag"})
#: seconds between two looks at a running command (timeout, Ctrl-C, new child processes)
POLL_INTERVAL_S = 0.25
#: seconds a finished notebook's leftover processes get to exit by themselves before being killed
LEFTOVER_GRACE_S = 3.0
EXIT_INTERRUPTED = 130
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Timeout)):?(.*)$")


class NightlyInputError(ValueError):
    """A mistake in what the nightly run was asked to do (unknown notebook, kernel, output folder)."""


# ---------------------------------------------------------------- which notebooks


@dataclass(frozen=True)
class NotebookJob:
    """One notebook to execute: ``name`` is its path relative to the course root (the report's key),
    ``group`` "chapters", "solutions" or "other", ``output`` where the executed copy goes inside the run folder."""

    path: Path
    name: str
    group: str
    output: Path


def discover_notebooks(root: Path) -> list[NotebookJob]:
    """``root/notebooks/*.ipynb`` then ``root/solutions/lab*/*.ipynb``, each sorted by name."""
    root = Path(root).resolve()
    paths = sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "solutions").glob("lab*/*.ipynb"))
    return [_job(path, root) for path in paths if not path.name.startswith(".")]


def _job(path: Path, root: Path) -> NotebookJob:
    path = path.resolve()
    try:
        relative = path.relative_to(root)
    except ValueError:
        return NotebookJob(path, str(path), "other", Path("other") / path.name)
    group = {"notebooks": "chapters", "solutions": "solutions"}.get(relative.parts[0], "other")
    return NotebookJob(path, relative.as_posix(), group, relative)


def _short_names(jobs: list[NotebookJob]) -> list[str]:
    """What a user can type to pick a notebook: a chapter's stem, a lab's folder name."""
    names = []
    for job in jobs:
        short = job.path.stem if job.group == "chapters" else job.path.parent.name
        if short not in names:
            names.append(short)
    return names


def select_notebooks(root: Path, names: list[str]) -> list[NotebookJob]:
    """The notebooks ``names`` pick (all when empty), in discovery order, each once.

    A name is a chapter's stem (``03_roofline``), a lab folder (``lab01_tensor_parallel``), a notebook's
    path relative to ``root`` with or without ``.ipynb``, or the path of any ``.ipynb`` file or folder.
    """
    root = Path(root).resolve()
    available = discover_notebooks(root)
    if not names:
        return available
    chosen: list[NotebookJob] = []
    for name in names:
        matches = [job for job in available if name in _keys(job)]
        candidate = Path(name)
        if not matches and candidate.is_file() and candidate.suffix == ".ipynb":
            matches = [_job(candidate, root)]
        elif not matches and candidate.is_dir():
            matches = [_job(path, root) for path in sorted(candidate.glob("*.ipynb"))]
        if not matches:
            listing = ", ".join(_short_names(available)) or f"none (no notebooks under {root})"
            raise NightlyInputError(f"unknown notebook {name!r}: give a name, a path or a lab folder; "
                                    f"available: {listing}")
        chosen.extend(job for job in matches if job not in chosen)
    return _unique_outputs(chosen)


def _keys(job: NotebookJob) -> set[str]:
    keys = {job.path.stem, job.name, job.name.removesuffix(".ipynb")}
    if job.group == "solutions":
        keys.add(job.path.parent.name)
    return keys


def _unique_outputs(jobs: list[NotebookJob]) -> list[NotebookJob]:
    """Give two notebooks from outside the course with the same file name distinct output paths."""
    used, unique = set(), []
    for job in jobs:
        output, counter = job.output, 2
        while output in used:
            output = job.output.with_name(f"{job.output.stem}_{counter}{job.output.suffix}")
            counter += 1
        used.add(output)
        unique.append(NotebookJob(job.path, job.name, job.group, output))
    return unique


# ---------------------------------------------------------------- which kernel


@dataclass(frozen=True)
class KernelChoice:
    """The kernel papermill and nbgrader start: ``name``, and a folder to put first on JUPYTER_PATH
    when a temporary kernelspec had to be written for this interpreter."""

    name: str
    jupyter_path: str | None
    description: str


def resolve_kernel(name: str | None, scratch_dir: Path) -> KernelChoice:
    """``name`` if installed (else a clear error); by default ``python3`` running this interpreter.

    When the ``python3`` kernelspec Jupyter finds starts another Python, a kernelspec
    pointing at ``sys.executable`` is written under ``scratch_dir`` and put first on JUPYTER_PATH.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    if name is not None:
        try:
            spec = manager.get_kernel_spec(name)
        except NoSuchKernel:
            installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
            raise NightlyInputError(f"kernel {name!r} is not installed (installed: {installed}); "
                                    "see `jupyter kernelspec list`") from None
        return KernelChoice(name, None, f"{name} ({spec.argv[0]})")
    if importlib.util.find_spec("ipykernel") is None:
        raise NightlyInputError(f"ipykernel is not installed in {sys.executable}: pip install ipykernel, "
                                "or pass -k NAME for an installed kernel")
    try:
        if _runs_this_interpreter(manager.get_kernel_spec("python3").argv):
            return KernelChoice("python3", None, f"python3 ({sys.executable})")
    except NoSuchKernel:
        pass
    spec_dir = Path(scratch_dir) / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (labutils nightly)", "language": "python",
    }))
    return KernelChoice("python3", str(scratch_dir), f"python3 ({sys.executable}, temporary kernelspec)")


def _runs_this_interpreter(argv: list[str]) -> bool:
    """Whether a kernelspec's command starts ``sys.executable`` (jupyter_client maps bare python names to it)."""
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return bool(argv) and (argv[0] in bare or os.path.abspath(argv[0]) == os.path.abspath(sys.executable))


# ---------------------------------------------------------------- running one command


@dataclass
class CommandOutcome:
    """How a watched command ended: ``returncode`` is None when it was stopped (timeout or Ctrl-C);
    ``left_behind`` counts processes it started that were still alive after it ended (then killed)."""

    returncode: int | None
    duration_s: float
    timed_out: bool = False
    left_behind: int = 0


class _ProcessTree:
    """The processes a command started, remembered as they appear so that orphans are found too."""

    def __init__(self, pid: int):
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid)
        self.seen: dict[int, object] = {}

    def refresh(self) -> None:
        try:
            for child in self.root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except self._psutil.NoSuchProcess:
            pass

    def alive(self) -> list:
        alive = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != self._psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except self._psutil.NoSuchProcess:
                pass
        return alive

    def kill(self, processes: list) -> None:
        for process in processes:
            try:
                process.kill()
            except self._psutil.NoSuchProcess:
                pass
        self._psutil.wait_procs(processes, timeout=5)

    def kill_everything(self) -> None:
        self.refresh()
        self.kill([self.root, *self.alive()])

    def kill_leftovers(self, grace_s: float) -> int:
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = self.alive()
        self.kill(leftovers)
        return len(leftovers)


def run_watched(command: list[str], cwd: Path, log_path: Path, timeout_s: float, *, env: dict | None = None,
                stop: threading.Event | None = None) -> CommandOutcome:
    """Run ``command`` with stdout and stderr to ``log_path``; kill it and everything it started
    after ``timeout_s`` seconds or when ``stop`` is set; kill what it leaves running when it ends."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    tree = _ProcessTree(process.pid)
    while True:
        try:
            process.wait(timeout=POLL_INTERVAL_S)
            break
        except subprocess.TimeoutExpired:
            tree.refresh()
            timed_out = time.monotonic() - started > timeout_s
            if timed_out or (stop is not None and stop.is_set()):
                tree.kill_everything()
                process.wait()
                return CommandOutcome(None, time.monotonic() - started, timed_out=timed_out)
    duration = time.monotonic() - started
    return CommandOutcome(process.returncode, duration, left_behind=tree.kill_leftovers(LEFTOVER_GRACE_S))


# ---------------------------------------------------------------- executing one notebook


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
    command = [sys.executable, "-m", "labutils.nightly", json.dumps(spec)]
    outcome = run_watched(command, job.path.parent, log, settings.timeout_s, env=settings.env, stop=stop)
    result = Result(job.name, job.group, PASSED, outcome.duration_s, log=str(log.relative_to(out_dir)),
                    executed=str(job.output) if executed.is_file() else None)
    if outcome.left_behind:
        result.notes.append(f"{outcome.left_behind} process(es) it started were still running afterwards: killed")
    if outcome.returncode != 0:
        _describe_failure(result, outcome, executed, log, settings)
    return result


def _papermill_subprocess(spec: dict) -> None:
    """What ``python -m labutils.nightly SPEC`` runs: ``papermill.execute_notebook`` on one notebook.

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

    class ClientWithoutOutputWidgets(PapermillNotebookClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.widget_registry = {}

    papermill.engines.PapermillNotebookClient = ClientWithoutOutputWidgets
    papermill.execute_notebook(spec["input"], spec["output"], parameters=spec["parameters"],
                               kernel_name=spec["kernel"], cwd=spec["cwd"], progress_bar=False,
                               execution_timeout=spec["cell_timeout_s"])


def _describe_failure(result: Result, outcome: CommandOutcome, executed: Path, log: Path,
                      settings: RunSettings) -> None:
    """Fill status, failing cell, excerpt and error of a notebook that did not pass."""
    import nbformat

    try:
        cell = _failing_cell(nbformat.read(executed, as_version=4))
    except (OSError, ValueError):  # never written, or cut off mid-write when it was stopped
        cell = None
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    last_exception = _last_exception_line(log_text)
    result.status = FAILED
    if cell is not None:
        result.cell, result.execution_count, source, error_output = cell
        traceback = _ANSI.sub("", "\n".join(error_output.get("traceback", []))) if error_output else ""
        result.excerpt = source_excerpt(source, _failing_line(traceback, result.execution_count))
        result.traceback = traceback
        if error_output:
            message = (error_output.get("evalue") or "").strip().splitlines()
            result.error = error_output.get("ename", "Error") + (f": {message[0]}" if message else "")
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


def _failing_cell(notebook):
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


def _last_exception_line(log_text: str) -> str:
    """The last ``SomeError: message`` line of a log (papermill's own failure), or ''."""
    for line in reversed(log_text.splitlines()):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return line.strip()
    return ""


# ---------------------------------------------------------------- progress


class Progress:
    """What is running, done and failed. On a terminal one status line is redrawn every second;
    otherwise one line per finished notebook or lab."""

    def __init__(self, stream, total: int):
        self.stream, self.total = stream, total
        self.interactive = bool(getattr(stream, "isatty", lambda: False)())
        self.running: dict[str, float] = {}
        self.done = self.failed = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True) if self.interactive else None
        if self._ticker is not None:
            self._ticker.start()

    def started(self, label: str) -> None:
        with self._lock:
            self.running[label] = time.monotonic()
            self._redraw()

    def finished(self, label: str, results: list[Result]) -> None:
        with self._lock:
            self.running.pop(label, None)
            self.done += 1
            self.failed += any(not result.ok for result in results)
            for result in results:
                self._clear()
                status = result.status if result.ok else result.status.upper()
                error = f"  {result.error}" if result.error else ""
                self.stream.write(f"{status:<9}  {result.name}  {result.duration_s:.1f} s{error}\n")
            self._redraw()
            self.stream.flush()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._clear()
            self.stream.flush()

    def _tick(self) -> None:
        while not self._closed.wait(1.0):
            with self._lock:
                self._redraw()

    def _clear(self) -> None:
        if self.interactive:
            self.stream.write("\r\x1b[K")

    def _redraw(self) -> None:
        if not self.interactive or self._closed.is_set():
            return
        now = time.monotonic()
        running = ", ".join(f"{label} ({now - start:.0f} s)" for label, start in self.running.items())
        line = f"[{self.done}/{self.total} done, {self.failed} failed] running: {running or '-'}"
        # a line wider than the terminal wraps, and "\r" then clears only its last part
        self.stream.write("\r\x1b[K" + _fit(line, self._columns()))
        self.stream.flush()

    def _columns(self) -> int:
        """The terminal's width; 80 when unknown (not a file, or a pseudo-terminal reporting 0)."""
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            return 80


def _fit(line: str, columns: int) -> str:
    """``line`` cut to ``columns - 1`` characters, ending with '...' when cut."""
    width = max(columns - 1, 10)
    return line if len(line) <= width else line[:width - 3] + "..."


# ---------------------------------------------------------------- the whole run


def injected_parameters(gpu_count: int, quick: bool | None = None, world_size: int | None = None,
                        backend: str = "auto") -> dict:
    """What replaces each notebook's ``parameters``: QUICK unless GPUs are visible (then full sizes),
    WORLD_SIZE one rank per visible GPU (at least 2), BACKEND as given; an explicit value always wins."""
    return {"QUICK": (gpu_count == 0) if quick is None else quick,
            "WORLD_SIZE": max(2, gpu_count) if world_size is None else world_size,
            "BACKEND": backend}


def default_jobs(gpu_count: int) -> int:
    """Notebooks at once: 1 on a GPU node (they share the GPUs); on CPU half the usable CPUs, at least 2
    (measured on 2 cores: 2 at a time did the whole QUICK run about 1.5 times faster than 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 1 if gpu_count else max(2, cpus // 2)


def prepare_out_dir(out_dir: Path | None, root: Path, started: datetime) -> Path:
    """The run folder as an absolute path (papermill and nbgrader run in other folders), created and
    checked writable (default ``root/build/nightly/YYYY-MM-DD_HHMMSS``)."""
    if out_dir is None:
        base = Path(root) / "build" / "nightly" / started.strftime("%Y-%m-%d_%H%M%S")
        out_dir, counter = base, 2
        while out_dir.exists():
            out_dir, counter = base.with_name(f"{base.name}_{counter}"), counter + 1
    out_dir = Path(out_dir).resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise NightlyInputError(f"cannot write the output folder {out_dir}: {exc.strerror or exc}; "
                                "pass --out DIR with a folder you can write") from None
    return out_dir


def _subprocess_env(kernel: KernelChoice) -> dict:
    """This environment, with this interpreter's bin folder first on PATH (nbgrader runs ``alembic``)
    and the temporary kernelspec folder first on JUPYTER_PATH when there is one."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    if kernel.jupyter_path:
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernel.jupyter_path, env.get("JUPYTER_PATH")]))
    return env


def _require_packages(modules: list[str]) -> None:
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise NightlyInputError(f"{', '.join(missing)} not installed in {sys.executable}: "
                                "pip install -e '.[course]' (or make nightly, which installs it)")


def _labs_to_grade(root: Path, names: list[str], jobs: list[NotebookJob]) -> tuple[list, str | None]:
    """The labs to grade (all, or those ``names`` and the chosen solutions pick) and why there is none."""
    from labutils.nightly_labs import discover_labs

    labs = discover_labs(root)
    if not labs:
        return [], NO_LABS
    if names:
        chosen = set(names) | {job.path.parent.name for job in jobs if job.group == "solutions"}
        labs = [lab for lab in labs if lab.name in chosen]
    return labs, None if labs else "no lab selected"


def run_nightly(names: list[str] = (), *, root: Path | str = ".", out_dir: Path | str | None = None,
                quick: bool | None = None, world_size: int | None = None, backend: str = "auto",
                kernel: str | None = None, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S, grading: bool = True,
                progress_stream=None) -> tuple[NightlyRun, Path]:
    """Execute the notebooks ``names`` pick (all when empty) and grade the labs; write the reports.

    ``quick`` defaults to True without a visible GPU; ``world_size`` to the visible GPUs
    (at least 2); ``jobs`` (notebooks at once) to :func:`default_jobs`. Timeouts are in
    seconds. Progress goes to ``progress_stream`` (default stderr). Returns the run and
    its folder. Raises :class:`NightlyInputError` for bad input, before anything starts.
    """
    from labutils.backend import choose_backend, visible_gpu_count
    from labutils.nightly_labs import grade_lab, row_names
    from labutils.nightly_report import previous_durations, write_reports

    root = Path(root).resolve()
    names = list(names)
    gpu_count = visible_gpu_count()
    parameters = injected_parameters(gpu_count, quick, world_size, backend)
    world_size = parameters["WORLD_SIZE"]
    jobs = default_jobs(gpu_count) if jobs is None else jobs
    for value, flag in ((world_size, "--world-size"), (jobs, "-j")):
        if value < 1:
            raise NightlyInputError(f"{flag} must be at least 1, got {value}")
    if timeout_s <= 0 or cell_timeout_s <= 0:
        raise NightlyInputError("--timeout and --cell-timeout must be positive numbers of seconds")
    try:
        choose_backend(backend, world_size, gpu_count=gpu_count)
    except ValueError as exc:
        raise NightlyInputError(str(exc)) from None
    _require_packages(["papermill", "nbformat", "jupyter_client", "psutil"] + (["nbgrader"] if grading else []))
    notebooks = select_notebooks(root, names)
    labs, labs_note = _labs_to_grade(root, names, notebooks) if grading else ([], "not checked (--no-grading)")
    if not notebooks and not labs:
        raise NightlyInputError(f"nothing to run: no notebook in {root / 'notebooks'} or {root / 'solutions'}/lab*/ "
                                "(run from the course folder or pass --root)")
    stream = sys.stderr if progress_stream is None else progress_stream

    with tempfile.TemporaryDirectory(prefix="labutils-nightly-") as scratch:
        kernel_choice = resolve_kernel(kernel, Path(scratch))
        started, clock = datetime.now(), time.monotonic()
        out_dir = prepare_out_dir(None if out_dir is None else Path(out_dir), root, started)
        settings = RunSettings(parameters, kernel_choice, timeout_s, cell_timeout_s, _subprocess_env(kernel_choice))
        stream.write(f"labutils nightly: {len(notebooks)} notebook(s), {len(labs)} lab(s) to grade, "
                     f"{' '.join(f'{k}={v}' for k, v in parameters.items())}, {jobs} at a time -> {out_dir}\n")
        environment_found: dict = {}  # doctor.environment() imports torch: done while the notebooks run
        environment_thread = threading.Thread(target=_collect_environment, args=(environment_found,), daemon=True)
        environment_thread.start()
        stop = threading.Event()

        def run_command(command, cwd, log_path, limit_s):
            return run_watched(command, cwd, log_path, limit_s, env=settings.env, stop=stop)

        tasks = [Task(job.name, job.group, (job.name,), partial(_execute_one, job, out_dir, settings, stop))
                 for job in notebooks]
        tasks += [Task(f"{lab.name} (nbgrader)", "grading", tuple(row_names(lab).values()),
                       partial(grade_lab, lab, out_dir / "grading", out_dir, run_command, kernel=kernel_choice.name,
                               cell_timeout_s=cell_timeout_s, timeout_s=timeout_s)) for lab in labs]
        _latest, durations_before = previous_durations(out_dir, started.isoformat(timespec="seconds"))
        progress = Progress(stream, len(tasks))
        try:
            results, interrupted = _run_tasks(tasks, jobs, progress, stop, durations_before)
        finally:
            progress.close()
        environment_thread.join()

    run = NightlyRun(started=started.isoformat(timespec="seconds"), duration_s=time.monotonic() - clock,
                     settings={**settings.parameters, "kernel": kernel_choice.description, "jobs": jobs,
                               "timeout per notebook (s)": timeout_s, "timeout per cell (s)": cell_timeout_s},
                     environment=environment_found, results=results, labs_note=labs_note, interrupted=interrupted)
    paths = write_reports(run, out_dir)
    stream.write(f"{summary_line(run)}; report: {paths['markdown']}\n")
    return run, out_dir


def _collect_environment(into: dict) -> None:
    """:func:`labutils.doctor.environment` into ``into``, or its error: the report is written either way."""
    from labutils.doctor import environment

    try:
        into.update(environment())
    except Exception as exc:  # noqa: BLE001 - the report must not be lost to a broken probe
        into["error"] = repr(exc)


def _execute_one(job: NotebookJob, out_dir: Path, settings: RunSettings, stop: threading.Event) -> list[Result]:
    return [execute_notebook(job, out_dir, settings, stop)]


@dataclass(frozen=True)
class Task:
    """One unit of the run's work: ``run()`` returns its result rows (one per notebook, two per lab)."""

    label: str
    group: str
    row_names: tuple[str, ...]
    run: Callable[[], list[Result]]


def _longest_first(tasks: list[Task], previous_durations: dict[str, float]) -> list[Task]:
    """Start the longest tasks first (earlier runs' durations; labs, which grade twice, when unknown)
    so that the slowest does not start last and keep the run waiting."""
    def expected_s(task: Task) -> float:
        known = [previous_durations[name] for name in task.row_names if name in previous_durations]
        return sum(known) if known else (math.inf if task.group == "grading" else 0.0)

    return sorted(tasks, key=expected_s, reverse=True)


def _run_tasks(tasks: list[Task], jobs: int, progress: Progress, stop: threading.Event,
               previous_durations: dict[str, float]) -> tuple[list[Result], bool]:
    """Run the tasks ``jobs`` at a time, longest first; on Ctrl-C stop them all.

    Returns (the results in the order of ``tasks``, whether it was interrupted).
    """

    def run_one(task: Task) -> list[Result]:
        progress.started(task.label)
        try:
            results = task.run()
        except Exception as exc:  # a bug in the runner for one notebook must not lose the whole night's report
            results = [Result(task.label, task.group, FAILED, 0.0, error=f"labutils nightly failed on this: {exc!r}",
                              traceback="".join(traceback_module.format_exception(exc)))]
        progress.finished(task.label, results)
        return results

    executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="nightly")
    futures = {task.label: executor.submit(run_one, task) for task in _longest_first(tasks, previous_durations)}
    interrupted = False
    try:
        for _future in as_completed(futures.values()):
            pass
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
    executor.shutdown(wait=True, cancel_futures=True)
    done = [futures[task.label] for task in tasks]
    results = [result for future in done if future.done() and not future.cancelled() for result in future.result()]
    return results, interrupted


# ---------------------------------------------------------------- command line


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", metavar="NOTEBOOK",
                        help="chapters (03_roofline), lab folders (lab01_tensor_parallel) or paths; default: all")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="quick", action="store_true", default=None,
                      help="QUICK=True: small sizes (default without a GPU)")
    mode.add_argument("--full", dest="quick", action="store_false", help="QUICK=False (default on a GPU node)")
    parser.add_argument("--world-size", type=int, default=None, help="WORLD_SIZE injected (default: GPUs, at least 2)")
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"), help="BACKEND injected")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="notebooks at once (default: 1 on a GPU node, else half the CPUs, at least 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds per notebook (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S,
                        help=f"seconds per cell, papermill's execution timeout (default {DEFAULT_CELL_TIMEOUT_S:g})")
    parser.add_argument("-k", "--kernel", default=None, help="kernel name (default: python3 of this interpreter)")
    parser.add_argument("--out", default=None, help="run folder (default build/nightly/YYYY-MM-DD_HHMMSS)")
    parser.add_argument("--root", default=".", help="course folder holding notebooks/, solutions/, labs/ (default .)")
    parser.add_argument("--no-grading", dest="grading", action="store_false",
                        help="skip the nbgrader check of the labs")
    parser.add_argument("--list", action="store_true", help="print the notebooks and labs it would run, then exit")


def main(args) -> int:
    from labutils.cli import UsageError

    try:
        if args.list:
            return _list(Path(args.root))
        run, _out_dir = run_nightly(args.names, root=args.root, out_dir=args.out, quick=args.quick,
                                    world_size=args.world_size, backend=args.backend, kernel=args.kernel,
                                    jobs=args.jobs, timeout_s=args.timeout, cell_timeout_s=args.cell_timeout,
                                    grading=args.grading)
    except NightlyInputError as exc:
        raise UsageError(str(exc)) from None
    if run.interrupted:
        return EXIT_INTERRUPTED
    return 1 if run.failures else 0


def _list(root: Path) -> int:
    from labutils.nightly_labs import discover_labs

    for job in discover_notebooks(root):
        print(job.name)
    for lab in discover_labs(root):
        print(f"{lab.name} (nbgrader)")
    return 0


if __name__ == "__main__":  # the subprocess execute_notebook() starts for each notebook
    _papermill_subprocess(json.loads(sys.argv[1]))
