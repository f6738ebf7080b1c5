"""A lab's nbgrader steps in one process: ``generate_assignment`` then ``autograde`` of each submission.

    python -m grading.nightly.nbgrader_steps SPEC      # run in the lab's throwaway course folder

What ``nbgrader generate_assignment LAB --force`` and ``nbgrader autograde LAB --student S --create
--force`` do, through the same converters, configuration files and command-line options, without
starting (and importing nbgrader into) a new interpreter for each step: about 2.4 s of CPU each
on a 2-core machine. SPEC is JSON::

    {"lab": "lab04_zero", "options": ["--ExecutePreprocessor.timeout=600", ...],
     "steps": [{"student": null, "log": ".../lab04_zero-generate_assignment.log"},
               {"student": "solution", "log": ".../lab04_zero-solution.log"}, ...],
     "outcomes": ".../lab04_zero-outcomes.jsonl"}

A step with ``student`` null is ``generate_assignment``, otherwise the autograde of that student.
While a step runs, everything the process and the kernels it starts write to stdout and stderr
goes to the step's log. After each step one JSON line ``{"step": i, "ok": bool, "duration_s": s}``
is appended to ``outcomes``; the steps stop at the first that fails. The exit status is 0 when
every step succeeded, 1 otherwise.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import contextmanager


def run_steps(spec: dict) -> int:
    """Run the steps of ``spec`` in order (see the module's docstring); the exit status."""
    from nbgrader.apps.baseapp import NbGrader
    from nbgrader.converters import Autograde, GenerateAssignment

    app = NbGrader()
    app.initialize(list(spec["options"]))  # nbgrader_config.py of the course folder (the cwd), as the CLI loads it
    app.coursedir.assignment_id = spec["lab"]
    for index, step in enumerate(spec["steps"]):
        started = time.monotonic()
        with _output_to(step["log"]):
            try:
                if step["student"] is None:
                    converter = GenerateAssignment(coursedir=app.coursedir, parent=app)
                else:
                    app.coursedir.student_id = step["student"]
                    converter = Autograde(coursedir=app.coursedir, parent=app)
                    converter.create_student = True
                converter.force = True
                converter.start()
                ok = True
            except Exception:  # noqa: BLE001 - nbgrader's failures (NbGraderException and others) end the steps
                traceback.print_exc()
                ok = False
        with open(spec["outcomes"], "a") as outcomes:
            outcomes.write(json.dumps({"step": index, "ok": ok, "duration_s": time.monotonic() - started}) + "\n")
        if not ok:
            return 1
    return 0


@contextmanager
def _output_to(path: str):
    """Within the block, file descriptors 1 and 2 (this process's stdout and stderr, and what the
    kernels it starts inherit) write to ``path``; restored after."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in zip((1, 2), saved):
            os.dup2(fd, target)
            os.close(fd)


if __name__ == "__main__":
    sys.exit(run_steps(json.loads(sys.argv[1])))
