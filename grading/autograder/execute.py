"""nbgrader's Execute preprocessor, made to survive a kernel that dies.

Plain nbgrader gives up on the whole submission when the kernel dies (``os._exit``, a
segfault, the out-of-memory killer): nothing is graded, not even the parts that ran. Here
the cell that was running and every later code cell get an error output instead, so the
parts before still count and the rest score zero.
"""
from __future__ import annotations

from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute

KERNEL_DIED = "KernelDied"
NOT_RUN = "not run"


def _error_output(message: str):
    return new_output("error", ename=KERNEL_DIED, evalue=message, traceback=[f"{KERNEL_DIED}: {message}"])


class ResilientExecute(Execute):
    """Execute every cell; after the kernel dies, mark the remaining code cells as failed."""

    def preprocess(self, nb, resources=None, km=None):
        self._died_in_cell = None
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if self._died_in_cell is not None:
            cell.outputs = [_error_output(f"{NOT_RUN}: the kernel died while running cell {self._died_in_cell}")]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_in_cell = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id") or index
            self.log.warning("The kernel died while running cell %d; the remaining cells are marked as failed", index)
            cell.outputs.append(_error_output(
                "the kernel died while running this cell (os._exit, a crash, or out of memory)"))
            return cell, resources
