"""nbgrader's Execute preprocessor, made to survive a kernel that dies.

Plain nbgrader gives up on the whole submission when the kernel dies (``os._exit``, a
segfault, the out-of-memory killer): nothing is graded, not even the parts that ran. Here
the cell that was running and every later code cell get an error output instead, so the
parts before still count and the rest score zero.

A cell whose output is still arriving when its reply has come (a big print on a busy machine) keeps
what arrived within ``IOPUB_DRAIN_S`` and the notebook goes on; nbgrader's own Execute fails the
whole submission 4 s after the reply.

Every cell's outputs are kept within ``output_bounds`` (a cell that prints megabytes keeps the first
``MAX_CELL_CHARS`` and a line saying what was cut), while it runs and after.
"""
from __future__ import annotations

from nbclient.exceptions import DeadKernelError
from traitlets import Bool, Integer
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute

from grading.autograder.output_bounds import (CUT_MARK, MAX_CELL_CHARS, MAX_JSON_DEPTH, OutputBudget, bound_outputs,
                                              json_depth, output_chars)

KERNEL_DIED = "KernelDied"
#: Seconds a cell's output may go on arriving after the kernel's reply before the next cell runs.
IOPUB_DRAIN_S = 30
NOT_RUN = "not run"


def _error_output(message: str):
    return new_output("error", ename=KERNEL_DIED, evalue=message, traceback=[f"{KERNEL_DIED}: {message}"])


class ResilientExecute(Execute):
    """Execute every cell; after the kernel dies, mark the remaining code cells as failed."""

    iopub_timeout = Integer(IOPUB_DRAIN_S, help="seconds a cell's output may arrive after its reply").tag(config=True)
    raise_on_iopub_timeout = Bool(False, help="fail the submission when a cell's output arrives later "
                                              "than iopub_timeout (False: keep what came)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._died_in_cell = None
        self._budget, self._cell_chars = OutputBudget(), 0
        return super().preprocess(nb, resources, km)

    def process_message(self, msg, cell, cell_index):
        """nbclient's handler of a kernel message, given display data nested past ``MAX_JSON_DEPTH``
        as a line saying so (nbformat would recurse through it and fail the whole notebook)."""
        data = msg.get("content", {}).get("data")
        if data is not None and json_depth(data) > MAX_JSON_DEPTH:
            content = dict(msg["content"], data={"text/plain": f"{CUT_MARK} display data nested deeper than "
                                                               f"{MAX_JSON_DEPTH} levels]"})
            msg = dict(msg, content=content)
        return super().process_message(msg, cell, cell_index)

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's output handler, which stops keeping a cell's outputs well past its bound (the
        rest would only be cut afterwards: memory and time stay bounded while the cell prints)."""
        if self._cell_chars > 2 * MAX_CELL_CHARS:
            return None
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            self._cell_chars += output_chars(out)
        return out

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        self._cell_chars = 0
        try:
            return self._run_cell(cell, resources, index)
        finally:
            cell.outputs = bound_outputs(cell.outputs, self._budget)

    def _run_cell(self, cell, resources, index):
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
