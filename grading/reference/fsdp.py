"""ZeRO stage 3 (FSDP): every layer's parameters stored as this rank's flat shard only
(Rajbhandari et al., "ZeRO", arXiv:1910.02054 section 5.3; Zhao et al., "PyTorch FSDP", arXiv:2304.11277).

A ``ShardedLayer`` wraps one layer (a unit): its parameters, flattened in ``named_parameters``
order, are cut into d shards (``zero.flat_shard_range``) and rank r keeps shard r as the
parameter ``shard``; the layer itself keeps no parameter (a recipe for the maths). Per unit:

    forward:   all-gather the full flat parameters, run the layer, free them (nothing saved but
               the unit's input and shard)
    backward:  all-gather them again, recompute the layer with grad, get dX and the full
               gradient, free the parameters, reduce-scatter the gradient: rank r keeps the
               mean gradient of its shard in ``shard.grad``

Three collectives of N per step (2 all-gathers, 1 reduce-scatter): 3 N against DDP's 2 N. The
shards then train with any local optimizer (``torch.optim.AdamW(model.parameters())``): their
gradients arrive already averaged over the group, so no further collective is needed.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn

from grading.reference.zero import all_gather_shards, flat_shard_range, reduce_scatter_mean


class GatherForLayer(torch.autograd.Function):
    """One unit's forward on gathered parameters; its backward gathers them again."""

    @staticmethod
    def forward(ctx, x, shard, unit):
        full = unit.gather_parameters(shard)
        output = unit.run_layer(full, x)
        ctx.unit = unit
        ctx.save_for_backward(x, shard)  # the full parameters are freed when this returns
        return output

    @staticmethod
    def backward(ctx, grad_output):
        x, shard = ctx.saved_tensors
        unit = ctx.unit
        full = unit.gather_parameters(shard).requires_grad_(ctx.needs_input_grad[1])
        x_leaf = x.detach().requires_grad_(ctx.needs_input_grad[0])
        with torch.enable_grad():
            output = unit.run_layer(full, x_leaf)
        wanted = [t for t in (x_leaf, full) if t.requires_grad]
        grads = dict(zip(map(id, wanted), torch.autograd.grad(output, wanted, grad_output)))
        grad_x = grads.get(id(x_leaf))
        grad_shard = unit.reduce_scatter_mean(grads[id(full)]) if id(full) in grads else None
        return grad_x, grad_shard, None


class ShardedLayer(nn.Module):
    """``layer`` with its parameters stored as this rank's flat shard (``self.shard``) over
    ``group`` (default: every rank). The layer's parameters must all be trainable or all frozen."""

    def __init__(self, layer: nn.Module, group=None):
        super().__init__()
        self.group = group if group is not None else dist.group.WORLD
        self.world_size, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        named = list(layer.named_parameters())
        if not named or len({p.requires_grad for _, p in named}) != 1:
            raise ValueError("a ShardedLayer needs parameters, all trainable or all frozen")
        self.shapes = [(name, p.shape) for name, p in named]
        flat = torch.cat([p.detach().reshape(-1) for _, p in named])
        self.numel = flat.numel()
        start, stop = flat_shard_range(self.numel, self.world_size, self.rank)
        self.shard = nn.Parameter(flat[start:stop].clone(), requires_grad=named[0][1].requires_grad)
        for module in layer.modules():  # the layer keeps no parameter of its own
            for name in list(module._parameters):
                del module._parameters[name]
        self.layer = layer

    def gather_parameters(self, shard: torch.Tensor) -> torch.Tensor:
        """The full flat parameters, all-gathered from every rank's shard (in slots)."""
        return all_gather_shards(shard.detach(), self.numel, self.group)

    def reduce_scatter_mean(self, grad_full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of ``grad_full`` averaged over the group."""
        return reduce_scatter_mean(grad_full, self.group)[0]

    def run_layer(self, full: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The layer's forward with its parameters set to views of ``full``, removed after."""
        owners, offset = [], 0
        for name, shape in self.shapes:
            module_path, _, attribute = name.rpartition(".")
            module = self.layer.get_submodule(module_path)
            numel = math.prod(shape)
            setattr(module, attribute, full[offset:offset + numel].view(shape))
            owners.append((module, attribute))
            offset += numel
        try:
            return self.layer(x)
        finally:
            for module, attribute in owners:
                delattr(module, attribute)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return GatherForLayer.apply(x, self.shard, self)
