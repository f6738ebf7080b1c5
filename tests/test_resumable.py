"""Chapter 7.10: a rank killed under ``torchrun --max-restarts``, the job resumed from its DCP checkpoint.

The killed job runs through the course's multinode path (``torchrun ... -m labutils run``) and is
compared, loss by loss, with the same function launched once with no failure.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import labutils
from labutils.kernels import resumable
from labutils.ranks.multinode import attempt_store

STEPS, EVERY, KILL_RANK, KILL_STEP = 10, 3, 1, 7      # checkpoints after steps 3, 6, 9; rank 1 dies in step 7


def test_attempt_store_keeps_each_torchrun_attempt_apart(monkeypatch):
    shared = dist.HashStore()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    attempt_store(shared).set("gloo/rank_1", "127.0.0.1:40000 (a process about to die)")
    assert attempt_store(shared).check(["gloo/rank_1"])
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert not attempt_store(shared).check(["gloo/rank_1"]), "the next attempt must not see the dead one's keys"
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    assert attempt_store(shared).check(["gloo/rank_1"]), "outside torchrun the first attempt's keys are used"


@pytest.mark.parametrize("steps, every", [(0, 3), (5, 0)])
def test_train_refuses_counts_that_are_not_positive(tmp_path, steps, every):
    with pytest.raises(ValueError, match="must be positive"):
        resumable.train(str(tmp_path), steps, every)


def test_a_rank_killed_under_torchrun_resumes_from_the_checkpoint_with_the_same_losses(tmp_path):
    calm, killed = tmp_path / "calm", tmp_path / "killed"
    calm.mkdir()
    killed.mkdir()
    reference = labutils.launch(resumable.train, 2, str(calm), STEPS, EVERY, backend="gloo", timeout=240)[0]
    job = {"folder": str(killed), "steps": STEPS, "every": EVERY, "kill_rank": KILL_RANK, "kill_step": KILL_STEP}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=1",
         f"--log-dir={tmp_path / 'torchrun-logs'}",  # else torchrun makes /tmp/torchelastic_* and leaves it
         "-m", "labutils", "run", "labutils.kernels.resumable:train", "--kwargs", json.dumps(job),
         "--backend", "gloo", "--output", str(killed / "results.pt")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exitcode: -9" in done.stderr, "torchrun's agent reports the rank killed by SIGKILL"

    attempts = {}
    for record in resumable.read_log(str(killed)):
        attempts.setdefault(record["attempt"], {})[record["step"]] = record["loss"]
    final = torch.load(killed / "results.pt")
    assert [rank["attempt"] for rank in final] == [1, 1]
    assert [rank["first_step"] for rank in final] == [6, 6], "the restart loads the checkpoint of step 6"
    assert sorted(attempts[0]) == list(range(KILL_STEP)) and sorted(attempts[1]) == list(range(6, STEPS))
    assert reference["first_step"] == 0 and sorted(reference["losses"]) == list(range(STEPS))
    for attempt, losses in attempts.items():
        for step, loss in losses.items():
            assert loss == reference["losses"][step], f"attempt {attempt}, step {step}: {loss} != {reference['losses'][step]}"
    assert reference["losses"][STEPS - 1] < reference["losses"][0], "the job learns"
    assert (killed / "latest").read_text() == "9" and (killed / "step_9" / ".metadata").exists()
