"""The reference ZeRO optimizers (stages 1 and 2) and the ZeRO-3 wrapper train a small model with a
frozen layer, weight decay and parameter groups of their own lr, betas and weight decay on 2 gloo
ranks (shards of unequal length: the weights' group has 77 trained values, the second unit 63), and match single-process ``torch.optim.AdamW`` on the whole batch
to float32 tolerance; a sharded checkpoint restores the optimizer mid-run."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import labutils
from grading.reference.fsdp import ShardedLayer
from grading.reference.zero import ZeroStage1AdamW, ZeroStage2AdamW

RANKS, STEPS, BATCH_PER_RANK = 2, 4, 5
ATOL = 1e-5


def _model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.GELU()), nn.Sequential(nn.Linear(8, 7), nn.GELU()),
                          nn.Linear(7, 3))
    for param in model[0].parameters():  # a frozen layer
        param.requires_grad_(False)
    return model


def _groups(model: nn.Module) -> list:
    """Weights decayed at one lr and betas, biases not decayed at another (the frozen layer included)."""
    weights = [p for name, p in model.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in model.named_parameters() if name.endswith("bias")]
    return [{"params": weights, "weight_decay": 0.1},
            {"params": biases, "weight_decay": 0.0, "lr": 0.05, "betas": (0.8, 0.95)}]


def _data():
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(STEPS, RANKS * BATCH_PER_RANK, 4, generator=generator),
            torch.randn(STEPS, RANKS * BATCH_PER_RANK, 3, generator=generator))


def _dense(zero3: bool) -> list:
    """torch.optim.AdamW on the whole batch, in one process: the final parameters."""
    model = _model()
    if zero3:  # one weight decay for every shard: a flat shard mixes weights and biases
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.02, weight_decay=0.1)
    else:
        optimizer = torch.optim.AdamW(_groups(model), lr=0.02)
    for x, y in zip(*_data()):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _train_sharded_optimizer(optimizer_class) -> list:
    rank = dist.get_rank()
    model = _model()
    optimizer = optimizer_class(_groups(model), lr=0.02)
    for step, (x, y) in enumerate(zip(*_data())):
        if step == STEPS // 2:  # a checkpoint of this rank's shard, restored into a fresh optimizer
            saved = optimizer.state_dict()
            optimizer = optimizer_class(_groups(model), lr=0.02)
            optimizer.load_state_dict(saved)
        optimizer.zero_grad()
        mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        F.mse_loss(model(x[mine]), y[mine]).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _train_zero3() -> list:
    rank = dist.get_rank()
    units = nn.Sequential(*[ShardedLayer(layer) for layer in _model()])
    optimizer = torch.optim.AdamW([p for p in units.parameters() if p.requires_grad], lr=0.02, weight_decay=0.1)
    for x, y in zip(*_data()):
        optimizer.zero_grad()
        mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        F.mse_loss(units(x[mine]), y[mine]).backward()
        optimizer.step()
    return [unit.gather_parameters(unit.shard) for unit in units]


def _train_all() -> dict:
    return {"stage 1": _train_sharded_optimizer(ZeroStage1AdamW), "stage 2": _train_sharded_optimizer(ZeroStage2AdamW),
            "stage 3": _train_zero3()}


def test_zero_stages_1_2_and_3_train_like_torch_adamw_with_a_frozen_layer_and_weight_decay():
    per_rank = labutils.launch(_train_all, RANKS, backend="gloo", timeout=120)
    dense, dense_zero3 = _dense(zero3=False), _dense(zero3=True)
    initial = [p.detach() for p in _model().parameters()]
    assert not torch.allclose(dense[-1], initial[-1], atol=1e-3)  # the model did train
    assert torch.equal(dense[0], initial[0]) and torch.equal(dense_zero3[0], initial[0])  # and its frozen layer did not
    units = [torch.cat([p.reshape(-1) for p in layer.parameters()]) for layer in _model()]
    assert any(u.numel() % RANKS for u in units[1:])  # a trained unit's shards are uneven
    for rank, result in enumerate(per_rank):
        for stage in ("stage 1", "stage 2"):
            for index, (got, want) in enumerate(zip(result[stage], dense)):
                torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=f"{stage}, rank {rank}, parameter {index}")
        flat_dense = [torch.cat([p.reshape(-1) for p in chunk]) for chunk in (dense_zero3[0:2], dense_zero3[2:4],
                                                                               dense_zero3[4:6])]
        assert [u.numel() for u in units] == [f.numel() for f in flat_dense]
        for index, (got, want) in enumerate(zip(result["stage 3"], flat_dense)):
            torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=f"stage 3, rank {rank}, unit {index}")
