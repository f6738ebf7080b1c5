"""One-shot launch: run a function on N ranks and get every rank's result back.

    import labutils
    import torch.distributed as dist

    def total():
        t = torch.ones(1, device=labutils.rank.device()) * dist.get_rank()  # cuda:k under NCCL
        dist.all_reduce(t)
        return t

    labutils.launch(total, 4)      # -> [tensor([6.]), tensor([6.]), tensor([6.]), tensor([6.])]

Under NCCL (``backend="auto"`` with a GPU per rank) collectives take only CUDA tensors:
create them on ``labutils.rank.device()`` and the function runs on gloo and NCCL alike.

Ranks are fresh processes forked from a template that already imported torch (or fresh
interpreters where fork is unavailable), never forks of the notebook kernel.
"""
from __future__ import annotations

from labutils.ranks.call_args import pickle_call, validate_timeout, validate_world_size
from labutils.ranks.pool import Pool


def launch(fn, world_size: int, *args, backend: str = "auto", timeout: float | None = None, **kwargs) -> list:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks and return their results in rank order.

    The process group is initialised before ``fn`` runs (``torch.distributed`` is ready;
    ``labutils.rank.device()`` is the rank's device). ``backend``: "auto", "gloo" or
    "nccl". ``timeout``: seconds before ranks still running are stopped and a
    ``RankTimeoutError`` names them. Tensors in the results are moved to the CPU.
    Arguments are checked (and pickled) before any process starts.
    """
    __tracebackhide__ = True
    validate_world_size(world_size)
    validate_timeout(timeout)
    pickle_call(fn, args, kwargs)
    with Pool(world_size, backend=backend, timeout=timeout) as pool:
        return pool.run(fn, *args, **kwargs)
