"""Fixtures for the browser tests: Debian's Chromium, a throwaway JupyterLab server, a page.

The server serves a temporary copy of the course (notebooks/ and labs/) plus scratch
notebooks that tests write, so running cells in the browser never changes the repository
(JupyterLab autosaves). Screenshots land in test-artifacts/browser/ (gitignored).

Chromium's headless build comes from apt (``install_chromium.sh``, ``headless_chromium``); the tests
skip only where it cannot be installed (not root, or no apt-get), never because a download failed.
The pages of one test module share a browser profile (its caches: ``headless_chromium.
launch_with_shared_cache``); each test gets fresh tabs, closed after it.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

import headless_chromium
from course_paths import ARTIFACTS, REPO, VIEWPORT
from lab_server import LabServer
from proctree import describe, labutils_processes_under, wait_until_gone

#: Course folders copied into the server's root.
COURSE_FOLDERS = ("notebooks", "labs")
#: Seconds for ranks to be gone once their kernel is shut down.
CLEANUP_TIMEOUT_S = 15
PYTHON3_KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents and "page" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (tests/browser)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so the page fixture knows whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """Path of Debian's headless Chromium, installed with apt on first use."""
    reason = headless_chromium.why_missing()
    if reason:
        pytest.skip(f"browser tests need Chromium: {reason}")
    return headless_chromium.CHROMIUM


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def course_root(tmp_path_factory) -> Path:
    """A temporary copy of the course folders the student opens (notebooks/, labs/)."""
    root = tmp_path_factory.mktemp("course")
    for folder in COURSE_FOLDERS:
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, root / folder,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (root / "scratch").mkdir()
    return root


# The server and the browser live for one test module, not the session: once tests/browser is
# done, the rest of the suite checks that no process of its own is left, and must find none.
@pytest.fixture(scope="module")
def lab_server(chromium_executable, course_root, tmp_path_factory, artifacts_dir, request):
    """``jupyter lab`` on the course copy; stopped by its pid; no labutils process may outlive it."""
    server = LabServer.start(course_root, tmp_path_factory.mktemp("jupyter-state"),
                             artifacts_dir / f"jupyter-server-{request.module.__name__}.log")
    yield server
    labutils_pids = labutils_processes_under(server.pid)
    server.stop()
    survivors = wait_until_gone(labutils_pids, CLEANUP_TIMEOUT_S)
    assert not survivors, f"labutils processes outlived the Jupyter server:\n{describe(survivors)}"


@pytest.fixture(scope="module")
def browser(chromium_executable, tmp_path_factory):
    """The module's Chromium: one browser context (``launch_with_shared_cache``) whose tabs the tests open."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = headless_chromium.launch_with_shared_cache(playwright, tmp_path_factory.mktemp("chromium-profile"),
                                                             viewport=VIEWPORT)
        context.set_default_timeout(30_000)
        yield context
        context.close()


@pytest.fixture
def page(browser, lab_server, artifacts_dir, request):
    """A fresh browser tab; on failure its last view is saved as FAILED-<test>.png.

    Afterwards every tab is closed, every kernel the test started is shut down and its ranks must be gone.
    """
    tab = browser.new_page()
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        tab.screenshot(path=str(artifacts_dir / f"FAILED-{request.node.name}.png"))
    for opened in browser.pages:
        opened.close()
    labutils_pids = labutils_processes_under(lab_server.pid)
    lab_server.shutdown_kernels()
    survivors = wait_until_gone(labutils_pids, CLEANUP_TIMEOUT_S)
    assert not survivors, f"ranks outlived their kernel's shutdown:\n{describe(survivors)}"


@pytest.fixture
def workspace(request) -> str:
    """A JupyterLab workspace name of this test's own (no tabs restored from other tests)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)


@pytest.fixture
def make_notebook(course_root):
    """Write a scratch notebook of code cells; returns its path relative to the server's root."""

    def make(name: str, cells: list[str]) -> str:
        notebook = nbformat.v4.new_notebook(metadata={"kernelspec": PYTHON3_KERNELSPEC})
        notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        path = course_root / "scratch" / f"{name}.ipynb"
        nbformat.write(notebook, path)
        return str(path.relative_to(course_root))

    return make
