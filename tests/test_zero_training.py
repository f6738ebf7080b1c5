"""The reference ZeRO stages train like PyTorch's own: stage 1 behind the course's ``DataParallel``
and behind torch's ``DistributedDataParallel``, and stage 2 alone, against
``DistributedDataParallel`` + ``torch.distributed.optim.ZeroRedundancyOptimizer`` on 2 and 4 gloo
ranks (bit-identical in float32 at 2 ranks, and at 4 for stage 1 behind torch's DDP; the course's
buckets and stage 2's reduce-scatter sum 4 ranks in another order, equal to float32 rounding), with a frozen layer, a parameter that gets no gradient (skipped: no weight decay, no
momentum), parameter groups of their own hyperparameters and a checkpoint consolidated on rank 0
and loaded back mid-run, with AdamW (torch's order) and SGD with momentum; stage 2 with clipping
between backward and step to float32 rounding. The ZeRO-3
wrapper matches single-process ``torch.optim.AdamW`` on the whole batch."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

import labutils
from grading.reference.data_parallel import DataParallel
from grading.reference.fsdp import ShardedLayer
from grading.reference.zero import ZeroStage1, ZeroStage2, adamw_update_

STEPS, BATCH_PER_RANK, CHECKPOINT_AT = 4, 3, 2
ATOL = 1e-5
OPTIMIZERS = {"AdamW": (torch.optim.AdamW, {"lr": 0.02}),
              "SGD": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01})}


class Net(nn.Module):
    """A frozen layer, two trained ones, and ``spare``, trainable but never used (its gradient stays None)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.frozen, self.hidden, self.out = nn.Linear(4, 8), nn.Linear(8, 7), nn.Linear(7, 3)
        self.spare = nn.Linear(3, 2)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.out(F.gelu(self.hidden(F.gelu(self.frozen(x)))))


def _groups(model: nn.Module) -> list:
    """Weights at the defaults, biases at their own lr and no weight decay (the frozen layer included)."""
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if n.endswith("weight")]},
            {"params": [p for n, p in named if n.endswith("bias")], "lr": 0.01, "weight_decay": 0.0}]


def _data(world_size: int):
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(STEPS, world_size * BATCH_PER_RANK, 4, generator=generator),
            torch.randn(STEPS, world_size * BATCH_PER_RANK, 3, generator=generator))


def _train(kind: str, optimizer_name: str, clip: float | None = None) -> list:
    """Train ``Net`` on this rank's share of each batch; ``kind`` names the wrapper and optimizer."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    optimizer_class, defaults = OPTIMIZERS[optimizer_name]
    model = Net()
    wrapped = {"torch": lambda: DistributedDataParallel(model, find_unused_parameters=True),
               "course ddp + stage 1": lambda: DataParallel(model, dist.group.WORLD),
               "torch ddp + stage 1": lambda: DistributedDataParallel(model, find_unused_parameters=True),
               "stage 2": lambda: model}[kind]()
    zero = {"torch": ZeroRedundancyOptimizer, "stage 2": ZeroStage2}.get(kind, ZeroStage1)
    make = lambda: zero(_groups(model), optimizer_class, **defaults)  # noqa: E731
    optimizer = make()
    for step, (x, y) in enumerate(zip(*_data(world_size))):
        if step == CHECKPOINT_AT:  # consolidated on rank 0, sent to every rank, loaded into a fresh optimizer
            optimizer.consolidate_state_dict(to=0)
            saved = [optimizer.state_dict() if rank == 0 else None]
            dist.broadcast_object_list(saved, src=0)
            optimizer = make()
            optimizer.load_state_dict(saved[0])
        optimizer.zero_grad()
        mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        F.mse_loss(wrapped(x[mine]), y[mine]).backward()
        if isinstance(wrapped, DataParallel):
            wrapped.finish_gradient_synchronization()
        if clip is not None:
            if kind == "stage 2":
                optimizer.clip_grad_norm_(clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _train_all(optimizer_name: str) -> dict:
    kinds = ("torch", "course ddp + stage 1", "torch ddp + stage 1", "stage 2")
    results = {kind: _train(kind, optimizer_name) for kind in kinds}
    if optimizer_name == "AdamW":
        results.update({f"{kind}, clipped": _train(kind, optimizer_name, clip=0.05) for kind in ("torch", "stage 2")})
    return results


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_zero_stages_train_bit_identically_to_ddp_and_zero_redundancy_optimizer(world_size, optimizer_name):
    per_rank = labutils.launch(_train_all, world_size, optimizer_name, backend="gloo", timeout=300)
    initial = [p.detach() for p in Net().parameters()]
    names = [n for n, _ in Net().named_parameters()]
    for rank, results in enumerate(per_rank):
        torch_params = results["torch"]
        assert not torch.allclose(torch_params[4], initial[4], atol=1e-3)  # the model did train
        for name, got, start in zip(names, torch_params, initial):
            if name.startswith(("frozen", "spare")):  # frozen, and no gradient: torch leaves them as they were
                assert torch.equal(got, start), name
        for kind in ("course ddp + stage 1", "torch ddp + stage 1", "stage 2"):
            for name, got, want in zip(names, results[kind], torch_params):
                message = f"{kind} ({optimizer_name}, {world_size} ranks), rank {rank}, {name}"
                if kind != "torch ddp + stage 1" and world_size > 2:
                    # gloo sums an element over 4 ranks in an order set by the collective and the
                    # element's place in the buffer: a reduce-scatter, or the course's bucket (the
                    # gradients in backward's order, torch's in the model's), round differently
                    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7, msg=message)
                else:
                    assert torch.equal(got, want), f"{message}: max difference {(got - want).abs().max().item():.3g}"
        if optimizer_name == "AdamW":
            assert not torch.equal(results["torch, clipped"][4], torch_params[4])  # clipping did clip
            for name, got, want in zip(names, results["stage 2, clipped"], results["torch, clipped"]):
                torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=f"stage 2 clipped, rank {rank}, {name}")


def test_adamw_update_is_bit_identical_to_torch_adamw_in_float32():
    generator = torch.Generator().manual_seed(3)
    param, grads = torch.randn(100, generator=generator), torch.randn(5, 100, generator=generator)
    leaf = nn.Parameter(param.clone())
    optimizer = torch.optim.AdamW([leaf], lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    mine, exp_avg, exp_avg_sq = param.clone(), torch.zeros(100), torch.zeros(100)
    for step, grad in enumerate(grads, start=1):
        leaf.grad = grad.clone()
        optimizer.step()
        adamw_update_(mine, grad, exp_avg, exp_avg_sq, step, 0.05, (0.9, 0.999), 1e-8, 0.1)
        assert torch.equal(mine, leaf.detach()), f"step {step}"


def _stage1_state_dict_is_torch_adamw_state_dict() -> tuple:
    model = Net()
    optimizer = ZeroStage1(_groups(model), torch.optim.AdamW, lr=0.02)
    for param in model.parameters():
        param.grad = None if not param.requires_grad or param is model.spare.weight else torch.ones_like(param)
    optimizer.step()
    optimizer.consolidate_state_dict(to=1)
    return optimizer.state_dict() if dist.get_rank() == 1 else None


def test_a_consolidated_state_dict_is_the_unsharded_optimizers_and_loads_into_it():
    state = labutils.launch(_stage1_state_dict_is_torch_adamw_state_dict, 2, backend="gloo", timeout=120)[1]
    model = Net()
    dense = torch.optim.AdamW(_groups(model), lr=0.02)
    for param in model.parameters():
        param.grad = None if not param.requires_grad or param is model.spare.weight else torch.ones_like(param)
    dense.step()
    want = dense.state_dict()
    assert state["param_groups"] == want["param_groups"]
    assert sorted(state["state"]) == sorted(want["state"])
    for index, entry in want["state"].items():
        assert sorted(entry) == sorted(state["state"][index])
        for key, value in entry.items():
            assert torch.equal(state["state"][index][key], value), (index, key)
    torch.optim.AdamW(_groups(Net()), lr=0.02).load_state_dict(state)


def _train_zero3(world_size: int) -> list:
    rank = dist.get_rank()
    torch.manual_seed(0)
    units = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.GELU()), nn.Linear(8, 3))
    units = nn.Sequential(*[ShardedLayer(layer) for layer in units])
    optimizer = torch.optim.AdamW(units.parameters(), lr=0.02, weight_decay=0.1)
    for x, y in zip(*_data(world_size)):
        optimizer.zero_grad()
        mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        F.mse_loss(units(x[mine]), y[mine]).backward()
        optimizer.step()
    return [unit.gather_parameters(unit.shard) for unit in units]


def test_zero3_trains_like_torch_adamw_on_the_whole_batch():
    per_rank = labutils.launch(_train_zero3, 2, 2, backend="gloo", timeout=120)
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.GELU()), nn.Linear(8, 3))
    optimizer = torch.optim.AdamW(dense.parameters(), lr=0.02, weight_decay=0.1)
    for x, y in zip(*_data(2)):
        optimizer.zero_grad()
        F.mse_loss(dense(x), y).backward()
        optimizer.step()
    flat = [torch.cat([p.reshape(-1) for p in unit.parameters()]) for unit in dense]
    for rank, units in enumerate(per_rank):
        for index, (got, want) in enumerate(zip(units, flat)):
            torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=f"rank {rank}, unit {index}")


def _warnings_in_a_step() -> list:
    model = Net()
    units = nn.Sequential(*[ShardedLayer(layer) for layer in (nn.Linear(4, 5), nn.Linear(5, 3))])
    stage1, stage2 = ZeroStage1(units.parameters(), torch.optim.SGD, lr=0.1), ZeroStage2(_groups(model), lr=0.1)
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        F.mse_loss(model(x), torch.zeros(2, 3)).backward()
        stage2.step()
        units(x).sum().backward()
        stage1.step()
    return [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, (FutureWarning,
                                                                                              DeprecationWarning))]


def test_a_step_of_each_stage_warns_nothing_deprecated():
    for rank, caught in enumerate(labutils.launch(_warnings_in_a_step, 2, backend="gloo", timeout=120)):
        assert caught == [], f"rank {rank}: {caught}"
