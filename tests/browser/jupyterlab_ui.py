"""What a student does in JupyterLab, as Playwright calls: open a notebook, use the menus,
wait for the kernel, read a cell's output, take a screenshot.

    lab = NotebookUI.open(page, server, "notebooks/09_pipeline_parallelism.ipynb", workspace="t1")
    lab.menu("Run", "Run All Cells")
    lab.wait_until_run_finished(timeout_s=120)
    print(lab.output_text(3))

Selectors are JupyterLab 4's (``.jp-NotebookPanel``, ``.jp-Cell``, ``.jp-OutputArea``,
``.jp-Notebook-ExecutionIndicator[data-status]``) and ipywidgets 8's (``.widget-hslider``,
``[role=slider]``). Every wait has a timeout in seconds and fails with what it was waiting for.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

#: The visible notebook panel (JupyterLab keeps hidden panels of other tabs in the page).
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
#: Milliseconds between checks while waiting in the page.
POLL_MS = 200

# True when the visible notebook's kernel is connected, idle, and no cell is queued or running
# ("[*]" prompt). The kernel name reads "No Kernel" until a kernel is attached.
_RUN_FINISHED_JS = """(panel) => {
  const root = document.querySelector(panel);
  if (!root) return false;
  const indicator = root.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = root.querySelector('.jp-KernelName');
  if (!indicator || indicator.dataset.status !== 'idle') return false;
  if (!kernel || /no kernel/i.test(kernel.innerText)) return false;
  return ![...root.querySelectorAll('.jp-InputArea-prompt')].some(p => p.innerText.includes('*'));
}"""

# True once the visible notebook has started working: a cell queued or running, or the kernel busy.
_RUN_STARTED_JS = """(panel) => {
  const root = document.querySelector(panel);
  if (!root) return false;
  const indicator = root.querySelector('.jp-Notebook-ExecutionIndicator');
  if (indicator && indicator.dataset.status === 'busy') return true;
  return [...root.querySelectorAll('.jp-InputArea-prompt')].some(p => p.innerText.includes('*'));
}"""
#: Seconds a command gets to visibly start before we conclude it already finished.
START_GRACE_S = 5


# What a widget cell shows besides its controls: the text and images of its output area with
# every slider (its label and its own readout of the value) left out.
_WIDGET_RESULT_JS = """(area) => {
  const copy = area.cloneNode(true);
  copy.querySelectorAll('.widget-slider').forEach(e => e.remove());
  const images = [...copy.querySelectorAll('img')].map(img => img.getAttribute('src'));
  return {text: copy.textContent, images: images};
}"""
# True once the widget shows something other than ``before`` (a _WIDGET_RESULT_JS value).
_WIDGET_CHANGED_JS = f"""([area, before]) => {{
  const now = ({_WIDGET_RESULT_JS})(area);
  return now.text !== before.text || JSON.stringify(now.images) !== JSON.stringify(before.images);
}}"""


@dataclass
class NotebookUI:
    """One notebook open in a JupyterLab tab of a Playwright ``page``."""

    page: object
    server: object
    path: str

    @classmethod
    def open(cls, page, server, path: str, workspace: str, timeout_s: float = 90) -> "NotebookUI":
        """Open ``path`` (relative to the server's root) in a fresh workspace and wait for its kernel.

        A workspace of its own keeps JupyterLab from reopening the tabs of earlier tests.
        """
        page.goto(server.url(f"lab/workspaces/{workspace}/tree/{path}"))
        ui = cls(page, server, path)
        ui.panel.locator(".jp-Notebook").wait_for(timeout=timeout_s * 1000)
        ui.wait_until_kernel_connected(timeout_s)
        ui.wait_until_run_finished(timeout_s)
        return ui

    def wait_until_kernel_connected(self, timeout_s: float) -> None:
        """Wait until the server has a kernel for this notebook and the page has opened its websocket.

        The page alone cannot tell: until its session exists, the toolbar shows the default "idle" and
        the preferred kernel's name, and Run All then clears every prompt and runs nothing.
        """
        deadline = time.monotonic() + timeout_s
        sessions: list[dict] = []
        while time.monotonic() < deadline:
            sessions = [s for s in self.server.sessions() if s.get("path") == self.path]
            if any((s.get("kernel") or {}).get("connections", 0) >= 1 for s in sessions):
                return
            self.page.wait_for_timeout(POLL_MS)
        raise AssertionError(f"{self.path}: no kernel connected to the page after {timeout_s:.0f} s; "
                             f"the server's sessions for it: {sessions}")

    @property
    def panel(self):
        return self.page.locator(PANEL)

    @property
    def cells(self):
        return self.panel.locator(".jp-Notebook .jp-Cell")

    def menu(self, top: str, item: str) -> None:
        """Click a menu bar entry, then the item whose label starts with ``item`` (e.g. "Restart Kernel")."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
        label = re.compile(f"^{re.escape(item)}")
        self.page.locator(".lm-Menu-itemLabel", has_text=label).first.click()

    def accept_dialog(self, button: str, timeout_s: float = 10) -> None:
        """Click ``button`` (e.g. "Restart") in the modal dialog JupyterLab shows."""
        dialog = self.page.locator(".jp-Dialog")
        dialog.wait_for(timeout=timeout_s * 1000)
        dialog.locator("button", has_text=re.compile(f"^{re.escape(button)}$")).click()
        dialog.wait_for(state="detached", timeout=timeout_s * 1000)

    def run_all(self) -> None:
        """Run > Run All Cells, as a student does first; returns once the run has started."""
        self.menu("Run", "Run All Cells")
        self.wait_until_started()

    def wait_until_started(self) -> None:
        """Wait until a cell is queued or the kernel is busy (a very short run may be missed: fine)."""
        try:
            self.page.wait_for_function(_RUN_STARTED_JS, arg=PANEL, polling=50, timeout=START_GRACE_S * 1000)
        except PlaywrightTimeoutError:
            pass

    def wait_until_run_finished(self, timeout_s: float) -> None:
        """Wait until the kernel is idle and no cell is queued or running."""
        try:
            self.page.wait_for_function(_RUN_FINISHED_JS, arg=PANEL, polling=POLL_MS, timeout=timeout_s * 1000)
        except PlaywrightTimeoutError:
            raise AssertionError(f"{self.path}: the kernel was not idle with every cell finished "
                                 f"after {timeout_s:.0f} s") from None

    def wait_for_output(self, cell_index: int, pattern: str, timeout_s: float) -> str:
        """Wait until cell ``cell_index``'s output matches the regex ``pattern``; return the output text."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.output_text(cell_index)
            if re.search(pattern, text):
                return text
            self.page.wait_for_timeout(POLL_MS)
        raise AssertionError(f"cell {cell_index} of {self.path} never showed {pattern!r} "
                             f"within {timeout_s:.0f} s; its output:\n{text}")

    def output_area(self, cell_index: int):
        return self.cells.nth(cell_index).locator(".jp-Cell-outputArea")

    def output_text(self, cell_index: int) -> str:
        """The text a student reads under cell ``cell_index`` ("" when it has no output)."""
        area = self.output_area(cell_index)
        return area.inner_text() if area.count() else ""

    def cell_source(self, cell_index: int) -> str:
        return self.cells.nth(cell_index).locator(".jp-InputArea-editor").inner_text()

    def save(self, timeout_s: float = 30) -> None:
        """Save the notebook (Ctrl+S) and wait for the server's answer to that save: the file is
        whole on disk only then (the tab's unsaved-changes mark says nothing when there were none)."""
        def is_save(response) -> bool:
            return response.request.method == "PUT" and "/api/contents/" in response.url
        with self.page.expect_response(is_save, timeout=timeout_s * 1000) as saved:
            self.page.keyboard.press("Control+s")
        assert saved.value.ok, f"saving {self.path} failed: HTTP {saved.value.status}"

    def cells_with_errors(self) -> list[int]:
        """Indices of cells with an error output, read from the saved notebook (the page renders
        exceptions and stderr alike)."""
        self.save()
        cells = self.server.notebook(self.path)["cells"]
        return [index for index, cell in enumerate(cells)
                if any(out["output_type"] == "error" for out in cell.get("outputs", []))]

    def first_cell_with(self, selector: str) -> int:
        """Index of the first cell whose output contains ``selector`` (AssertionError if none)."""
        for index in range(self.cells.count()):
            if self.output_area(index).locator(selector).count():
                return index
        raise AssertionError(f"no cell of {self.path} shows {selector!r}")

    def widget_result(self, cell_index: int) -> dict:
        """What cell ``cell_index``'s widget shows besides its sliders: {"text": ..., "images": [src, ...]}."""
        return self.output_area(cell_index).evaluate(_WIDGET_RESULT_JS)

    def wait_for_widget_change(self, cell_index: int, before: dict, timeout_s: float) -> dict:
        """Wait until the cell's widget shows something other than ``before``; return what it shows."""
        area = self.output_area(cell_index).element_handle()
        try:
            self.page.wait_for_function(_WIDGET_CHANGED_JS, arg=[area, before], polling=POLL_MS,
                                        timeout=timeout_s * 1000)
        except PlaywrightTimeoutError:
            raise AssertionError(f"the widget in cell {cell_index} of {self.path} still shows the same "
                                 f"figure and text {timeout_s:.0f} s after its slider moved") from None
        return self.widget_result(cell_index)

    def screenshot(self, path: Path) -> Path:
        """Save what the student sees now (the window) as a PNG at ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path

    def scroll_to_cell(self, cell_index: int) -> None:
        """Scroll so that the top of cell ``cell_index`` is in view."""
        self.cells.nth(cell_index).evaluate("cell => cell.scrollIntoView({block: 'start'})")

    def scroll_to_output_end(self, cell_index: int) -> None:
        """Scroll so that the last line of cell ``cell_index``'s output is in view."""
        self.output_area(cell_index).evaluate("area => area.scrollIntoView({block: 'end'})")
