"""The `labutils` command: one subcommand per module, loaded only when used.

Each subcommand module defines ``add_arguments(parser)`` and ``main(args) -> int`` and raises
``labutils.command.usage.UsageError`` for errors a user can fix (bad arguments, missing files): they
are printed as one line, exit status 2. The instructors' tools (grading, the nightly run of
every notebook) are the ``course`` command of the course repository, not part of labutils.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from labutils.command.usage import UsageError

__all__ = ["main", "build_parser", "SUBCOMMANDS", "INSTRUCTOR_COMMANDS", "UsageError"]

#: subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "doctor": ("labutils.command.doctor", "print the environment: Python, torch, CUDA, NCCL, GPUs, topology, backend"),
    "bench": ("labutils.command.bench_cli", "benchmark a collective in nccl-tests' layout (works under torchrun)"),
    "model": ("labutils.command.model_cli", "answer a cost-model question: zero, bubble, comm, roofline"),
    "check": ("labutils.checks.labcheck", "run a lab's visible checks: one line per part (passed, failed, not attempted)"),
    "run": ("labutils.ranks.multinode", "run module:function on every rank under torchrun (multi-node)"),
}

#: commands that moved to the instructors' ``course`` command
INSTRUCTOR_COMMANDS = ("grade", "nightly")


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit status 2), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(available: dict) -> argparse.ArgumentParser:
    """The parser of every available subcommand; subparsers share the one-line errors."""
    parser = _OneLineErrorParser(prog="labutils", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in available.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _available_subcommands(only: str | None) -> dict:
    found = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if only is not None and name != only:
            continue
        try:
            found[name] = (importlib.import_module(module_name), help_text)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # the module exists but a dependency is missing
                raise
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in INSTRUCTOR_COMMANDS:
        print(f"`{argv[0]}` is an instructors' command: run `course {argv[0]} ...` in the course repository",
              file=sys.stderr)
        return 2
    # Import only the module of the subcommand asked for, so `labutils model` stays fast.
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    parser = build_parser(_available_subcommands(only))
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args._module.main(args) or 0)
    except UsageError as exc:
        print(f"labutils {args.command}: error: {exc}", file=sys.stderr)
        return 2
