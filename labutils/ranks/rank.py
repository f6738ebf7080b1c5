"""What a rank knows about itself: its device and backend (set when the rank starts).

Inside a function run by ``labutils.launch`` / ``Pool.run`` (or under ``labutils run`` with
torchrun), ``labutils.rank.device()`` is this rank's device: ``cuda:<local_rank>`` under
NCCL, ``cpu`` under gloo. Rank and world size come from ``torch.distributed`` as usual.
"""
from __future__ import annotations

_device = None
_backend = None


def configure(device, backend: str) -> None:
    """Record this process's device and backend (called by the launcher, not by students)."""
    global _device, _backend
    _device, _backend = device, backend


def device():
    """This rank's torch.device; ``cpu`` outside a launched rank."""
    if _device is None:
        import torch

        return torch.device("cpu")
    return _device


def backend() -> str | None:
    """"gloo" or "nccl" inside a launched rank, ``None`` elsewhere."""
    return _backend
