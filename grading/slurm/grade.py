"""``course grade LAB SUBMISSIONS --slurm PARTITION --shards K``: a class graded as a Slurm job array.

The students (those with the lab's notebook) are dealt into K disjoint shards
(``shards``); task k of the array runs ``course grade`` on shard k's copy, with every other
option as given (the same sandbox, judge, timeouts and memory cap), into its own course folder
under COURSE_DIR/slurm/LAB/. A task that fails is submitted once more; then the shards' course
folders are merged into COURSE_DIR (``merge``), which ends as a single-node run leaves it. The
students of a task that failed twice are listed in the report as not graded, with the task's
output file; the exit status is then 1.

COURSE_DIR and SUBMISSIONS must be on a filesystem every node of the partition sees, and the
course environment (this Python) too.
"""
from __future__ import annotations

import json
import os
import sys
import time

from grading.slurm import jobs, shards
from labutils.command.usage import UsageError

#: ``course grade`` options that name what the tasks get from the shards, not passed on as given.
NOT_FORWARDED = {"command", "lab", "submissions", "course_dir", "slurm", "shards", "sbatch_option"}


def add_arguments(parser) -> None:
    """The options ``course grade`` gets for Slurm."""
    parser.add_argument("--slurm", metavar="PARTITION",
                        help="grade as a Slurm job array on PARTITION (from the cluster's login node; the course "
                             "folder and the submissions on the cluster's shared filesystem)")
    parser.add_argument("--shards", type=int, default=None,
                        help="with --slurm: the array's tasks, each grading a disjoint set of students (default 2)")
    parser.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                        help="with --slurm: an sbatch option for every task, e.g. --sbatch-option=--gres=gpu:4 "
                             "or --sbatch-option=--time=02:00:00 (repeatable)")


def _task_output(work: str, task: int) -> str:
    """The newest output file of task ``task`` and its last line, for a report."""
    folder = shards.shard_folder(work, task)
    outs = sorted((os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("slurm-")), key=os.path.getmtime)
    if not outs:
        return f"{folder} (no output: the task never started)"
    with open(outs[-1], errors="replace") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    return f"{outs[-1]}" + (f": {lines[-1][:300]}" if lines else "")


def _run_with_retry(work: str, script: str, count: int, options: list) -> tuple:
    """Run tasks 0..count-1, then once more those that failed; (job ids, first statuses, last statuses)."""
    status_dir = os.path.join(work, "status")
    job, first = jobs.run_array(script, list(range(count)), options, status_dir)
    ids, last = [job], dict(first)
    failed = [task for task, status in first.items() if status != 0]
    if failed and all(first[task] == 2 for task in failed):  # a usage error fails every retry too
        raise UsageError(f"the grading tasks stopped on a usage error: {_task_output(work, failed[0])}")
    if failed:
        print(f"course grade: task{'s' if len(failed) > 1 else ''} {jobs.array_spec(failed)} of job {job} failed; "
              "submitting once more", file=sys.stderr, flush=True)
        again, statuses = jobs.run_array(script, failed, options, status_dir)
        ids.append(again)
        last.update(statuses)
    return ids, first, last


def _slurm_lines(ids: list, groups: list, first: dict, last: dict, work: str) -> list:
    """The report's lines about the job array: tasks, their students, retries, failures."""
    lines = [f"Graded on Slurm: job{'s' if len(ids) > 1 else ''} {', '.join(ids)}, {len(groups)} tasks "
             f"(work folder `{work}`)."]
    for task, students in enumerate(groups):
        state = ("ok" if first[task] == 0 else
                 f"failed (exit {first[task]}), retried: " + ("ok" if last[task] == 0 else f"failed again (exit {last[task]})"))
        lines.append(f"- task {task}: {len(students)} students, {state}" +
                     ("" if last[task] == 0 and first[task] == 0 else f"; output {_task_output(work, task)}"))
    return lines


def _append_to_reports(markdown_path: str, json_path: str, lines: list, first: dict, last: dict) -> None:
    with open(markdown_path, "a") as f:
        f.write("\n## Slurm\n\n" + "\n".join(lines) + "\n")
    with open(json_path) as f:
        content = json.load(f)
    content["slurm"] = {"lines": lines, "retried": sorted(t for t, s in first.items() if s != 0),
                        "failed": sorted(t for t, s in last.items() if s != 0)}
    with open(json_path, "w") as f:
        json.dump(content, f, indent=1, ensure_ascii=False)


def _class(args) -> tuple:
    """(course root, course folder, {student: folder}, students without the notebook); UsageError
    for a bad option, lab or submissions folder."""
    if not args.slurm:
        raise UsageError("--shards and --sbatch-option go with --slurm PARTITION")
    if args.shards is not None and args.shards < 1:
        raise UsageError(f"--shards must be at least 1, got {args.shards}")
    for name in ("workers", "cell_timeout", "rank_timeout", "submission_timeout"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    jobs.require_slurm()
    from grading.autograder.runner import find_submissions, lab_notebooks  # nbgrader's imports: after the checks
    from grading.paths import course_root_of

    try:
        course_root = course_root_of(args.grading_dir)
        notebooks = lab_notebooks(args.lab, course_root)
        submissions, without = find_submissions(args.submissions, args.lab, notebooks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    course_dir = os.path.abspath(args.course_dir or os.path.join(course_root, "build", "grading"))
    return course_root, course_dir, submissions, without


def _merge(args, course_root: str, course_dir: str, work: str, groups: list, last: dict):
    """The shards that graded merged into ``course_dir``; their outcomes and the lab's maximum score."""
    from grading.autograder.runner import GradeOptions, prepare_course
    from grading.slurm import merge

    prepare_course(GradeOptions(args.lab, args.submissions, course_dir, cell_timeout_s=args.cell_timeout,
                                course_root=course_root), {})
    done = [task for task in range(len(groups)) if last[task] == 0]
    shard_courses = [os.path.join(shards.shard_folder(work, task), "course") for task in done]
    max_points = merge.merge_gradebooks(course_dir, shard_courses, args.lab)
    outcomes = []
    for task, shard in zip(done, shard_courses):
        merge.copy_files(course_dir, shard, task, args.lab, groups[task])
        outcomes += merge.shard_outcomes(shard, args.lab)
    for task in (t for t in range(len(groups)) if last[t] != 0):
        outcomes += [merge.SubmissionOutcome(student, failure=f"not graded: its Slurm task {task} failed twice; "
                                             f"output {_task_output(work, task)}") for student in groups[task]]
    return outcomes, max_points


def grade_on_slurm(args) -> int:
    """``course grade ... --slurm PARTITION``: the exit status (1 when a task failed twice)."""
    started = time.monotonic()
    course_root, course_dir, submissions, without = _class(args)
    from grading.autograder.report import summary_lines, write_report  # after the checks: they are said at once
    from grading.slurm import merge

    work = os.path.join(course_dir, "slurm", args.lab)
    groups = shards.split_students(list(submissions), args.shards or 2)
    shards.copy_shards(args.submissions, groups, work)
    script = shards.write_task_script(work, sys.executable, course_root, args.lab,
                                      shards.forwarded_options(args, NOT_FORWARDED))
    options = [f"--partition={args.slurm}", f"--job-name=course-grade-{args.lab}", f"--chdir={course_root}",
               f"--output={work}/shard-%a/slurm-%A_%a.out", f"--cpus-per-task={args.workers}", *args.sbatch_option]
    print(f"course grade: {args.lab}, {len(submissions)} submissions in {len(groups)} Slurm tasks on "
          f"partition {args.slurm}, merged into {course_dir}", file=sys.stderr, flush=True)
    try:
        ids, first, last = _run_with_retry(work, script, len(groups), options)
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None
    outcomes, max_points = _merge(args, course_root, course_dir, work, groups, last)
    report = merge.merged_report(course_dir, args.lab, max_points, outcomes, time.monotonic() - started, without)
    markdown_path, json_path = write_report(report)
    lines = _slurm_lines(ids, groups, first, last, work)
    _append_to_reports(markdown_path, json_path, lines, first, last)
    print("\n".join(summary_lines(report) + [""] + lines))
    print(f"\ngrades: {report.grades_csv}\nfeedback: {report.feedback_dir}\nreport: {markdown_path}")
    return 1 if any(status != 0 for status in last.values()) else 0
