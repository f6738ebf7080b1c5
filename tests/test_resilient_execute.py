"""The autograder's Execute preprocessor (``grading.autograder.execute.ResilientExecute``) on a real
kernel: a cell whose output is still arriving after its reply costs nothing but that output, where
nbgrader's own Execute fails the whole submission (``CellTimeoutError`` 4 s after the reply, which a
big print reaches on a busy machine)."""
from __future__ import annotations

import nbformat
import pytest
from nbclient.exceptions import CellTimeoutError
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.preprocessors import Execute

from grading.autograder.execute import IOPUB_DRAIN_S, ResilientExecute

#: Prints 20 MiB in many writes: at its reply, much of it is still on its way.
BIG_PRINT = "import sys\nfor _ in range(2000):\n    sys.stdout.write('y' * 10_000); sys.stdout.flush()"


def _notebook():
    return new_notebook(cells=[new_code_cell(BIG_PRINT), new_code_cell("print('the next cell ran')")],
                        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def test_output_arriving_after_the_reply_is_waited_for_then_the_notebook_goes_on():
    assert ResilientExecute().iopub_timeout == IOPUB_DRAIN_S and not ResilientExecute().raise_on_iopub_timeout
    notebook, _ = ResilientExecute(iopub_timeout=0).preprocess(_notebook(), {})  # no wait at all: the worst case
    assert "shell.execute_reply" in notebook.cells[1].metadata.execution  # it ran (with no wait its output is late too)


def test_nbgraders_own_execute_fails_the_submission_there():
    """What the setting above guards against, with the same wait of 0 s."""
    with pytest.raises(CellTimeoutError, match="IOPub"):
        Execute(iopub_timeout=0).preprocess(_notebook(), {})
