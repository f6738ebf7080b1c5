"""Data parallelism: gradient averaging, in buckets, overlapped with backward (PyTorch DDP,
Li et al., "PyTorch Distributed", arXiv:2006.15704; picotron data_parallel.py).

N replicas hold the same parameters; replica r computes g_r, the gradient of its mean loss on
its 1/N of the batch. With equal shards the full batch's gradient is the mean

    g = (1/N) sum_r g_r          one all-reduce (SUM) then a division by N, never both an AVG and a division

Three ways to send it, each faster than the last:

    per parameter       one all-reduce per tensor: many small messages, each paying the latency alpha
    in buckets          flatten about bucket_cap_bytes of gradients into one buffer per all-reduce
    overlapped          a hook per parameter counts the gradients as backward produces them; a
                        bucket's all-reduce starts (async) as soon as its last gradient is ready,
                        while backward keeps computing the earlier layers' gradients

Buckets take parameters in reverse order of ``model.parameters()``, the order in which
backward produces their gradients. A parameter that received no gradient (unused in this
forward) would keep its bucket waiting forever: ``finish()`` flushes every bucket not yet
sent, with zeros for missing gradients, as DDP's ``find_unused_parameters`` does.

Every function takes its data-parallel ``group`` explicitly.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def _grad_or_zeros(param: torch.Tensor) -> torch.Tensor:
    return param.grad if param.grad is not None else torch.zeros_like(param)


def average_gradients(params, group) -> None:
    """g <- (1/N) sum_r g_r for every parameter, one all-reduce each (a missing gradient counts as zero)."""
    world_size = dist.get_world_size(group)
    for param in params:
        grad = _grad_or_zeros(param)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=group)
        param.grad = grad / world_size


def make_buckets(params, bucket_cap_bytes: int) -> list:
    """Parameters in reverse order, cut into buckets: a bucket closes once it holds at least
    ``bucket_cap_bytes`` bytes (so a parameter larger than the cap gets a bucket of its own)."""
    buckets, current, current_bytes = [], [], 0
    for param in reversed(list(params)):
        current.append(param)
        current_bytes += param.numel() * param.element_size()
        if current_bytes >= bucket_cap_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
    if current:
        buckets.append(current)
    return buckets


def flatten_gradients(bucket: list) -> torch.Tensor:
    """One flat buffer holding the bucket's gradients back to back (zeros for a missing one)."""
    return torch.cat([_grad_or_zeros(param).reshape(-1) for param in bucket])


def unflatten_into_gradients(flat: torch.Tensor, bucket: list) -> None:
    """Copy consecutive slices of ``flat`` back into each parameter's ``.grad``."""
    offset = 0
    for param in bucket:
        param.grad = flat[offset:offset + param.numel()].view_as(param).clone()
        offset += param.numel()


def all_reduce_bucket(bucket: list, group) -> None:
    """Average one bucket's gradients with a single all-reduce of their flat concatenation."""
    flat = flatten_gradients(bucket)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    unflatten_into_gradients(flat / dist.get_world_size(group), bucket)


class OverlappingGradSync:
    """Average gradients bucket by bucket while backward runs.

        sync = OverlappingGradSync(list(model.parameters()), group, bucket_cap_bytes)
        loss.backward()          # hooks start each bucket's all-reduce (async) when it is complete
        sync.finish()            # flush buckets left incomplete (unused parameters), wait, write .grad
    """

    def __init__(self, params, group, bucket_cap_bytes: int):
        self.group = group
        self.buckets = make_buckets(params, bucket_cap_bytes)
        self._bucket_of = {id(param): index for index, bucket in enumerate(self.buckets) for param in bucket}
        self._ready = [0] * len(self.buckets)
        self._in_flight: dict = {}
        for bucket in self.buckets:
            for param in bucket:
                param.register_post_accumulate_grad_hook(self._on_gradient_ready)

    def _on_gradient_ready(self, param: torch.Tensor) -> None:
        index = self._bucket_of[id(param)]
        self._ready[index] += 1
        if self._ready[index] == len(self.buckets[index]):
            self._start(index)

    def _start(self, index: int) -> None:
        flat = flatten_gradients(self.buckets[index])
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        self._in_flight[index] = (work, flat)

    def finish(self) -> None:
        """Send the buckets still waiting (in bucket order), wait for all, write the averaged .grad."""
        for index in range(len(self.buckets)):
            if index not in self._in_flight:
                self._start(index)
        world_size = dist.get_world_size(self.group)
        for index, (work, flat) in sorted(self._in_flight.items()):
            work.wait()
            unflatten_into_gradients(flat / world_size, self.buckets[index])
        self._ready = [0] * len(self.buckets)
        self._in_flight = {}


def broadcast_parameters(model: torch.nn.Module, group) -> None:
    """Make every replica start from group rank 0's parameters."""
    source = dist.get_global_rank(group, 0)
    for param in model.parameters():
        dist.broadcast(param.data, src=source, group=group)


def train_data_parallel(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, lr: float,
                        bucket_cap_bytes: int, group) -> torch.nn.Module:
    """SGD on ``inputs[step]`` / ``targets[step]`` (step = 0 .. steps - 1), each rank on its
    contiguous 1/N of every batch, mean-squared-error loss, gradients synchronised by
    ``OverlappingGradSync``. Returns ``model``, trained in place."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    broadcast_parameters(model, group)
    sync = OverlappingGradSync(list(model.parameters()), group, bucket_cap_bytes)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in zip(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        x_local, y_local = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
        torch.nn.functional.mse_loss(model(x_local), y_local).backward()
        sync.finish()
        optimizer.step()
    return model
