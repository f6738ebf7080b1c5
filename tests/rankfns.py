"""Importable rank functions for tests that start ranks outside pytest (torchrun, scripts)."""
import torch
import torch.distributed as dist


def rank_sum(scale: int = 1):
    """All-reduce of each rank's number times ``scale``: sum(range(world_size)) * scale."""
    t = torch.tensor([float(dist.get_rank() * scale)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": t.item()}
