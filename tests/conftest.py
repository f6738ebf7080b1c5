"""Shared fixtures: every test that starts ranks must leave no process behind; the chapters'
QUICK run, executed once for every test that reads it (the chapters' tests, the website); a
one-node Slurm cluster for each module of the Slurm tests.

Every launch checks NCCL's rules (``LABUTILS_STRICT_COLLECTIVES=1``, see labutils.ranks.strict),
and a run that does not select GPU tests (``-m "gpu or multigpu"``, as ``make gpu-check``
does) sees no GPU at all (``CUDA_VISIBLE_DEVICES=""``, set before torch initialises CUDA), so
``make test`` runs the same way on a GPU node as on a laptop.
"""
from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from gpu_selection import selects_gpu_tests

import grading  # noqa: F401  (first: the tests' own nbformat imports then skip jsonschema's IRI grammar)
from grading.autograder.nbgrader_cli import path_with_this_interpreter_first
from grading.paths import COURSE_ROOT, with_course_on_pythonpath


def pytest_configure(config):
    os.environ.setdefault("LABUTILS_STRICT_COLLECTIVES", "1")
    # Grading a class in a test's own process puts this interpreter's bin/ first on PATH (nbgrader
    # runs alembic from there) and, loading grading/nbgrader_config.py, the course root first on
    # PYTHONPATH (for the kernels nbgrader starts); done once here, both leave the environment as
    # each test found it.
    os.environ["PATH"] = path_with_this_interpreter_first()
    os.environ.update(with_course_on_pythonpath(dict(os.environ), COURSE_ROOT))
    if selects_gpu_tests(config.getoption("markexpr") or ""):
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise pytest.UsageError("CUDA was initialised before the tests could hide the GPUs")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


#: Variables pytest itself changes from one phase of a test to the next.
PYTEST_OWN_VARIABLES = ("PYTEST_CURRENT_TEST",)
#: Variables a library sets in its own process the first time it needs them (torch's compiler
#: records its cache folder): appearing is fine, changing once set is not.
SET_ONCE_BY_LIBRARIES = ("TORCHINDUCTOR_CACHE_DIR",)


def _changed_variables(before: dict, after: dict) -> list:
    """Names whose values differ between two snapshots of the environment, less those pytest and
    the libraries change on their own."""
    return sorted(name for name in set(before) | set(after)
                  if before.get(name) != after.get(name) and name not in PYTEST_OWN_VARIABLES
                  and not (name in SET_ONCE_BY_LIBRARIES and name not in before))


@pytest.fixture(autouse=True)
def environment_left_as_found():
    """A test that leaves this process's environment changed fails, and the environment is put back:
    every later test of the worker (and every rank, kernel or template it starts, which inherit it)
    would otherwise run differently depending on which tests ran before it on the same worker."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = _changed_variables(before, after)
    if changed:
        os.environ.clear()
        os.environ.update(before)
        pytest.fail("the test left the environment changed: "
                    + ", ".join(f"{name}={before.get(name)!r} -> {after.get(name)!r}" for name in changed))


@pytest.fixture
def lenient_collectives(monkeypatch):
    """This test is about what happens without the strict checks (gloo's own behaviour)."""
    monkeypatch.delenv("LABUTILS_STRICT_COLLECTIVES", raising=False)

from judge_scratch import new_scratch, ranks_write_in
from proctree import describe, descendants, wait_until_gone

pytest_plugins = ["time_by_group"]
#: seconds a test that reads the chapters' QUICK run may take, the run's building included (11
#: notebooks, two at a time, each under the run's own 600 s limit)
QUICK_RUN_TIMEOUT_S = 1800

def parallel_group(item) -> str:
    """The parallel worker group of a test: the tests of one file share their module's fixtures
    (a browser module its Jupyter server and Chromium); every test that reads the chapters' QUICK
    run shares that one run; the hub's, Slurm's and the ordinary account's tests run one after
    another (the hub closes the checkout to other accounts while it runs). Each group runs whole on
    one worker, so its fixtures are built once."""
    folder = Path(str(item.path)).resolve().relative_to(Path(__file__).resolve().parent)
    if _reads_quick_chapter_run(item):
        return "chapters"
    if folder.parts[0] == "hub" or folder.name.startswith("test_slurm") or folder.name == "test_sandbox_user.py":
        return "hub"  # the hub closes the checkout to other accounts while it runs; one Slurm cluster at a time
    return folder.as_posix()


def _reads_quick_chapter_run(item) -> bool:
    """Whether the test asks for the QUICK chapter run: as a fixture, or (marked ``quick_chapter_run``)
    through one that asks for it at run time. Either way it must share the one run of the session."""
    return "quick_chapter_run" in item.fixturenames or item.get_closest_marker("quick_chapter_run") is not None


def pytest_collection_modifyitems(config, items):
    """Under parallel workers (``pytest -n N --dist loadgroup``), keep each group on one worker: each
    test is marked with its group, and a worker names it ``NODEID@GROUP``, the id the scheduler deals
    by (``_named_by_group``). The first test to read the chapters' QUICK run builds it in its setup:
    those tests get :data:`QUICK_RUN_TIMEOUT_S` instead of the suite's 300 s per test, since the run
    has its own limits per notebook and per cell and takes longer on a busy machine."""
    for item in items:
        if _reads_quick_chapter_run(item) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(QUICK_RUN_TIMEOUT_S))
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            item.add_marker(pytest.mark.xdist_group(parallel_group(item)))
        if getattr(config.option, "loadgroup", False):  # set on the workers only (no such option without -n)
            _named_by_group(items)


def _named_by_group(items) -> None:
    """Give each test its ``@GROUP`` id. pytest-xdist 3.8 does it by setting ``item._nodeid``, which
    pytest 9 no longer reads (a node's id is ``item._id``): without this every test is dealt on its
    own, and a group's module fixtures are built again on every worker that gets one of its tests."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest 8: xdist's own hook names them
        return
    for item in items:
        group = item.get_closest_marker("xdist_group").args[0]
        if not item.nodeid.endswith(f"@{group}"):
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


def _assert_all_gone(processes, timeout_s: float) -> None:
    left = wait_until_gone(processes, timeout_s=timeout_s)
    assert not left, f"processes left behind:\n{describe(left)}"


def _stop_labutils_and_check_no_leftovers(timeout_s: float) -> None:
    """Stop labutils entirely and assert that no child process survives ``timeout_s`` seconds."""
    import labutils

    labutils.shutdown()
    _assert_all_gone(descendants(), timeout_s)


def _stop_ranks_and_check_only_the_template_is_left(timeout_s: float) -> None:
    """Stop every pool's ranks and assert that, within ``timeout_s`` seconds, no child process survives
    but this process's rank template, itself with no child left: the next test forks from it as a
    notebook's next launch does (a template that runs inside a wrapper command is stopped too)."""
    from labutils.ranks import _starters, pool

    for live in list(pool._live_pools):
        live.shutdown()
    starter = _starters.current_starter()
    kept = (isinstance(starter, _starters.TemplateStarter) and not starter.wrapper and starter.alive()
            and starter.hello is not None)
    if not kept:
        _stop_labutils_and_check_no_leftovers(timeout_s)
        return
    _assert_all_gone(descendants() - {starter.pid}, timeout_s)


@pytest.fixture
def no_leftover_processes(no_leftover_processes_after_the_module):
    """After the test, stop its ranks and assert that no child process survives but the rank template;
    after the worker's last test, that too (``no_leftover_processes_after_the_session``)."""
    yield
    _stop_ranks_and_check_only_the_template_is_left(5.0)


@pytest.fixture(scope="module")
def no_leftover_processes_after_the_module(no_leftover_processes_after_the_session):
    """For a module whose tests are checked together: after its last test, stop its ranks and assert
    that no child process survives but the rank template, which the next module's first launch reuses
    as a notebook's next cell does (a new one would import torch again, about 2 s of CPU)."""
    yield
    _stop_ranks_and_check_only_the_template_is_left(10.0)


@pytest.fixture(scope="session")
def no_leftover_processes_after_the_session():
    """After the last test of the session (of the worker, under ``pytest -n``) that launched ranks,
    stop labutils and assert that no child process survives."""
    yield
    _stop_labutils_and_check_no_leftovers(10.0)


@pytest.fixture(scope="module")
def judge_in_this_process():
    """For a module that runs the judge's ranks from this process (not through ``course grade``): their
    folders go with the module (``judge_scratch``)."""
    folder = new_scratch()
    try:
        with ranks_write_in(folder):
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster (``slurm_cluster``) for the module's tests, stopped after them; they
    skip with the reason where none can start here."""
    from slurm_cluster import SlurmCluster, missing

    why = missing()
    if why:
        pytest.skip(why)
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def quick_chapter_run(tmp_path_factory):
    """(run, folder) of one QUICK nightly run of the start page and the ten chapters (2 ranks,
    two notebooks at a time, no lab grading), as `course nightly` runs them."""
    from grading.nightly.runner import run_nightly

    root = Path(__file__).resolve().parents[1]
    chapters = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return run_nightly(
        [p.stem for p in chapters], root=root, out_dir=tmp_path_factory.mktemp("nightly"), quick=True,
        world_size=2, backend="gloo", jobs=2, timeout_s=600, cell_timeout_s=300, grading=False,
        progress_stream=io.StringIO(),
    )
