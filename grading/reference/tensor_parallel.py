"""Tensor-parallel linear layers and the Megatron MLP (Megatron-LM layers.py; arXiv:1909.08053).

A dense layer computes Y = X W^T + b with W of shape (out_features, in_features), as
``torch.nn.Linear`` stores it. Tensor parallelism over ``tp_size`` ranks splits W:

    ColumnParallelLinear: split the OUTPUT features      RowParallelLinear: split the INPUT features
    (the columns of A = W^T, Megatron's picture)          (the rows of A = W^T)

             in_features                                        in_features
           ┌────────────┐                                 ┌─────┬─────┬─────┐
    out    │  W_0 rank0 │  Y_r = X W_r^T + b_r            │ W_0 │ W_1 │ ... │  out   Y = g( sum_r X_r W_r^T ) + b
    feat-  ├────────────┤  (out/t features each)          │rank0│rank1│     │  feat-  (one all-reduce, bias once)
    ures   │  W_1 rank1 │                                 └─────┴─────┴─────┘  ures
           └────────────┘

ColumnParallelLinear enters the region with f (its backward all-reduces dX); RowParallelLinear
leaves it with g (forward all-reduce). The MLP pairs them so that the activation between them
stays sharded: fc1 column-parallel without gather, GeLU on each rank's slice, fc2
row-parallel with parallel input. One all-reduce forward (g), one backward (f).

Every layer takes its tensor-parallel ``group`` explicitly and keeps its parameters on
``labutils.rank.device()``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from grading.reference.tp_communications import (
    copy_to_tp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    scatter_to_tp_region,
)


def _divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"{what}={numerator} is not divisible by tp_size={denominator}")
    return numerator // denominator


def _rank_device():
    from labutils.ranks.rank import device

    return device()


def column_shard(weight: torch.Tensor, bias: torch.Tensor | None, tp_rank: int, tp_size: int):
    """Rank ``tp_rank``'s (weight rows, bias slice) of a dense (out, in) weight and (out,) bias."""
    weight_shard = weight.chunk(tp_size, dim=0)[tp_rank]
    bias_shard = None if bias is None else bias.chunk(tp_size, dim=0)[tp_rank]
    return weight_shard, bias_shard


def row_shard(weight: torch.Tensor, tp_rank: int, tp_size: int) -> torch.Tensor:
    """Rank ``tp_rank``'s columns of a dense (out, in) weight: shape (out, in / tp_size)."""
    return weight.chunk(tp_size, dim=1)[tp_rank]


class ColumnParallelLinear(nn.Module):
    """Y = X W^T + b with W split by output features: this rank holds W_r (out/t, in), b_r (out/t).

    forward: f(X) (identity; all-reduce of dX in backward), then Y_r = X W_r^T + b_r.
    ``gather_output=True`` all-gathers the Y_r into the full Y; otherwise Y_r stays sharded.
    """

    def __init__(self, in_features: int, out_features: int, group, bias: bool = True, gather_output: bool = False):
        super().__init__()
        self.group = group
        self.gather_output = gather_output
        tp_size = dist.get_world_size(group)
        out_per_rank = _divide(out_features, tp_size, "out_features")
        device = _rank_device()
        self.weight = nn.Parameter(torch.randn(out_per_rank, in_features, device=device) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_per_rank, device=device)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp_region(x, self.group)                 # f
        y_local = F.linear(x, self.weight, self.bias)         # X W_r^T + b_r
        return gather_from_tp_region(y_local, self.group) if self.gather_output else y_local


class RowParallelLinear(nn.Module):
    """Y = X W^T + b with W split by input features: this rank holds W_r (out, in/t); b is whole.

    forward: X_r (this rank's slice of the input features; sliced here unless
    ``input_is_parallel``), partial sum X_r W_r^T, g (all-reduce), then + b once: adding b
    before the all-reduce would add it tp_size times.
    """

    def __init__(self, in_features: int, out_features: int, group, bias: bool = True, input_is_parallel: bool = True):
        super().__init__()
        self.group = group
        self.input_is_parallel = input_is_parallel
        tp_size = dist.get_world_size(group)
        in_per_rank = _divide(in_features, tp_size, "in_features")
        device = _rank_device()
        self.weight = nn.Parameter(torch.randn(out_features, in_per_rank, device=device) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features, device=device)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_local = x if self.input_is_parallel else scatter_to_tp_region(x, self.group)
        partial = F.linear(x_local, self.weight)             # X_r W_r^T
        y = reduce_from_tp_region(partial, self.group)        # g: sum over ranks
        return y + self.bias if self.bias is not None else y


class ParallelMLP(nn.Module):
    """Megatron's MLP block: Y = GeLU(X W1^T + b1) W2^T + b2 on tp_size ranks.

    fc1 (hidden -> ffn) column-parallel without gather: each rank holds ffn/t features;
    GeLU acts on that slice locally; fc2 (ffn -> hidden) row-parallel with parallel input.
    Communication: one all-reduce forward (fc2's g), one backward (fc1's f).
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, group, bias: bool = True):
        super().__init__()
        self.fc1 = ColumnParallelLinear(hidden_size, ffn_hidden_size, group, bias=bias, gather_output=False)
        self.fc2 = RowParallelLinear(ffn_hidden_size, hidden_size, group, bias=bias, input_is_parallel=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))
