"""ZeRO stages 1 and 2 for Adam (Rajbhandari et al., "ZeRO", arXiv:1910.02054; picotron).

Psi parameters are flattened into one vector and cut into N contiguous shards, one per rank of
the data-parallel group (the first Psi mod N shards one element longer):

    flat parameters  [ shard 0 | shard 1 | ... | shard N-1 ]      rank r updates shard r only

    DDP:      all-reduce the gradients; every rank keeps Adam's m and v for all Psi   (K Psi bytes of state)
    stage 1:  all-reduce the gradients; rank r keeps m and v for its shard only, updates its
              shard of the parameters, then all-gathers the updated shards            (K Psi / N)
    stage 2:  reduce-scatter the gradients instead: rank r receives only the mean gradient of
              its shard (gradient memory / N too); same update and all-gather          (2 Psi: same volume as DDP)

All-gather and reduce-scatter need equal pieces: each shard travels in a slot the size of
the longest shard (``shard_slots``), and the padding is dropped on arrival (``unslot``).
Adam is ``torch.optim.Adam``'s (Kingma and Ba, arXiv:1412.6980, no weight decay):

    m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2
    p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def flat_shard_range(numel: int, world_size: int, rank: int) -> tuple:
    """(start, stop) of rank's shard of a flat vector of ``numel`` elements (torch.tensor_split's)."""
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def adam_update_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 step: int, lr: float, betas: tuple, eps: float) -> None:
    """One Adam step (step = 1, 2, ...), in place on ``param``, ``exp_avg`` (m) and ``exp_avg_sq`` (v)."""
    beta1, beta2 = betas
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denominator = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(eps)
    param.addcdiv_(exp_avg, denominator, value=-lr / (1 - beta1**step))


def shard_slots(flat: torch.Tensor, world_size: int) -> torch.Tensor:
    """(world_size, longest shard) rows: row r holds rank r's shard of ``flat``, then zero padding."""
    slot = math.ceil(flat.numel() / world_size)
    slots = flat.new_zeros(world_size, slot)
    for rank in range(world_size):
        start, stop = flat_shard_range(flat.numel(), world_size, rank)
        slots[rank, :stop - start] = flat[start:stop]
    return slots


def unslot(slots: torch.Tensor, numel: int) -> torch.Tensor:
    """The flat vector of ``numel`` elements whose shards fill the rows of ``slots`` (padding dropped)."""
    world_size = slots.shape[0]
    return torch.cat([slots[r, :stop - start] for r, (start, stop) in
                      enumerate(flat_shard_range(numel, world_size, r) for r in range(world_size))])


class ZeroStage1Adam:
    """Adam whose state (m, v) is sharded over ``group``; gradients are all-reduced whole.

    ``exp_avg`` and ``exp_avg_sq`` are flat tensors the size of this rank's shard.
    """

    def __init__(self, params, group, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8):
        self.params, self.group = list(params), group
        self.lr, self.betas, self.eps = lr, betas, eps
        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        self.start, self.stop = flat_shard_range(self.numel, self.world_size, self.rank)
        first = self.params[0]
        self.exp_avg = torch.zeros(self.stop - self.start, dtype=first.dtype, device=first.device)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.step_count = 0

    def _flat_parameters(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _flat_gradients(self) -> torch.Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])

    def _mean_gradient_shard(self) -> torch.Tensor:
        """Stage 1: all-reduce every gradient, keep this rank's shard of the mean."""
        flat = self._flat_gradients()
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        return flat[self.start:self.stop] / self.world_size

    def _all_gather_parameters(self, shard: torch.Tensor) -> None:
        """Every rank gets every updated shard, written back into the parameters."""
        slot = math.ceil(self.numel / self.world_size)
        mine = shard.new_zeros(slot)
        mine[:shard.numel()] = shard
        gathered = shard.new_empty(slot * self.world_size)
        dist.all_gather_into_tensor(gathered, mine, group=self.group)
        flat, offset = unslot(gathered.view(self.world_size, slot), self.numel), 0
        with torch.no_grad():
            for param in self.params:
                param.copy_(flat[offset:offset + param.numel()].view_as(param))
                offset += param.numel()

    def step(self) -> None:
        """One Adam step on this rank's shard, then the all-gather of the parameters."""
        self.step_count += 1
        grad_shard = self._mean_gradient_shard()
        param_shard = self._flat_parameters()[self.start:self.stop].clone()
        adam_update_(param_shard, grad_shard, self.exp_avg, self.exp_avg_sq, self.step_count,
                     self.lr, self.betas, self.eps)
        self._all_gather_parameters(param_shard)


class ZeroStage2Adam(ZeroStage1Adam):
    """Stage 1, with the gradients reduce-scattered: each rank receives only its shard's mean."""

    def _mean_gradient_shard(self) -> torch.Tensor:
        slots = shard_slots(self._flat_gradients(), self.world_size)
        shard = slots.new_empty(slots.shape[1])
        dist.reduce_scatter_tensor(shard, slots.reshape(-1), op=dist.ReduceOp.SUM, group=self.group)
        return shard[:self.stop - self.start] / self.world_size
