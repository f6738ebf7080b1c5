"""Rank functions for the anchors of bench/launch.py (importable, as torch.multiprocessing.spawn needs)."""
import os

import torch
import torch.distributed as dist


def spawn_worker(rank: int, world_size: int, port: int) -> None:
    """torch.multiprocessing.spawn target: initialise gloo, one all-reduce, tear down."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


def env_worker() -> None:
    """accelerate.notebook_launcher target: the launcher sets RANK/WORLD_SIZE/MASTER_* for us."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


def ipp_init(rank: int, world_size: int, port: int) -> int:
    """Run on each ipyparallel engine once: join a gloo process group."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    return rank


def ipp_barrier() -> None:
    import torch.distributed as dist

    dist.barrier()
