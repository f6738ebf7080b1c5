"""``LABUTILS_STRICT_COLLECTIVES=1``: NCCL's rules checked on every launch, gloo included.

NCCL hangs, or pairs the wrong calls, where gloo forgives: ranks must issue the same
collectives in the same order with the same shapes and dtypes, and each tensor must sit on
the rank's own GPU. With the switch on, every rank a launch starts:

- before each collective on the default group, the ranks compare its fingerprint (op, shapes,
  dtypes) over a gloo group of their own, and a difference raises on every rank at once,
  naming two ranks and both calls (the check torch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
  ``ProcessGroupWrapper`` makes, which cannot be used: with torch 2.13 DDP crashes on it);
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

from labutils.ranks.errors import LaunchError

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


def _group_of(fn, args, kwargs):
    """The ``group`` argument of a call of ``fn`` (None when not given)."""
    import inspect

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    return bound.arguments.get("group")


def fingerprint(name: str, tensors: list) -> tuple:
    """What every rank's call must share: the op, and the dtype and shape of its first tensor (the
    one each rank contributes or receives alike; only all-to-all's may differ in shape, and a
    root's extra gather/scatter list is not compared)."""
    if not tensors:
        return (name, None, None)
    first = tensors[0]
    shape = None if name.startswith("all_to_all") else tuple(first.shape)
    return (name, str(first.dtype).removeprefix("torch."), shape)


def describe(call) -> str:
    """"all_reduce of float32 [4]" for a :func:`fingerprint`."""
    name, dtype, shape = call
    return f"{name} of {dtype or 'no tensor'}{'' if shape is None else ' ' + str(list(shape))}"


def _same_everywhere(call, helper) -> None:
    """Exchange this collective's fingerprint over ``helper`` (a gloo group of every rank); raise
    :class:`CollectiveMismatchError` naming two ranks and their calls when they differ."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    everyone = [None] * dist.get_world_size()
    distributed_c10d.all_gather_object(everyone, call, group=helper)  # torch's own: no tracer records it
    other = next((r for r, theirs in enumerate(everyone) if theirs != call), None)
    if other is not None:
        raise CollectiveMismatchError(
            f"rank {dist.get_rank()} called {describe(call)} while rank {other} called {describe(everyone[other])}: "
            "the ranks issued different collectives (NCCL would hang or pair the wrong calls)")


def device_checked(fn, name: str, device, helper=None):
    """``fn`` (a torch.distributed collective) that first checks each tensor argument is on
    ``device`` and, with a ``helper`` group, that every rank makes the same call (default group only)."""
    @functools.wraps(fn)
    def checked(*args, **kwargs):
        tensors = list(_tensors(list(args) + list(kwargs.values())))
        for tensor in tensors:
            if tensor.device != device:
                raise CollectiveDeviceError(
                    f"{name} got a tensor on {tensor.device}, but this rank's device is {device}: under NCCL "
                    f"every tensor of a collective must be on the rank's GPU. Create it with "
                    f"device=labutils.rank.device() (`device` in %%distributed) or move it with .to(device)")
        if helper is not None and _group_of(fn, args, kwargs) in (None, _world()):
            _same_everywhere(fingerprint(name, tensors), helper)
        return fn(*args, **kwargs)
    checked.__code__ = checked.__code__.replace(co_name=f"checked_{name}")  # a stack names the call
    checked.__labutils_strict__ = True
    return checked


def checked_call_in(stack: str) -> str | None:
    """The collective a rank's stack shows it inside through these checks ("all_reduce"), or None."""
    import re

    found = re.search(r"in checked_(\w+)", stack)
    return found.group(1) if found else None


def _world():
    import torch.distributed as dist

    return dist.group.WORLD


def setup(device) -> bool:
    """In a rank, right after ``init_process_group``: when the switch is set, every checked
    collective first checks its tensors are on ``device`` and, on the default group, compares
    its fingerprint (op, shapes, dtypes) across the ranks over a gloo group of its own. Returns
    whether the checks are on. (torch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` wrapper makes the same
    comparison, but with torch 2.13 constructing DDP on a group it wraps crashes the process.)"""
    if not enabled():
        return False
    import torch.distributed as dist

    helper = dist.new_group(backend="gloo")
    for name in CHECKED:
        fn = getattr(dist, name)
        if not getattr(fn, "__labutils_strict__", False):
            setattr(dist, name, device_checked(fn, name, device, helper))
    return True
