"""The "Check my lab" button in a JupyterLab started as `make lab` starts it: on an untouched
released lab it shows every part "not attempted" under a failing verdict; on the same lab filled
with the solution's answers, every part passes; a notebook that is no lab (a chapter, notes) has
no button and no palette entry. The same command is in the Run menu and the command palette.
Screenshots: test-artifacts/browser/check_button_*.png."""
from __future__ import annotations

import pytest
from lab_answers import release_with, solution_answers
from test_landing_page import _make_lab_command

from jupyterlab_ui import NotebookUI
from lab_server import LabServer
from proctree import describe, labutils_processes_under, wait_until_gone

LAB = "lab01_tensor_parallel"
RELEASED = f"labs/{LAB}/{LAB}.ipynb"
COMMAND = "labutils:check-lab"
BUTTON = f".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar-item [data-command='{COMMAND}']"
#: Seconds for the checks' processes to be gone once the server stopped.
CLEANUP_TIMEOUT_S = 15
#: Seconds one check of lab 1 may take from the click (about 20 s on 2 busy cores).
CHECK_TIMEOUT_S = 150
# True once the dialog shows a verdict (the check finished), not its progress line.
_VERDICT_SHOWN_JS = """() => {
  const verdict = document.querySelector('.jp-Dialog .labutils-check-verdict');
  return verdict !== null && /passes|cannot|could not|stopped/.test(verdict.textContent);
}"""


@pytest.fixture(scope="module")
def lab_server(chromium_executable, course_root, tmp_path_factory, artifacts_dir):
    """JupyterLab started with `make lab`'s command and environment (the course's Jupyter configuration)."""
    server = LabServer.start(course_root, tmp_path_factory.mktemp("jupyter-state"),
                             artifacts_dir / "jupyter-server-check-button.log", command=_make_lab_command())
    yield server
    labutils_pids = labutils_processes_under(server.pid)
    server.stop()
    survivors = wait_until_gone(labutils_pids, CLEANUP_TIMEOUT_S)
    assert not survivors, f"labutils processes outlived the Jupyter server:\n{describe(survivors)}"


def _wait_for_verdict(page) -> dict:
    """Wait until the dialog shows the check's verdict; return it and the lines under it."""
    page.wait_for_function(_VERDICT_SHOWN_JS, polling=250, timeout=CHECK_TIMEOUT_S * 1000)
    dialog = page.locator(".jp-Dialog")
    return {"title": dialog.locator(".jp-Dialog-header").inner_text(),
            "verdict": dialog.locator(".labutils-check-verdict").inner_text(),
            "passed": dialog.locator(".labutils-check-part.labutils-check-passed").all_inner_texts(),
            "not attempted": dialog.locator(".labutils-check-part.labutils-check-not-attempted").all_inner_texts(),
            "failed": dialog.locator(".labutils-check-part.labutils-check-failed").all_inner_texts(),
            "text": dialog.locator(".labutils-check").inner_text()}


def _open_tab(page, server, path: str, workspace: str) -> NotebookUI:
    return NotebookUI.open(page.context.new_page(), server, path, workspace)


def test_check_my_lab_from_the_toolbar_the_run_menu_and_the_palette(
        page, lab_server, course_root, make_notebook, workspace, artifacts_dir):
    """Three tabs, as a student with three notebooks open: the untouched lab checked from its
    toolbar button, the finished one from the Run menu while the first runs, and a notebook that
    is no lab, which offers no check in its toolbar or the command palette."""
    filled = release_with(LAB, solution_answers(LAB), course_root / "scratch" / LAB / f"{LAB}.ipynb")
    untouched = NotebookUI.open(page, lab_server, RELEASED, workspace)
    page.locator(BUTTON).click()
    page.locator(".jp-Dialog .labutils-check-verdict", has_text="Checking").wait_for()
    untouched.screenshot(artifacts_dir / "check_button_running.png")
    assert "Close stops the check" in page.locator(".jp-Dialog .labutils-check").inner_text()

    finished = _open_tab(page, lab_server, str(filled.relative_to(course_root)), f"{workspace}-filled")
    finished.menu("Run", "Check my lab")
    notes = _open_tab(page, lab_server, make_notebook("notes", ["print('no lab here')"]), f"{workspace}-notes")
    notes.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar").first.wait_for()
    notes.page.locator(BUTTON).wait_for(state="hidden")
    notes.page.keyboard.press("Control+Shift+c")
    notes.page.locator(".lm-CommandPalette-input").fill("Check my lab")
    notes.screenshot(artifacts_dir / "check_button_not_a_lab.png")
    assert notes.page.locator(".lm-CommandPalette-item", has_text="Check my lab").count() == 0
    notes.page.keyboard.press("Escape")

    untouched_result = _wait_for_verdict(page)
    untouched.screenshot(artifacts_dir / "check_button_untouched.png")
    assert untouched_result["title"] == f"Check my lab: {LAB}.ipynb", untouched_result
    assert untouched_result["verdict"].startswith("Not every part passes"), untouched_result
    assert len(untouched_result["not attempted"]) == 5, untouched_result["text"]
    assert not untouched_result["passed"] and not untouched_result["failed"], untouched_result["text"]
    assert "0 of 5 parts pass their visible checks" in untouched_result["text"]

    finished_result = _wait_for_verdict(finished.page)
    finished.screenshot(artifacts_dir / "check_button_finished.png")
    assert finished_result["verdict"] == "Every part passes its visible checks.", finished_result["text"]
    assert len(finished_result["passed"]) == 5, finished_result["text"]
    assert "5 of 5 parts pass their visible checks" in finished_result["text"]

