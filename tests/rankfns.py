"""Importable rank functions for tests that start ranks outside pytest (torchrun, scripts)."""
import torch
import torch.distributed as dist


def rank_sum(scale: int = 1):
    """All-reduce of each rank's number times ``scale``: sum(range(world_size)) * scale."""
    t = torch.tensor([float(dist.get_rank() * scale)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": t.item()}


def objects_after_a_first_optimizer():
    """(whether torch._dynamo was imported before, objects the garbage collector lists once a first AdamW
    is built, which imports it where the rank template has not)."""
    import gc
    import sys

    imported = "torch._dynamo" in sys.modules
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(4))])
    gc.collect()
    return imported, len(gc.get_objects())
