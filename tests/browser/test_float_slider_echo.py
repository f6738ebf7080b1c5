"""Float sliders in JupyterLab send their value back once they render; figure_explorer draws once.

When a FloatSlider or FloatLogSlider first renders, the browser snaps its value to
``min + k * step`` in JavaScript and sends the result to the kernel (0.4 with step 0.05 comes
back as 0.39999999999999997); an IntSlider sends nothing. ``ipywidgets.interact`` therefore
runs its function a second time, outside the cell that showed it, after Run All has moved
on; with pyplot that second draw shares pyplot's global figure state with whatever runs
then. ``labutils.widgets`` ignores that echo (the same float within rounding) and draws
without pyplot. Both halves are checked here in a scratch notebook: interact sees the echo,
figure_explorer draws exactly once.
"""
from __future__ import annotations

from jupyterlab_ui import NotebookUI

#: Seconds for the echo to reach the kernel after Run All finished.
SETTLE_S = 3
CELLS = [
    "import ipywidgets as widgets\nimport numpy as np\nfrom matplotlib.figure import Figure\n"
    "from labutils.widgets import figure_explorer\nCALLS = {'interact': [], 'explorer': []}",
    # the pattern that failed: interact, float sliders, a log-log plot (here without pyplot)
    "@widgets.interact(bw=widgets.FloatSlider(value=0.4, min=0.05, max=0.8, step=0.05))\n"
    "def with_interact(bw):\n    CALLS['interact'].append(bw)\n"
    "    print(f'interact call {len(CALLS[\"interact\"])}: bw = {bw!r}')",
    "def loglog(alpha_us, bw):\n    CALLS['explorer'].append((alpha_us, bw))\n"
    "    fig = Figure(figsize=(5, 3), layout='constrained')\n    ax = fig.add_subplot()\n"
    "    sizes = np.logspace(0, 9, 50)\n    ax.loglog(sizes, alpha_us * 1e-6 + sizes / (bw * 1e9))\n"
    "    ax.set(xlabel='S (B)', ylabel='T (s)')\n    return fig, f'draw number {len(CALLS[\"explorer\"])}'\n\n\n"
    "figure_explorer(loglog, alpha_us=widgets.FloatLogSlider(value=10, base=10, min=-1, max=3),\n"
    "                bw=widgets.FloatSlider(value=0.4, min=0.05, max=0.8, step=0.05))",
    "print('done')",
]


def test_float_sliders_echo_and_figure_explorer_draws_once(page, lab_server, make_notebook, workspace):
    lab = NotebookUI.open(page, lab_server, make_notebook("float_slider_echo", CELLS), workspace)
    lab.run_all()
    lab.wait_until_run_finished(timeout_s=90)
    page.wait_for_timeout(SETTLE_S * 1000)
    lab.wait_until_run_finished(timeout_s=30)
    assert lab.cells_with_errors() == []
    interact_output = lab.output_text(1)
    assert "interact call 2: bw = 0.39999999999999997" in interact_output, (
        "the browser no longer sends a float slider's snapped value back: " + interact_output)
    readout = lab.output_text(2)
    assert "draw number 1" in readout and "draw number 2" not in readout, readout
    assert lab.output_area(2).locator("img").first.evaluate("img => img.naturalWidth") > 0
