"""A training job that survives a dead rank: distributed checkpoints, and a resume from the last one.

Run on every rank, under ``torchrun --max-restarts N ... -m labutils run
labutils.kernels.resumable:train`` (chapter 7), or on a pool's ranks for a run that nobody
interrupts::

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m labutils run \\
        labutils.kernels.resumable:train --kwargs '{"folder": "/tmp/job", "steps": 12, "every": 4,
        "kill_rank": 1, "kill_step": 9}'

The model is a stack of linear layers, each an FSDP2 ``fully_shard`` unit, trained with AdamW to
fit a fixed linear map. A step's batch depends only on the step and the rank, so a resumed job
sees the same data as one that never stopped. Every ``every`` steps the ranks save the model and
the optimizer with ``torch.distributed.checkpoint`` (DCP) into ``folder/step_<k>``; rank 0 then
records k in ``folder/latest``. A job that starts and finds ``latest`` loads that checkpoint and
goes on from step k. On the first attempt (torchrun's ``TORCHELASTIC_RESTART_COUNT`` 0), rank
``kill_rank`` kills itself with SIGKILL at the start of step ``kill_step``, as a failed GPU or a
lost node would end it: no exception, no message, its peers left waiting in a collective.

Rank 0 appends one JSON line per step to ``folder/losses.jsonl``: the attempt, the step, the loss
averaged over the ranks, and the wall-clock time (``time.time()``, seconds), so that what the
killed attempt did survives it.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

#: the loss log rank 0 writes in the job's folder, one JSON object per line
LOSS_LOG = "losses.jsonl"
_BATCH = 16


def _model_and_optimizer(width: int, depth: int, device):
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)]).to(device)
    for layer in net:
        fully_shard(layer)
    fully_shard(net)
    return net, torch.optim.AdamW(net.parameters(), lr=1e-2)


def _batch(step: int, rank: int, width: int, device):
    """This rank's batch of ``step``: inputs and the targets of a fixed linear map (seeded, so a
    resumed job draws the same)."""
    import torch

    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(_BATCH, width, generator=generator)
    target_map = torch.Generator().manual_seed(7)
    w = torch.randn(width, width, generator=target_map) / width**0.5
    return x.to(device), (x @ w).to(device)


def _state(model, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optimizer_state}


def _resume(folder: Path, model, optimizer) -> int:
    """Load the checkpoint ``folder/latest`` names, in place; the step to go on from (0: none)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    latest = folder / "latest"
    if not latest.exists():
        return 0
    step = int(latest.read_text())
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(folder / f"step_{step}"))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return step


def _save(folder: Path, step: int, model, optimizer, rank: int) -> None:
    """Save the state after ``step`` steps; rank 0 points ``latest`` at it once every rank is done."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(model, optimizer), checkpoint_id=str(folder / f"step_{step}"))
    dist.barrier()
    if rank == 0:
        pending = folder / "latest.tmp"
        pending.write_text(str(step))
        os.replace(pending, folder / "latest")  # atomic: a restart reads the old or the new step, never half


def _log(folder: Path, record: dict) -> None:
    with open(folder / LOSS_LOG, "a") as log:
        log.write(json.dumps(record) + "\n")
        log.flush()
        os.fsync(log.fileno())


def train(folder: str, steps: int, every: int, width: int = 64, depth: int = 2,
          kill_rank: int | None = None, kill_step: int | None = None) -> dict:
    """Train ``steps`` steps from the last checkpoint in ``folder`` (saving every ``every``);
    return this attempt's first step, its losses by step and the attempt number."""
    import torch
    import torch.distributed as dist

    from labutils.ranks.rank import device

    if every < 1 or steps < 1:
        raise ValueError(f"steps and every must be positive, got steps={steps}, every={every}")
    folder_path, rank = Path(folder), dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model, optimizer = _model_and_optimizer(width, depth, device())
    first = _resume(folder_path, model, optimizer)
    losses = {}
    for step in range(first, steps):
        if attempt == 0 and rank == kill_rank and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = _batch(step, rank, width, device())
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses[step] = mean.item() / dist.get_world_size()
        if rank == 0:
            _log(folder_path, {"attempt": attempt, "step": step, "loss": losses[step], "time": time.time()})
        if (step + 1) % every == 0:
            _save(folder_path, step + 1, model, optimizer, rank)
    return {"attempt": attempt, "first_step": first, "losses": losses}


def read_log(folder: str) -> list[dict]:
    """The loss log of a job's ``folder``: one dict per step (attempt, step, loss, time in s)."""
    path = Path(folder) / LOSS_LOG
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
