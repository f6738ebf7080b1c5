"""``course nightly --slurm PARTITION``: the nightly as a batch job on a node of PARTITION.

The job runs ``course nightly`` with every other option as given, on one node of the
partition, by default the whole node (``--exclusive``: all its GPUs, as the nightly has on a
GPU node of its own); ``--sbatch-option`` adds or overrides sbatch options (``--gres=gpu:4``,
``--time=04:00:00``, ``--account=...``). This command waits for the job, then prints where its
report is and exits with the nightly's status. The run folder (--out, default
build/nightly/DATE in the course) is chosen here, so it must be on a filesystem the node sees;
the job's output and exit status are in its slurm/ subfolder.
"""
from __future__ import annotations

import os
import shlex
import stat
import sys
from datetime import datetime
from pathlib import Path

from grading.slurm import jobs
from labutils.command.usage import UsageError

#: sbatch options of the nightly's job before the user's own (which override them).
DEFAULT_SBATCH = ("--nodes=1", "--ntasks=1", "--exclusive")


def add_arguments(parser) -> None:
    """The options ``course nightly`` gets for Slurm."""
    parser.add_argument("--slurm", metavar="PARTITION",
                        help="run the nightly as a batch job on a node of PARTITION and wait for it")
    parser.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                        help="with --slurm: an sbatch option, e.g. --sbatch-option=--gres=gpu:4 (repeatable)")


def nightly_argv(args, out_dir: str) -> list:
    """``course nightly``'s command line for the job, from the parsed ``args``, with ``--out out_dir``."""
    argv = [*args.names, "--root", os.path.abspath(args.root), "--out", out_dir, "--backend", args.backend,
            "--timeout", str(args.timeout), "--cell-timeout", str(args.cell_timeout)]
    if args.quick is not None:
        argv.append("--quick" if args.quick else "--full")
    for name in ("world_size", "jobs", "kernel"):
        if getattr(args, name) is not None:
            argv += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    argv += ["--no-grading"] * (not args.grading) + ["--site"] * bool(args.site)
    return argv


def write_job_script(folder: str, python: str, argv: list) -> str:
    """FOLDER/nightly.sbatch: runs the nightly and writes its exit status to FOLDER/status/0; its path."""
    path = os.path.join(folder, "nightly.sbatch")
    status = shlex.quote(os.path.join(folder, "status", "0"))
    with open(path, "w") as f:
        f.write("#!/bin/bash\n# `course nightly` on a node of the Slurm partition.\n"
                f"{shlex.quote(python)} -m grading nightly {' '.join(shlex.quote(a) for a in argv)}\n"
                f'status=$?\necho "$status" > {status}\nexit "$status"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def nightly_on_slurm(args) -> int:
    """Submit the nightly to ``args.slurm``, wait, print the report's place; the nightly's exit status."""
    from grading.nightly.runner import NightlyInputError, prepare_out_dir

    if not args.slurm:
        raise UsageError("--sbatch-option goes with --slurm PARTITION")
    if args.list:
        raise UsageError("--list prints here, it needs no --slurm")
    jobs.require_slurm()
    try:
        out_dir = str(prepare_out_dir(Path(args.out) if args.out else None, Path(args.root), datetime.now()))
    except NightlyInputError as exc:
        raise UsageError(str(exc)) from None
    folder = os.path.join(out_dir, "slurm")
    os.makedirs(folder, exist_ok=True)
    script = write_job_script(folder, sys.executable, nightly_argv(args, out_dir))
    options = [f"--partition={args.slurm}", "--job-name=course-nightly", f"--chdir={os.getcwd()}",
               f"--output={folder}/slurm-%A.out", *DEFAULT_SBATCH, *args.sbatch_option]
    print(f"course nightly: submitted to partition {args.slurm}; run folder {out_dir}", file=sys.stderr, flush=True)
    try:
        job, statuses = jobs.run_array(script, [0], options, os.path.join(folder, "status"))
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None
    status = statuses[0]
    print(f"course nightly: Slurm job {job} ended with exit status {status}; "
          f"report {os.path.join(out_dir, 'report.md')}, job output {folder}", file=sys.stderr)
    return status if status >= 0 else 1
