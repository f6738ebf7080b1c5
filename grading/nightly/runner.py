"""`course nightly`: execute every notebook with papermill, check the labs with nbgrader, write a report.

    course nightly                          # every chapter and lab solution; QUICK on CPU, full on GPUs
    course nightly 03_roofline lab01_tensor_parallel    # only these: a chapter, a lab folder, a path
    course nightly --full -j 2 --world-size 4 --timeout 1200 --cell-timeout 300 --out /tmp/run
    make nightly NIGHTLY_ARGS="--quick"
    course nightly --site                   # and, when all passed, rebuild build/site/ (course site)

Each notebook runs in its own kernel (papermill, as a subprocess: :mod:`grading.nightly.execute`)
with ``QUICK``, ``WORLD_SIZE`` and ``BACKEND`` injected after its ``parameters`` cell;
``--timeout`` bounds a whole notebook and ``--cell-timeout`` each cell (papermill's execution
timeout), in seconds. One failure never stops the others. Each lab is autograded with nbgrader
(:mod:`grading.nightly.labs`), the same parameters injected: its solution must run without an
error and score full marks, its release zero. A graded lab's solution is executed that once
(by nbgrader, not also by papermill); with ``--no-grading`` papermill executes it.

The run folder (default ``build/nightly/YYYY-MM-DD_HHMMSS/``) receives the executed
notebooks, ``logs/``, ``report.md``, ``report.html``, ``junit.xml`` and ``results.json``
(:mod:`grading.nightly.report`). The exit status is 1 when anything failed, 2 for a
mistake on the command line, 130 when interrupted.

From Python: ``run_nightly(["03_roofline"], root=".")`` returns the run and its folder.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import tempfile
import threading
import time
import traceback as traceback_module
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

from grading.nightly.execute import RunSettings, execute_notebook
from grading.nightly.labs import discover_labs, grade_lab, row_names
from grading.nightly.notebooks import NightlyInputError, NotebookJob, discover_notebooks, select_notebooks
from grading.nightly.processes import resolve_kernel, run_watched, subprocess_env
from grading.nightly.progress import Progress
from grading.nightly.report import (
    FAILED, NO_LABS, NightlyRun, Result, previous_durations, summary_line, write_reports,
)

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_CELL_TIMEOUT_S = 600.0
EXIT_INTERRUPTED = 130


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


def _require_packages(modules: list[str]) -> None:
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise NightlyInputError(f"{', '.join(missing)} not installed in {sys.executable}: "
                                "pip install -e '.[course]' (or make nightly, which installs it)")


def _labs_to_grade(root: Path, names: list[str], jobs: list[NotebookJob]) -> tuple[list, str | None]:
    """The labs to grade (all, or those ``names`` and the chosen solutions pick) and why there is none."""
    labs = discover_labs(root)
    if not labs:
        return [], NO_LABS
    if names:
        chosen = set(names) | {job.path.parent.name for job in jobs if job.group == "solutions"}
        labs = [lab for lab in labs if lab.name in chosen]
    return labs, None if labs else "no lab selected"


def _check_request(parameters: dict, jobs: int, timeout_s: float, cell_timeout_s: float, gpu_count: int,
                   grading: bool) -> None:
    """NightlyInputError for numbers out of range, a backend this machine lacks or missing packages."""
    from labutils.devices.backend import choose_backend

    for value, flag in ((parameters["WORLD_SIZE"], "--world-size"), (jobs, "-j")):
        if value < 1:
            raise NightlyInputError(f"{flag} must be at least 1, got {value}")
    if timeout_s <= 0 or cell_timeout_s <= 0:
        raise NightlyInputError("--timeout and --cell-timeout must be positive numbers of seconds")
    try:
        choose_backend(parameters["BACKEND"], parameters["WORLD_SIZE"], gpu_count=gpu_count)
    except ValueError as exc:
        raise NightlyInputError(str(exc)) from None
    _require_packages(["papermill", "nbformat", "jupyter_client", "psutil"] + (["nbgrader"] if grading else []))


def _tasks(notebooks: list, labs: list, out_dir: Path, settings: RunSettings, stop: threading.Event) -> list:
    """One task per notebook (papermill) and one per lab (nbgrader, two rows). A graded lab's
    solution is executed by its nbgrader task only (:func:`papermill_jobs`)."""
    def run_command(command, cwd, log_path, limit_s):
        return run_watched(command, cwd, log_path, limit_s, env=settings.env, stop=stop)

    tasks = [Task(job.name, job.group, (job.name,), partial(_execute_one, job, out_dir, settings, stop))
             for job in papermill_jobs(notebooks, labs)]
    tasks += [Task(f"{lab.name} (nbgrader)", "grading", tuple(row_names(lab).values()),
                   partial(grade_lab, lab, out_dir / "grading", out_dir, run_command, kernel=settings.kernel.name,
                           cell_timeout_s=settings.cell_timeout_s, timeout_s=settings.timeout_s,
                           parameters=settings.parameters)) for lab in labs]
    return tasks


def papermill_jobs(notebooks: list, labs: list) -> list:
    """The notebooks papermill executes: all but the solutions of the labs graded with nbgrader,
    whose autograde executes them (with the same parameters)."""
    graded = {lab.name for lab in labs if lab.source_dir is not None}
    return [job for job in notebooks if not (job.group == "solutions" and job.path.parent.name in graded)]


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
    from labutils.devices.backend import visible_gpu_count

    root, names, gpu_count = Path(root).resolve(), list(names), visible_gpu_count()
    parameters = injected_parameters(gpu_count, quick, world_size, backend)
    jobs = default_jobs(gpu_count) if jobs is None else jobs
    _check_request(parameters, jobs, timeout_s, cell_timeout_s, gpu_count, grading)
    notebooks = select_notebooks(root, names)
    labs, labs_note = _labs_to_grade(root, names, notebooks) if grading else ([], "not checked (--no-grading)")
    if not notebooks and not labs:
        raise NightlyInputError(f"nothing to run: no notebook in {root / 'notebooks'} or {root / 'solutions'}/lab*/ "
                                "(run from the course folder or pass --root)")
    stream = sys.stderr if progress_stream is None else progress_stream
    with tempfile.TemporaryDirectory(prefix="course-nightly-", ignore_cleanup_errors=True) as scratch:
        kernel_choice = resolve_kernel(kernel, Path(scratch))
        started, clock = datetime.now(), time.monotonic()
        out_dir = prepare_out_dir(None if out_dir is None else Path(out_dir), root, started)
        temp_dir = Path(scratch) / "tmp"  # the run's TMPDIR; each notebook gets a folder in it (execute_notebook)
        temp_dir.mkdir()
        settings = RunSettings(parameters, kernel_choice, timeout_s, cell_timeout_s,
                               subprocess_env(kernel_choice, str(temp_dir)))
        stream.write(f"course nightly: {len(papermill_jobs(notebooks, labs))} notebook(s), {len(labs)} lab(s) to "
                     f"grade (each solution executed by its autograde), "
                     f"{' '.join(f'{k}={v}' for k, v in parameters.items())}, {jobs} at a time -> {out_dir}\n")
        stop = threading.Event()  # set on Ctrl-C: every running command is stopped
        results, interrupted, environment = _run_with_environment(
            _tasks(notebooks, labs, out_dir, settings, stop), jobs, stream, stop,
            previous_durations(out_dir, started.isoformat(timespec="seconds"))[1])
    run = NightlyRun(started=started.isoformat(timespec="seconds"), duration_s=time.monotonic() - clock,
                     settings={**settings.parameters, "kernel": kernel_choice.description, "jobs": jobs,
                               "timeout per notebook (s)": timeout_s, "timeout per cell (s)": cell_timeout_s},
                     environment=environment, results=results, labs_note=labs_note, interrupted=interrupted)
    paths = write_reports(run, out_dir)
    stream.write(f"{summary_line(run)}; report: {paths['markdown']}\n")
    return run, out_dir


def _run_with_environment(tasks: list, jobs: int, stream, stop: threading.Event,
                          durations_before: dict) -> tuple[list, bool, dict]:
    """Run the tasks while ``labutils.command.doctor`` describes the machine (it imports torch: done in the
    meantime); (results, interrupted, environment)."""
    environment_found: dict = {}
    environment_thread = threading.Thread(target=_collect_environment, args=(environment_found,), daemon=True)
    environment_thread.start()
    progress = Progress(stream, len(tasks))
    try:
        results, interrupted = _run_tasks(tasks, jobs, progress, stop, durations_before)
    finally:
        progress.close()
    environment_thread.join()
    return results, interrupted, environment_found


def _collect_environment(into: dict) -> None:
    """:func:`labutils.command.doctor.environment` into ``into``, or its error: the report is written either way."""
    from labutils.command.doctor import environment

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
        started = datetime.now().isoformat(timespec="microseconds")
        try:
            results = task.run()
        except Exception as exc:  # a bug in the runner for one notebook must not lose the whole night's report
            results = [Result(task.label, task.group, FAILED, 0.0, error=f"course nightly failed on this: {exc!r}",
                              traceback="".join(traceback_module.format_exception(exc)))]
        for result in results:
            result.started = started
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
    parser.add_argument("--site", action="store_true",
                        help="when everything passed, rebuild the course website build/site/ from this run "
                             "(course site); the report links to it")
    from grading.slurm.nightly import add_arguments as add_slurm_arguments

    add_slurm_arguments(parser)  # --slurm PARTITION: the nightly as a batch job (grading.slurm)


def main(args) -> int:
    """``course nightly``: 0 when everything passed, 1 when anything failed, 130 when interrupted."""
    from grading.cli import UsageError

    if args.slurm or args.sbatch_option:
        from grading.slurm.nightly import nightly_on_slurm

        return nightly_on_slurm(args)
    try:
        if args.list:
            return _list(Path(args.root))
        run, out_dir = run_nightly(args.names, root=args.root, out_dir=args.out, quick=args.quick,
                                    world_size=args.world_size, backend=args.backend, kernel=args.kernel,
                                    jobs=args.jobs, timeout_s=args.timeout, cell_timeout_s=args.cell_timeout,
                                    grading=args.grading)
    except NightlyInputError as exc:
        raise UsageError(str(exc)) from None
    if args.site:
        from grading.nightly.publish import publish_site

        print(publish_site(run, out_dir, Path(args.root)), file=sys.stderr)
    if run.interrupted:
        return EXIT_INTERRUPTED
    return 1 if run.failures else 0


def _list(root: Path) -> int:
    labs = discover_labs(root)
    for job in papermill_jobs(discover_notebooks(root), labs):
        print(job.name)
    for lab in labs:
        print(f"{lab.name} (nbgrader)")
    return 0
