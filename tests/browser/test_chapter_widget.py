"""A chapter's widget is alive in JupyterLab: after Run All, moving a slider with the keyboard
redraws the figure or readout it drives (chapter 9's pipeline explorer)."""
from __future__ import annotations

from jupyterlab_ui import NotebookUI

CHAPTER = "notebooks/09_pipeline_parallelism.ipynb"
#: Seconds Run All may take on the chapter (about 30 s on 2 busy cores in QUICK mode).
RUN_ALL_TIMEOUT_S = 180
#: Key presses on the slider: enough to change any integer or float slider's value.
KEY_PRESSES = 3
#: Seconds the kernel gets to redraw after the slider moved.
REDRAW_TIMEOUT_S = 30


def test_moving_a_slider_redraws_the_chapter_widget(page, lab_server, workspace, artifacts_dir):
    lab = NotebookUI.open(page, lab_server, CHAPTER, workspace)
    lab.run_all()
    lab.wait_until_run_finished(timeout_s=RUN_ALL_TIMEOUT_S)
    assert lab.cells_with_errors() == [], "the chapter fails under Run All"

    cell = lab.first_cell_with(".widget-hslider")
    slider = lab.output_area(cell).locator(".widget-hslider [role=slider]").first
    lab.scroll_to_cell(cell)
    before_value = slider.get_attribute("aria-valuenow")
    before = lab.widget_result(cell)
    assert before["images"] or before["text"].strip(), "the widget shows nothing besides its sliders"
    lab.screenshot(artifacts_dir / "chapter_widget_before.png")

    slider.focus()
    for _ in range(KEY_PRESSES):
        page.keyboard.press("ArrowRight")
    assert slider.get_attribute("aria-valuenow") != before_value, "the slider did not move"
    lab.wait_for_widget_change(cell, before, REDRAW_TIMEOUT_S)
    lab.wait_until_run_finished(timeout_s=REDRAW_TIMEOUT_S)
    lab.screenshot(artifacts_dir / "chapter_widget_after.png")
    assert lab.cells_with_errors() == []
