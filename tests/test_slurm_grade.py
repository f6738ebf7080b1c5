"""`course grade ... --slurm PARTITION --shards K` on a real one-node Slurm cluster
(``slurm_cluster``): a class graded in 2 shards ends as the single-node run leaves it, and a
task that fails is submitted once more and named in the report."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution
from grading.slurm import grade as slurm_grade
from grading.slurm.shards import split_students
from slurm_cluster import PARTITION

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = "lab01_tensor_parallel"
OPTIONS = ["--workers", "1", "--rank-timeout", "20", "--cell-timeout", "120", "--backend", "gloo"]


def test_students_are_dealt_into_disjoint_shards():
    assert split_students(["c", "a", "b", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert split_students(["a"], 3) == [["a"]]
    with pytest.raises(ValueError):
        split_students(["a"], 0)


def _class(folder) -> str:
    """Two submissions of lab 1 (the solution, a classic mistake) and a folder without the notebook."""
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    solution = student_solution(source, release)
    name = "g_applied_twice"
    with open(os.path.join(REPO, "tests", "fixtures", "lab01", f"{name}.py")) as f:
        mistake = apply_fixture(solution, parse_fixture(name, f.read()))
    for student, notebook in (("solution", solution), (name, mistake)):
        os.makedirs(folder / "submissions" / student)
        nbformat.write(notebook, str(folder / "submissions" / student / f"{LAB}.ipynb"))
    (folder / "submissions" / "empty_folder").mkdir()
    return str(folder / "submissions")


def _grade(env, submissions: str, course: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grading", "grade", LAB, submissions, "--course-dir", course,
                             *OPTIONS, *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _comparable(submission: dict) -> dict:
    parts = [{**p, "lines": [re.sub(r"[-\d.,]+", "N", line) if line.startswith("✗") else line for line in p["lines"]]}
             for p in submission["parts"]]
    return {**{k: v for k, v in submission.items() if k != "seconds"}, "parts": parts}


def _rows(course: str) -> list:
    with open(os.path.join(course, "grades.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(900)  # two gradings of the class (100 s on a busy 2-core machine), the cluster's start included
def test_a_class_graded_in_two_shards_merges_into_what_one_node_gives(slurm, tmp_path):
    submissions = _class(tmp_path)
    single, sharded = str(tmp_path / "single"), str(tmp_path / "sharded")
    runs = [_grade(slurm.env, submissions, single),
            _grade(slurm.env, submissions, sharded, "--slurm", PARTITION, "--shards", "2")]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, out + err + slurm.logs()

    assert _rows(sharded) == _rows(single)
    scores = {row["student_id"]: float(row["score"]) for row in _rows(sharded)}
    assert scores["solution"] == float(_rows(sharded)[0]["max_score"]) > scores["g_applied_twice"]
    reports = []
    for course in (single, sharded):
        with open(os.path.join(course, "reports", f"{LAB}.json")) as f:
            reports.append(json.load(f))
    # Everything but the times, and the numbers in a failed check's lines: the judge draws fresh
    # inputs on every run, so two single-node runs differ there too.
    assert [_comparable(s) for s in reports[1]["submissions"]] == [_comparable(s) for s in reports[0]["submissions"]]
    assert reports[1]["without_notebook"] == reports[0]["without_notebook"] == ["empty_folder"]
    assert reports[1]["slurm"]["retried"] == reports[1]["slurm"]["failed"] == []
    for student in ("solution", "g_applied_twice"):
        for folder in ("feedback", "autograded"):
            assert os.listdir(os.path.join(sharded, folder, student, LAB)) == \
                   os.listdir(os.path.join(single, folder, student, LAB))
        assert os.path.exists(os.path.join(sharded, "verdicts", LAB, f"{student}.json"))
    markdown = open(os.path.join(sharded, "reports", f"{LAB}.md")).read()
    assert "## Slurm" in markdown and "- task 0: 1 students, ok" in markdown and "- task 1: 1 students, ok" in markdown
    assert "empty_folder: no lab01_tensor_parallel notebook" in outputs[1][0]


FLAKY_TASK = """#!/bin/bash
# Task 1 fails the first time it runs, task 2 every time; each writes its status as grade.sbatch does.
marker={work}/ran-$SLURM_ARRAY_TASK_ID
status=0
if [ "$SLURM_ARRAY_TASK_ID" = 2 ] || {{ [ "$SLURM_ARRAY_TASK_ID" = 1 ] && [ ! -e "$marker" ]; }}; then status=1; fi
touch "$marker"
echo "task $SLURM_ARRAY_TASK_ID exits $status"
echo "$status" > {work}/status/$SLURM_ARRAY_TASK_ID
exit "$status"
"""


def test_a_failed_task_is_submitted_once_more_and_named(slurm, tmp_path, monkeypatch):
    for task in range(3):
        (tmp_path / f"shard-{task}").mkdir()
    script = tmp_path / "flaky.sbatch"
    script.write_text(FLAKY_TASK.format(work=tmp_path))
    monkeypatch.setenv("SLURM_CONF", slurm.conf)
    options = [f"--partition={PARTITION}", f"--output={tmp_path}/shard-%a/slurm-%A_%a.out"]
    ids, first, last = slurm_grade._run_with_retry(str(tmp_path), str(script), 3, options)
    assert len(ids) == 2 and ids[0] != ids[1]
    assert first == {0: 0, 1: 1, 2: 1} and last == {0: 0, 1: 0, 2: 1}
    lines = slurm_grade._slurm_lines(ids, [["a"], ["b"], ["c"]], first, last, str(tmp_path))
    assert lines[1] == "- task 0: 1 students, ok"
    assert lines[2].startswith("- task 1: 1 students, failed (exit 1), retried: ok; output ")
    assert lines[3].startswith("- task 2: 1 students, failed (exit 1), retried: failed again (exit 1); output ")
    assert lines[3].endswith(": task 2 exits 1")


def test_a_usage_error_in_the_tasks_is_not_retried(slurm, tmp_path, monkeypatch):
    (tmp_path / "shard-0").mkdir()
    script = tmp_path / "usage.sbatch"
    script.write_text(f"#!/bin/bash\necho 'course grade: error: bad option'\necho 2 > {tmp_path}/status/0\nexit 2\n")
    monkeypatch.setenv("SLURM_CONF", slurm.conf)
    options = [f"--partition={PARTITION}", f"--output={tmp_path}/shard-%a/slurm-%A_%a.out"]
    with pytest.raises(slurm_grade.UsageError, match="bad option"):
        slurm_grade._run_with_retry(str(tmp_path), str(script), 1, options)


def test_shards_without_slurm_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grading", "grade", LAB, str(tmp_path), "--shards", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--shards and --sbatch-option go with --slurm PARTITION" in done.stderr
