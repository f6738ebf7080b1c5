"""``LABUTILS_STRICT_COLLECTIVES=1``: NCCL's rules checked on every launch, gloo included.

NCCL hangs, or pairs the wrong calls, where gloo forgives: ranks must issue the same
collectives in the same order with the same shapes and dtypes, and each tensor must sit on
the rank's own GPU. With the switch on, every rank a launch starts:

- wraps its process group in torch's ``ProcessGroupWrapper`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``):
  before each collective the ranks compare its fingerprint (op, shapes, dtypes, devices), and
  a difference raises on every rank at once, naming both ranks and both calls;
- checks the device of every tensor given to a ``torch.distributed`` collective (not to
  point-to-point calls) against the
  rank's device (``labutils.rank.device()``: ``cuda:<local rank>`` under NCCL), failing at once
  where NCCL would fail or hang;
- and the launcher, when a rank has finished while every other rank is still inside a
  collective :data:`MISMATCH_AFTER_S` seconds later (a collective the finished rank never issued),
  stops every rank and raises :class:`CollectiveMismatchError` naming them and the call.

So a mismatch ends the launch within seconds, with a message, instead of a hang.
"""
from __future__ import annotations

import functools
import os

from labutils.errors import LaunchError

ENV = "LABUTILS_STRICT_COLLECTIVES"
#: seconds after the first rank finished at which ranks still inside a collective are a mismatch
MISMATCH_AFTER_S = 8.0
#: the torch.distributed collectives whose tensor arguments must sit on the rank's device
#: (point-to-point functions stay torch's own: ``P2POp`` accepts only ``dist.isend`` / ``dist.irecv``
#: themselves, and the fingerprint check does not cover them either)
CHECKED = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter")


class CollectiveMismatchError(LaunchError):
    """Ranks issued different collectives: NCCL would hang or pair the wrong calls."""


class CollectiveDeviceError(RuntimeError):
    """A collective was given a tensor that is not on the rank's device."""


def enabled() -> bool:
    """Whether ``LABUTILS_STRICT_COLLECTIVES`` is set (to anything but "", "0")."""
    return os.environ.get(ENV, "") not in ("", "0")


def _tensors(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def device_checked(fn, name: str, device):
    """``fn`` (a torch.distributed collective) that first checks each tensor argument is on ``device``."""
    @functools.wraps(fn)
    def checked(*args, **kwargs):
        for tensor in _tensors(list(args) + list(kwargs.values())):
            if tensor.device != device:
                raise CollectiveDeviceError(
                    f"{name} got a tensor on {tensor.device}, but this rank's device is {device}: under NCCL "
                    f"every tensor of a collective must be on the rank's GPU. Create it with "
                    f"device=labutils.rank.device() (`device` in %%distributed) or move it with .to(device)")
        return fn(*args, **kwargs)
    checked.__labutils_strict__ = True
    return checked


def setup(device) -> bool:
    """In a rank, before ``init_process_group``: turn the checks on when the switch is set.
    ``device``: the rank's device. Returns whether they are on."""
    if not enabled():
        return False
    import torch.distributed as dist

    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    for name in CHECKED:
        fn = getattr(dist, name)
        if not getattr(fn, "__labutils_strict__", False):
            setattr(dist, name, device_checked(fn, name, device))
    return True
