"""Submitting a batch script to Slurm and waiting for it: ``sbatch --wait``, with the array's
task ids and each task's exit status read back from the files the script writes.

The script is written by the caller; each task ends by writing its exit status to
``STATUS_DIR/<task id>`` so what happened to every task is known without Slurm's accounting
database (``sacct`` needs slurmdbd, which many clusters keep from users).
"""
from __future__ import annotations

import os
import shutil
import subprocess

from labutils.command.usage import UsageError

#: Seconds ``sbatch`` may take to accept a job (not to run it: ``--wait`` has no limit of its own).
SUBMIT_TIMEOUT_S = 120.0


def require_slurm() -> str:
    """The path of ``sbatch``; UsageError when this machine has no Slurm client."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UsageError("--slurm needs Slurm's client commands (sbatch) on this machine: run it on the "
                         "cluster's login node, or install slurm-client and point SLURM_CONF at the cluster")
    return sbatch


def array_spec(tasks: list) -> str:
    """Slurm's ``--array`` value for task ids ``tasks`` (e.g. [0, 2, 3] -> "0,2,3")."""
    if not tasks:
        raise ValueError("a job array needs at least one task")
    return ",".join(str(t) for t in sorted(tasks))


def run_array(script: str, tasks: list, sbatch_options: list, status_dir: str) -> tuple:
    """Submit ``script`` as the array ``tasks`` and wait until every task ended.

    Returns (the job's id, {task id: exit status}), -1 for a task that never wrote its status (cancelled, killed
    at its time limit, node failure). ``sbatch_options`` go to sbatch as given (``--partition``,
    ``--gres``, ``--time``...). RuntimeError when sbatch refuses the job, with its message.
    """
    os.makedirs(status_dir, exist_ok=True)
    for task in tasks:
        path = os.path.join(status_dir, str(task))
        if os.path.exists(path):
            os.remove(path)
    argv = [require_slurm(), "--wait", "--parsable", f"--array={array_spec(tasks)}", *sbatch_options, script]
    done = subprocess.run(argv, capture_output=True, text=True, start_new_session=True)
    if not done.stdout.strip():
        raise RuntimeError(f"sbatch refused the job: {done.stderr.strip() or 'no job id printed'}")
    statuses = {}
    for task in tasks:
        path = os.path.join(status_dir, str(task))
        try:
            with open(path) as f:
                statuses[task] = int(f.read().strip() or -1)
        except (OSError, ValueError):
            statuses[task] = -1
    return done.stdout.strip().split(";")[0], statuses
