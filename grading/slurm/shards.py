"""A class split into shards for a Slurm job array: disjoint sets of students, each copied into
its own folder with its own nbgrader course folder, and the batch script every task runs.

    WORK/shard-K/submissions/STUDENT/...    the students of task K (copies)
    WORK/shard-K/course/                    task K's course folder (``course grade --course-dir``)
    WORK/shard-K/slurm-JOB_K.out            task K's output
    WORK/status/K                           task K's exit status
    WORK/grade.sbatch                       the script of every task
"""
from __future__ import annotations

import os
import shlex
import shutil
import stat


def split_students(students: list, shards: int) -> list:
    """``students`` dealt round-robin (in sorted order) into at most ``shards`` non-empty lists."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    ordered = sorted(students)
    return [ordered[k::shards] for k in range(min(shards, len(ordered)))]


def shard_folder(work: str, task: int) -> str:
    return os.path.join(work, f"shard-{task}")


def copy_shards(submissions_dir: str, shards: list, work: str) -> None:
    """Copy each student's folder of ``submissions_dir`` into its shard's submissions/ (fresh)."""
    for task, students in enumerate(shards):
        folder = os.path.join(shard_folder(work, task), "submissions")
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        for student in students:
            shutil.copytree(os.path.join(submissions_dir, student), os.path.join(folder, student))


def forwarded_options(args, skip: set) -> list:
    """``course grade``'s own options from parsed ``args``, as a command line for the tasks: every
    option but those named in ``skip`` (dest names); a None or False value is left out, True
    is the flag alone."""
    argv = []
    for name, value in sorted(vars(args).items()):
        if name in skip or name.startswith("_") or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def write_task_script(work: str, python: str, course_root: str, lab: str, options: list) -> str:
    """WORK/grade.sbatch: task K grades shard K into its own course folder and writes its exit
    status to WORK/status/K; its path."""
    quoted = " ".join(shlex.quote(o) for o in options)
    shard = shlex.quote(os.path.join(work, "shard-")) + '"$SLURM_ARRAY_TASK_ID"'
    status = shlex.quote(os.path.join(work, "status")) + '/"$SLURM_ARRAY_TASK_ID"'
    script = f"""#!/bin/bash
# One task of `course grade {lab} --slurm`: grade the students of shard $SLURM_ARRAY_TASK_ID.
: "${{SLURM_ARRAY_TASK_ID:?run by sbatch --array}}"
rm -rf {shard}/course
cd {shlex.quote(course_root)} || exit 3
{shlex.quote(python)} -m grading grade {shlex.quote(lab)} {shard}/submissions --course-dir {shard}/course {quoted}
status=$?
echo "$status" > {status}
exit "$status"
"""
    path = os.path.join(work, "grade.sbatch")
    with open(path, "w") as f:
        f.write(script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path
