"""Tensor-parallel communication, as autograd functions (Megatron-LM mappings.py; picotron).

Shoeybi et al., "Megatron-LM" (arXiv:1909.08053), section 3, name two conjugate operators:

    f: forward identity,   backward all-reduce    (enters a tensor-parallel region)
    g: forward all-reduce, backward identity      (leaves a tensor-parallel region)

With a column-parallel layer followed by a row-parallel one, a block needs exactly one g
in the forward pass and one f (its all-reduce) in the backward pass:

        X ──f──> [ X A_r on rank r ] ──> [ (X A_r) B_r ] ──g──> sum_r (X A_r) B_r = X A B

Two more mappings move between a sharded last dimension and a full one:

    gather:  forward all-gather along the last dim,  backward keep this rank's slice
    scatter: forward keep this rank's slice,         backward all-gather along the last dim

Every function takes the tensor-parallel ``group`` explicitly (no global state) and calls
collectives through ``torch.distributed`` so that ``labutils.measure.commtrace`` sees them.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def split_last_dim(x: torch.Tensor, group) -> torch.Tensor:
    """This rank's contiguous slice of ``x`` along its last dimension (size / tp_size each).

        x: [ .. slice 0 .. | .. slice 1 .. | ... ]   rank r keeps slice r
    """
    tp_size, tp_rank = dist.get_world_size(group), dist.get_rank(group)
    if x.shape[-1] % tp_size:
        raise ValueError(f"last dimension {x.shape[-1]} is not divisible by tp_size={tp_size}")
    return x.chunk(tp_size, dim=-1)[tp_rank].contiguous()


def all_gather_last_dim(x: torch.Tensor, group) -> torch.Tensor:
    """Concatenate every rank's ``x`` along the last dimension, in rank order."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


class CopyToTPRegion(torch.autograd.Function):
    """f: identity forward; all-reduce (sum) of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        grad_input = grad_output.clone()
        dist.all_reduce(grad_input, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad_input, None


class ReduceFromTPRegion(torch.autograd.Function):
    """g: all-reduce (sum) forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        output = x.clone()
        dist.all_reduce(output, op=dist.ReduceOp.SUM, group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class GatherFromTPRegion(torch.autograd.Function):
    """All-gather along the last dimension forward; keep this rank's slice backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad_output):
        return split_last_dim(grad_output, ctx.group), None


class ScatterToTPRegion(torch.autograd.Function):
    """Keep this rank's slice of the last dimension forward; all-gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return split_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad_output):
        return all_gather_last_dim(grad_output, ctx.group), None


def copy_to_tp_region(x: torch.Tensor, group) -> torch.Tensor:
    """f (see ``CopyToTPRegion``)."""
    return CopyToTPRegion.apply(x, group)


def reduce_from_tp_region(x: torch.Tensor, group) -> torch.Tensor:
    """g (see ``ReduceFromTPRegion``)."""
    return ReduceFromTPRegion.apply(x, group)


def gather_from_tp_region(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather along the last dimension (see ``GatherFromTPRegion``)."""
    return GatherFromTPRegion.apply(x, group)


def scatter_to_tp_region(x: torch.Tensor, group) -> torch.Tensor:
    """Keep this rank's slice of the last dimension (see ``ScatterToTPRegion``)."""
    return ScatterToTPRegion.apply(x, group)
