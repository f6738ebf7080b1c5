"""The instructors' `course` command (also ``python -m grading``): release, grade and check the course.

    course release lab01_tensor_parallel [--check]        labs/LAB from solutions/LAB
    course grade lab01_tensor_parallel SUBMISSIONS        autograde a class with nbgrader
    course nightly [NOTEBOOK ...]                         run every notebook and lab, write a report
    course student [--archive]                            the students' copy in build/student
    course hub [--config FILE]                            JupyterHub for a class on a shared node
    course class release|collect|grade|feedback LAB       a class's hand-in through the hub's exchange
    course site [--run | --from RUN]                      build/site/: the chapters as a website
    course doctor | bench | model ...                     the students' `labutils` commands, as they are

Each subcommand module defines ``add_arguments(parser)`` and ``main(args) -> int`` and is
imported only when used. Errors a user can fix are printed as one line, exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from labutils.command.cli import UsageError  # one kind of user error for both commands: printed as one line

__all__ = ["UsageError", "build_parser", "main"]

#: subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "release": ("grading.release", "write labs/LAB from solutions/LAB with nbgrader (--check: is labs/ current?)"),
    "grade": ("grading.grade", "autograde a folder of lab submissions with nbgrader"),
    "nightly": ("grading.nightly.runner", "execute every notebook with papermill, check the labs, write a report"),
    "student": ("grading.student_copy", "build the students' copy of the course in build/student (no solutions, no grader)"),
    "hub": ("grading.hub.start", "start the course's JupyterHub on a shared node (grading/hub/course_hub.toml)"),
    "class": ("grading.hub.classroom", "a class's hand-in through the hub: release, collect, grade, feedback"),
    "site": ("grading.site.command", "build the course website (build/site/) from a nightly run's executed notebooks"),
}
#: subcommands that are the students' `labutils` command's, forwarded unchanged
FORWARDED = {
    "doctor": "print the environment: Python, torch, CUDA, NCCL, GPUs, topology, backend (labutils doctor)",
    "bench": "benchmark a collective in nccl-tests' layout (labutils bench)",
    "model": "answer a cost-model question: zero, bubble, comm, roofline (labutils model)",
}


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit status 2), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of the ``course`` command; the subcommand ``only`` gets its full options
    (its module is imported), the others their one-line help."""
    parser = _OneLineErrorParser(prog="course", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == only:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    for name, help_text in FORWARDED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``course ARGV``; the exit status (2 for a usage error, printed as one line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verb = argv[0] if argv else None
    if verb in FORWARDED:
        from labutils.command.cli import main as labutils_main

        return labutils_main(argv)
    parser = build_parser(verb if verb in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    module = getattr(args, "_module", None)
    if module is None:  # no subcommand
        parser.print_help()
        return 2
    try:
        status = module.main(args)
    except UsageError as exc:
        sys.stderr.write(f"course {verb}: error: {exc}\n")
        status = 2
    return int(status or 0)
