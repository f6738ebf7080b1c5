"""The course on a real one-node Slurm cluster (``slurm_cluster``): GRES as jobs see it, and
``labutils/data/slurm/labutils_run.sbatch`` running a rank function on 2 node agents."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from slurm_cluster import FAKE_GPUS, PARTITION, run

REPO = Path(__file__).resolve().parents[1]
SBATCH_SCRIPT = REPO / "labutils" / "data" / "slurm" / "labutils_run.sbatch"


def test_a_job_sees_the_gpus_it_asked_for_through_gres(slurm):
    result = run(slurm, ["srun", f"--gres=gpu:fake:{FAKE_GPUS}", "--ntasks=1", "bash", "-c",
                         "echo $CUDA_VISIBLE_DEVICES $SLURM_GPUS_ON_NODE"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [",".join(str(i) for i in range(FAKE_GPUS)), str(FAKE_GPUS)]
    too_many = run(slurm, ["srun", f"--gres=gpu:fake:{FAKE_GPUS + 1}", "--immediate=5", "true"])
    assert too_many.returncode != 0 and "Requested node configuration is not available" in too_many.stderr


RANK_FUNCTION = '''
import os

import torch
import torch.distributed as dist


def total(scale):
    """Every rank's (rank, world size, backend, the sum of rank * scale over ranks, its task's id)."""
    value = torch.tensor([dist.get_rank() * scale])
    dist.all_reduce(value)
    return dist.get_rank(), dist.get_world_size(), dist.get_backend(), value.item(), os.environ["SLURM_PROCID"]
'''


def test_the_sbatch_script_runs_a_function_on_two_node_agents_and_gathers_their_results(slurm, tmp_path):
    (tmp_path / "ranks.py").write_text(RANK_FUNCTION)
    job_tmp = tmp_path / "tmp"  # the job's TMPDIR: torchrun's agents must leave nothing there
    job_tmp.mkdir()
    env = dict(slurm.env, PYTHON=sys.executable, NPROC_PER_NODE="1", BACKEND="auto", TMPDIR=str(job_tmp))
    result = run(slurm, ["sbatch", "--wait", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", f"--chdir={tmp_path}",
                         f"--output={tmp_path}/job.out", str(SBATCH_SCRIPT), "ranks.py:total", "--args", "[3]",
                         "--output", "results.pt"], env=env)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert result.returncode == 0, result.stderr + log
    assert "2 node agents x 1 processes, backend gloo" in log
    results = torch.load(tmp_path / "results.pt")
    assert [r[:4] for r in results] == [(0, 2, "gloo", 3), (1, 2, "gloo", 3)]
    assert sorted(r[4] for r in results) == ["0", "1"]  # one rank from each Slurm task
    assert [p.name for p in job_tmp.iterdir() if not p.name.startswith("torchinductor_")] == []


def test_the_sbatch_script_says_what_it_needs(slurm, tmp_path):
    result = run(slurm, ["sbatch", "--wait", f"--output={tmp_path}/job.out", str(SBATCH_SCRIPT)])
    assert result.returncode != 0
    assert "usage: sbatch [options]" in (tmp_path / "job.out").read_text()


def test_the_nightly_runs_as_a_batch_job_and_reports_as_on_one_node(slurm, tmp_path):
    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "nightly_fixtures" / "passing.ipynb", course / "notebooks" / "passing.ipynb")
    done = run(slurm, [sys.executable, "-m", "grading", "nightly", "passing", "--root", str(course), "--out",
                       str(tmp_path / "run"), "--quick", "--world-size", "2", "--backend", "gloo", "--no-grading",
                       "--slurm", PARTITION], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ended with exit status 0" in done.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())["results"]
    assert [(r["name"], r["status"]) for r in results] == [("notebooks/passing.ipynb", "passed")]
    outputs = list((tmp_path / "run" / "slurm").glob("slurm-*.out"))
    assert len(outputs) == 1  # the nightly's own output, written by the job


def test_sbatch_option_without_slurm_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grading", "nightly", "--sbatch-option=--time=1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--sbatch-option goes with --slurm PARTITION" in done.stderr
