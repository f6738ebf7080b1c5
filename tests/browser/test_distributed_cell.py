"""A `%%distributed -n 2` cell run from JupyterLab shows every rank's output, prefixed by rank."""
from __future__ import annotations

import re
import sys

from jupyterlab_ui import NotebookUI

CELLS = [
    "import sys\nprint(sys.executable)",
    "%load_ext labutils",
    "%%distributed -n 2\nprint(f'hello from rank {rank} of {world_size}')",
]


def test_both_ranks_print_into_the_cell(page, lab_server, make_notebook, workspace, artifacts_dir):
    lab = NotebookUI.open(page, lab_server, make_notebook("distributed_cell", CELLS), workspace)
    lab.run_all()
    lab.wait_until_run_finished(timeout_s=90)
    lab.screenshot(artifacts_dir / "distributed_cell.png")

    assert lab.output_text(0).strip() == sys.executable, "the kernel is not the course's venv python"
    output = lab.output_text(2)
    for rank in (0, 1):
        assert re.search(rf"^\[rank {rank}\] hello from rank {rank} of 2$", output, re.MULTILINE), output
    assert lab.cells_with_errors() == [], output
