"""Data parallelism: gradient averaging, in buckets, overlapped with backward, wrapped in an
``nn.Module`` used like PyTorch's DistributedDataParallel (Li et al., "PyTorch Distributed",
arXiv:2006.15704; picotron data_parallel.py).

d replicas hold the same parameters; replica r computes g_r, the gradient of its mean loss on
its 1/d of the batch. With equal shards the full batch's gradient is the mean

    g = (1/d) sum_r g_r          one all-reduce (SUM) then a division by d, never both an AVG and a division

Three ways to send it, each faster than the last:

    per parameter       one all-reduce per tensor: many small messages, each paying the latency alpha
    in buckets          flatten about bucket_cap_bytes of gradients into one buffer per all-reduce
                        (DDP's rule: a bucket closes once it reaches its cap; by default the first
                        bucket, the last layers' gradients, is 1 MiB and the others 25 MiB)
    overlapped          a hook per trainable parameter counts the gradients as backward produces
                        them; a bucket's all-reduce starts (async) as soon as it and every bucket
                        before it are complete, while backward computes the earlier layers' gradients

Buckets take parameters in reverse order of ``model.parameters()``, the order in which
backward produces their gradients. ``DataParallel`` adds what a real model needs: frozen
parameters (never hooked, never sent), parameters unused in a step (their bucket is flushed by
``finish_gradient_synchronization``; one that no rank used keeps ``.grad`` None), buffers
(broadcast with the parameters), and ``no_sync()`` for gradient accumulation.

Every function takes its data-parallel ``group`` explicitly.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn


def _grad_or_zeros(param: torch.Tensor) -> torch.Tensor:
    return param.grad if param.grad is not None else torch.zeros_like(param)


def average_gradients(params, group) -> None:
    """g <- (1/d) sum_r g_r for every parameter, one all-reduce each (a missing gradient counts as zero)."""
    world_size = dist.get_world_size(group)
    for param in params:
        grad = _grad_or_zeros(param)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=group)
        param.grad = grad / world_size


#: DDP's defaults (``torch.nn.parallel.DistributedDataParallel`` without ``bucket_cap_mb``): a first
#: bucket of 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), then 25 MiB buckets.
DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES = 2**20, 25 * 2**20


def make_buckets(params, bucket_cap_bytes: int, first_bucket_cap_bytes: int | None = None) -> list:
    """Parameters in reverse order, cut into buckets as DDP cuts them (torch's
    ``_compute_bucket_assignment_by_size``): a bucket closes once it holds at least its cap in bytes
    (so a parameter larger than the cap gets a bucket of its own); the first bucket's cap is
    ``first_bucket_cap_bytes`` (default: ``bucket_cap_bytes``, as DDP with an explicit ``bucket_cap_mb``)."""
    buckets, current, current_bytes = [], [], 0
    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
    for param in reversed(list(params)):
        current.append(param)
        current_bytes += param.numel() * param.element_size()
        if current_bytes >= cap:
            buckets.append(current)
            current, current_bytes, cap = [], 0, bucket_cap_bytes
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
    """Average one bucket's gradients with a single all-reduce of their flat concatenation (each
    rank's scaled by 1/d first, then summed: DDP's order)."""
    flat = flatten_gradients(bucket).mul_(1 / dist.get_world_size(group))
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    unflatten_into_gradients(flat, bucket)


def broadcast_parameters_and_buffers(module: nn.Module, group) -> None:
    """Every rank of ``group`` takes group rank 0's parameters and buffers (frozen ones included:
    replicas must be identical, not only in what they train). ``src`` is a global rank."""
    source = dist.get_global_rank(group, 0)
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        dist.broadcast(tensor.data, src=source, group=group)


class DataParallel(nn.Module):
    """``module`` replicated over ``group``: gradients averaged in buckets overlapped with backward.

        model = DataParallel(module, group, bucket_cap_bytes)   # broadcast from group rank 0, hooks
                                                                # (None: DDP's 1 MiB first bucket, then 25 MiB)
        loss_fn(model(x_local), y_local).backward()             # full buckets start their all-reduce
        model.finish_gradient_synchronization()                 # flush, wait, write the averaged .grad
        optimizer.step()

    Buckets (``make_buckets``) hold only the parameters that require grad: a frozen parameter is
    never hooked, never sent, and its ``.grad`` stays None. Buckets start in index order on every
    rank (bucket i waits for buckets < i), so the ranks' all-reduces match even when a parameter
    is used on some ranks only. Each bucket's flat buffer ends with one "used" flag per parameter
    (1 if its ``.grad`` is set on this rank): after the SUM, a parameter that no rank used keeps
    ``.grad`` None; one used on k >= 1 ranks gets (sum of the k gradients) / d on every rank, the
    gradient of the whole batch's loss (the other ranks' samples contribute zero to it).
    Inside ``no_sync()`` the hooks send nothing and gradients accumulate locally; the first
    synchronised backward after it averages the accumulated sums. A second synchronised backward
    before ``finish_gradient_synchronization()`` raises: its gradients could be lost.
    """

    def __init__(self, module: nn.Module, group, bucket_cap_bytes: int | None = None):
        super().__init__()
        self.module, self.group = module, group
        broadcast_parameters_and_buffers(module, group)
        trainable = [param for param in module.parameters() if param.requires_grad]
        if bucket_cap_bytes is None:  # DDP's defaults: a small first bucket, to start sooner
            self.buckets = make_buckets(trainable, DEFAULT_BUCKET_CAP_BYTES, DEFAULT_FIRST_BUCKET_BYTES)
        else:
            self.buckets = make_buckets(trainable, bucket_cap_bytes)
        self._bucket_of = {id(param): index for index, bucket in enumerate(self.buckets) for param in bucket}
        self._sync_gradients = True
        self._reset()
        for param in trainable:
            param.register_post_accumulate_grad_hook(self._on_gradient_ready)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self):
        """Backward passes inside the block only accumulate local gradients (no communication)."""
        previous, self._sync_gradients = self._sync_gradients, False
        try:
            yield
        finally:
            self._sync_gradients = previous

    def _reset(self) -> None:
        self._waiting = [len(bucket) for bucket in self.buckets]  # gradients each bucket still waits for
        self._next_bucket = 0
        self._in_flight: list = []
        self._marked_ready: set = set()  # id() of the parameters whose gradient arrived in this step

    def _on_gradient_ready(self, param: torch.Tensor) -> None:
        if not self._sync_gradients:
            return
        if id(param) in self._marked_ready:
            raise RuntimeError("a second backward before finish_gradient_synchronization(): call it after every "
                               "synchronised backward, or run the earlier backward passes under no_sync()")
        self._marked_ready.add(id(param))
        self._waiting[self._bucket_of[id(param)]] -= 1
        while self._next_bucket < len(self.buckets) and self._waiting[self._next_bucket] <= 0:
            self._start(self._next_bucket)

    def _start(self, index: int) -> None:
        bucket = self.buckets[index]
        used = torch.tensor([param.grad is not None for param in bucket], dtype=bucket[0].dtype,
                            device=bucket[0].device)
        # each rank's gradient scaled by 1/d, then summed: DDP's order (exact in float32 when d is a power of 2)
        flat = torch.cat([flatten_gradients(bucket).mul_(1 / dist.get_world_size(self.group)), used])
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        self._in_flight.append((index, work, flat))
        self._next_bucket = index + 1

    def finish_gradient_synchronization(self) -> None:
        """Start the buckets not started (in order), wait for every all-reduce, write each
        parameter's averaged ``.grad`` (None where no rank had one). A no-op inside ``no_sync()``."""
        if not self._sync_gradients:
            return
        while self._next_bucket < len(self.buckets):
            self._start(self._next_bucket)
        for index, work, flat in self._in_flight:
            work.wait()
            bucket = self.buckets[index]
            unflatten_into_gradients(flat[:-len(bucket)], bucket)
            for param, users in zip(bucket, flat[-len(bucket):].tolist()):
                if users == 0:
                    param.grad = None
        self._reset()


def train_data_parallel(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, lr: float,
                        weight_decay: float, microbatches: int, bucket_cap_bytes: int, group) -> nn.Module:
    """AdamW on ``inputs[step]`` / ``targets[step]`` through ``DataParallel``: each rank takes its
    contiguous 1/d of every batch, cuts it into ``microbatches`` and accumulates their gradients
    (all but the last under ``no_sync``; each loss divided by ``microbatches``, so that the sum is
    the mean squared error over the rank's share). Returns ``model``, trained in place."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if inputs.shape[1] < world_size * microbatches:
        raise ValueError(f"a batch of {inputs.shape[1]} cannot give {world_size} ranks {microbatches} microbatches each")
    replicated = DataParallel(model, group, bucket_cap_bytes)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                                  weight_decay=weight_decay)
    for x, y in zip(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        pieces = zip(x.tensor_split(world_size)[rank].tensor_split(microbatches),
                     y.tensor_split(world_size)[rank].tensor_split(microbatches))
        for index, (x_micro, y_micro) in enumerate(pieces):
            with replicated.no_sync() if index < microbatches - 1 else nullcontext():
                (torch.nn.functional.mse_loss(replicated(x_micro), y_micro) / microbatches).backward()
        replicated.finish_gradient_synchronization()
        optimizer.step()
    return model
