"""What a sharded optimizer holds on its rank, measured three ways (lab 4's stages 1 and 2):

1. ``state_bytes``: the tensors reachable from the optimizer (``held_memory.held_storages``), the
   parameters and their gradients left out, must be its state for this rank's shard;
2. and the rank may hold at most ``SMALL_BYTES`` of other tensors made since the optimizer was built
   (``held_memory.held_outside``: a module's globals, a closure, a hook);
3. ``process_growth``: from before the optimizer was built to after its last step, gradients dropped,
   the rank's whole process (``process_memory``: heap in use, resident pages, private files) may grow
   by at most its state and gradient shard plus ``PROCESS_SLACK_BYTES`` (NumPy arrays, bare storages,
   mapped memory, files).

Each returns a string saying what the rank holds when it holds too much. Bytes throughout.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from grading.judge.held_memory import held_outside, held_storages, storages_of
from grading.judge.process_memory import measure as measure_process

#: Bytes an optimizer or a model may hold beyond the exact shards (step counters, small scalars).
SMALL_BYTES = 64
#: Bytes a rank's process may grow by beyond its optimizer state and gradient shard (the
#: optimizer's Python objects, the collectives' buffers, the allocator's rounding).
PROCESS_SLACK_BYTES = 2**20
MIB = 2**20


def warm_up(optimizer_class, defaults: dict) -> None:
    """One step of ``optimizer_class`` on a throwaway parameter: torch.optim's first step imports
    modules (megabytes of the process's memory) that are not the optimizer's state."""
    scratch = nn.Parameter(torch.zeros(4))
    scratch.grad = torch.ones(4)
    optimizer_class([scratch], **defaults).step()


def state_bytes(optimizer, params: list, exact: int, most: int, before: set):
    """A float64 tensor of ``exact`` when the tensors the optimizer reaches (parameters and gradients
    left out) total ``exact`` to ``most`` bytes and the rank holds at most ``SMALL_BYTES`` of tensors
    made since ``before`` (a ``live_storages()`` taken then) that the optimizer does not reach; else a
    string saying how much more (or less) it holds."""
    exclude = storages_of(params + [p.grad for p in params])
    held = held_storages([optimizer], exclude)
    measured = sum(held.values())
    if exact <= measured <= most:
        outside = held_outside(before, exclude | set(held), SMALL_BYTES)
        if sum(outside.values()) <= SMALL_BYTES:
            return torch.tensor([float(exact)], dtype=torch.float64)
        return (f"besides the optimizer's {measured} bytes, this rank holds {sum(outside.values())} bytes of "
                f"tensors made since the optimizer was built that the optimizer does not reach ({len(outside)} "
                "buffers: a module's globals, a closure, a hook?): optimizer state counts wherever it is kept, "
                f"and this rank's is its shard's, {exact} bytes")
    if measured < exact:
        return (f"the optimizer holds {measured} bytes of tensors besides the parameters and their gradients, "
                f"less than its state for this rank's shard ({exact} bytes): where is the optimizer's state?")
    return (f"the optimizer holds {measured} bytes of tensors besides the parameters and their gradients "
            f"({len(held)} buffers, whatever their names), expected its state for this rank's shard: {exact} bytes "
            f"(at most {most}): it keeps state for more than its shard")


def process_growth(optimizer, params: list, allowed: int, private_folder: str | None, before) -> str | None:
    """None when the rank's process has grown since ``before`` (a ``process_memory.measure()``) by at
    most ``allowed`` bytes; else what it holds. The gradients are dropped first, as a training loop drops
    them: ``optimizer.zero_grad()`` (torch's default sets them to None), then every ``.grad`` set to None."""
    optimizer.zero_grad()
    for param in params:
        param.grad = None
    now = measure_process(private_folder)
    grown = now.growth_since(before)
    if grown <= allowed:
        return None
    parts = (f"heap in use {(now.heap - before.heap) / MIB:+.2f} MiB, resident pages "
             f"{(now.resident - before.resident) / MIB:+.2f} MiB, files {(now.files - before.files) / MIB:+.2f} MiB")
    return (f"this rank's process grew by {grown / MIB:.2f} MiB from before the optimizer was built to after the last "
            f"step, gradients dropped ({parts}), where its optimizer state and gradient shard allow "
            f"{allowed / MIB:.2f} MiB (slack included): optimizer state counts however it is kept (NumPy arrays, "
            "storages, Python lists, mapped memory, files), and this rank's is its shard's")
