"""`labutils check LAB.ipynb`: where a lab stands, part by part, from its visible checks.

    labutils check labs/lab02_collectives/lab02_collectives.ipynb

The notebook runs top to bottom in a fresh kernel, as the grader runs it (every cell, on
after an error, in the notebook's folder), with the graded cells left out: their hidden
tests exist only on the grader's side. Each graded part (the cells up to and including one
graded cell) is then reported on one line:

- **passed**: its answer cells ran and every visible check below them passed;
- **failed**: an answer cell or a visible check raised; the check's own message is shown. A
  cell still running after ``--timeout`` seconds is interrupted and fails its part, and the
  next parts still run; a kernel that dies fails its part, and every later part says it did
  not run;
- **not attempted**: an answer cell still raises ``NotImplementedError`` (nothing written).

The exit status is 0 only when every part passed. Passing the visible checks is necessary,
not sufficient: the grader also runs hidden tests, on more ranks and more shapes.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from labutils.command.usage import UsageError

#: Seconds one cell may run before the check gives up on it (the grader allows 300).
DEFAULT_CELL_TIMEOUT_S = 300
#: Error names the report gives a cell stopped at the timeout, and cells the kernel died in or before.
CELL_TIMEOUT, KERNEL_DIED = "CellTimeout", "KernelDied"
_HIDDEN_TITLE = re.compile(r"#\s*Hidden tests of (.+?) \((\d+(?:\.\d+)?) points?\)")


@dataclass
class PartResult:
    """One graded part: its name, points, and what its visible checks said."""

    name: str
    points: float
    status: str  # "passed", "failed" or "not attempted"
    message: str = ""

    def line(self) -> str:
        points = f"{self.points:g} point{'s' * (self.points != 1)}"
        detail = f": {self.message}" if self.message else ""
        return f"  {self.status:<14} {self.name} ({points}){detail}"


def load_lab(path: Path) -> dict:
    """The notebook at ``path`` as JSON, after checking that it is one of this course's labs."""
    if not path.is_file():
        raise UsageError(f"no such notebook: {path}")
    try:
        notebook = json.loads(path.read_text())
        cells = notebook["cells"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise UsageError(f"{path} is not a Jupyter notebook (.ipynb JSON)") from None
    if not any(_nbgrader(cell).get("grade") for cell in cells):
        raise UsageError(f"{path.name} is not a graded lab: it has no graded (nbgrader test) cells")
    if not any("labutils" in _source(cell) for cell in cells if cell["cell_type"] == "code"):
        raise UsageError(f"{path.name} is a graded notebook from another course: none of its cells uses labutils")
    return notebook


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def execute_visible(notebook: dict, folder: Path, cell_timeout_s: float) -> dict:
    """Run every code cell but the graded ones in a fresh kernel; return the executed notebook."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import DeadKernelError

        from labutils.checks.notebook_kernel import UnixSocketKernelManager
    except ImportError as error:
        raise UsageError(f"`labutils check` needs nbclient and nbformat ({error.name} is missing): "
                         "pip install nbclient nbformat") from None
    runnable = nbformat.reads(json.dumps(notebook), as_version=4)
    for cell in runnable.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            if _nbgrader(cell).get("grade"):  # keep its title comment, drop the hidden tests
                title = cell.source.splitlines()[:1]
                cell.source = title[0] if title and title[0].startswith("#") else ""
    started = []  # indices of the cells the kernel was asked to run, in order

    def note_a_timeout(cell, cell_index, execute_reply):
        if execute_reply and execute_reply.get("content", {}).get("ename") == CELL_TIMEOUT:
            cell.outputs.insert(0, _error_output(CELL_TIMEOUT, f"still running after {cell_timeout_s:g} s "
                                                               "(--timeout): interrupted"))

    # A cell still running at the timeout is interrupted and the next cell runs (interrupting
    # ``launch`` stops its ranks). The kernel's own start-up warnings would land inside the
    # report; errors still reach stderr.
    client = NotebookClient(runnable, timeout=cell_timeout_s, kernel_name="python3", allow_errors=True,
                            interrupt_on_timeout=True, error_on_timeout={"ename": CELL_TIMEOUT, "evalue": ""},
                            on_cell_start=lambda cell, cell_index: started.append(cell_index),
                            on_cell_executed=note_a_timeout,
                            kernel_manager_class=UnixSocketKernelManager,
                            resources={"metadata": {"path": str(folder)}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    try:
        client.execute()
    except DeadKernelError:
        _mark_kernel_death(runnable, started[-1] if started else 0)
    except RuntimeError as error:  # jupyter_client's, when the kernel exits before it answers
        if "before replying to kernel_info" not in str(error):
            raise
        atexit.unregister(client._cleanup_kernel)  # nbclient has cleaned up; at exit it would fail on no manager
        raise UsageError(f"the Jupyter kernel {client.kernel_name} exited as it started, before running any "
                         "cell: open a notebook with it in JupyterLab to see its error") from None
    return runnable


def _error_output(name: str, message: str):
    import nbformat

    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[])


def _mark_kernel_death(executed, dead_at: int) -> None:
    """Mark cell ``dead_at`` as the one the kernel died in and every later code cell as not run."""
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code" or index < dead_at:
            continue
        if index == dead_at:
            cell.outputs.insert(0, _error_output(KERNEL_DIED, "the kernel died while this cell ran (out of "
                                                              "memory, or a crash in native code)"))
        else:
            cell.outputs = [_error_output(KERNEL_DIED, "not run: the kernel died in an earlier cell")]


def _error(cell) -> tuple[str, str] | None:
    """(exception name, first line of its message) of a code cell's error output, if any."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", "")).strip().splitlines()
            return output.get("ename", "Error"), (value[0] if value else "")
    return None


def part_results(executed) -> list[PartResult]:
    """One result per graded cell, from the cells between the previous graded cell and it."""
    results, segment = [], []
    setup_failure = None
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            segment.append(cell)
            continue
        title = _HIDDEN_TITLE.search(_source(cell))
        name = title.group(1) if title else meta.get("grade_id", "part")
        points = float(meta.get("points", title.group(2) if title else 0))
        result, setup_failure = _judge_segment(segment, setup_failure)
        results.append(PartResult(name, points, *result))
        segment = []
    return results


def _judge_segment(cells, setup_failure):
    """((status, message), setup failure for later parts) of one part's cells."""
    answers = [i for i, cell in enumerate(cells) if _nbgrader(cell).get("solution")]
    first_answer = answers[0] if answers else len(cells)
    for cell in cells[:first_answer]:  # set-up and given cells that precede the answers
        error = _error(cell)
        if error and setup_failure is None:
            setup_failure = f"a cell before this part failed ({error[0]}: {error[1]})"
    if setup_failure:
        return ("failed", setup_failure), setup_failure
    if answers and all(_is_stub(cells[index]) for index in answers):
        return ("not attempted", "nothing written yet in its answer cells"), None
    for cell in cells[first_answer:]:
        error = _error(cell)
        if error and "NotImplementedError" in " ".join(error):
            return ("failed", "something this part calls still raises NotImplementedError (not written yet)"), None
        if error:
            where = "your answer cell raised" if _nbgrader(cell).get("solution") else "check failed:"
            return ("failed", f"{where} {error[0]}: {error[1]}"), None
    return ("passed", ""), None


def _is_stub(cell) -> bool:
    """True while an answer cell still holds nbgrader's stub (nothing written in it)."""
    source = _source(cell)
    return "YOUR CODE HERE" in source and "raise NotImplementedError" in source


def check_lab(path: Path, cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S) -> list[PartResult]:
    """Run the visible checks of the lab at ``path``; one :class:`PartResult` per graded part."""
    notebook = load_lab(path)
    executed = execute_visible(notebook, path.resolve().parent, cell_timeout_s)
    return part_results(executed)


def add_arguments(parser) -> None:
    parser.add_argument("notebook", type=Path, help="the lab notebook, e.g. labs/lab01_tensor_parallel/lab01_tensor_parallel.ipynb")
    parser.add_argument("--timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {DEFAULT_CELL_TIMEOUT_S})")


def main(args) -> int:
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    notebook = load_lab(args.notebook)
    print(f"checking {args.notebook} (running every cell but the graded ones; this takes a minute)",
          file=sys.stderr, flush=True)
    results = part_results(execute_visible(notebook, args.notebook.resolve().parent, args.timeout))
    passed = sum(result.status == "passed" for result in results)
    print(f"{os.path.basename(args.notebook)}: {passed} of {len(results)} parts pass their visible checks")
    for result in results:
        print(result.line())
    print("Passing the visible checks is necessary, not sufficient: the grader also runs hidden tests.")
    return 0 if passed == len(results) else 1
