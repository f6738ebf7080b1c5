"""Kernel > Interrupt stops a multi-rank cell's ranks; Kernel > Restart brings the kernel back
and leaves no labutils process behind."""
from __future__ import annotations

from jupyterlab_ui import NotebookUI
from proctree import (children_by_parent, command_line, describe, labutils_processes_under,
                      rank_processes, wait_until_gone)

CELLS = [
    "%load_ext labutils",
    "%%distributed -n 2\nimport time\nprint(f'rank {rank} is spinning', flush=True)\n"
    "while True:\n    time.sleep(0.05)",
    "print('the kernel answers', 6 * 7)",
]
#: Seconds for the ranks to be gone after an interrupt.
STOP_TIMEOUT_S = 10


def _kernel_pids(server) -> set[int]:
    """The server's kernel processes (its direct children running ipykernel)."""
    return {p for p in children_by_parent().get(server.pid, []) if "ipykernel" in command_line(p)}


def test_interrupt_then_restart_leaves_no_rank(page, lab_server, make_notebook, workspace, artifacts_dir):
    lab = NotebookUI.open(page, lab_server, make_notebook("interrupt_restart", CELLS), workspace)
    lab.run_all()
    lab.wait_for_output(1, r"\[rank 0\] rank 0 is spinning", timeout_s=90)
    lab.wait_for_output(1, r"\[rank 1\] rank 1 is spinning", timeout_s=10)
    started = labutils_processes_under(lab_server.pid)
    ranks = rank_processes(started)
    assert len(ranks) == 2, f"expected 2 ranks running, found:\n{describe(started)}"
    old_kernels = _kernel_pids(lab_server)
    assert old_kernels, "no kernel process found under the Jupyter server"

    lab.menu("Kernel", "Interrupt Kernel")
    lab.wait_until_run_finished(timeout_s=STOP_TIMEOUT_S)
    lab.screenshot(artifacts_dir / "interrupt.png")
    assert "KeyboardInterrupt" in lab.output_text(1), lab.output_text(1)
    survivors = wait_until_gone(ranks, STOP_TIMEOUT_S)
    assert not survivors, f"ranks still running after the interrupt:\n{describe(survivors)}"

    lab.menu("Kernel", "Restart Kernel")
    lab.accept_dialog("Restart")
    lab.wait_until_run_finished(timeout_s=60)
    lab.cells.nth(2).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    lab.wait_for_output(2, r"the kernel answers 42", timeout_s=60)
    lab.screenshot(artifacts_dir / "restart.png")

    assert not (old_kernels & _kernel_pids(lab_server)), "the restarted kernel is the old process"
    survivors = wait_until_gone(started, STOP_TIMEOUT_S)
    assert not survivors, f"labutils processes survived the restart:\n{describe(survivors)}"
    assert not labutils_processes_under(lab_server.pid)
