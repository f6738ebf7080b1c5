"""Run the course's rank functions under torchrun, on one node or several.

The functions given to ``labutils.launch`` run unchanged under torchrun, which starts the
processes itself (one agent per node, c10d rendezvous)::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
             --rdzv-endpoint HEAD_NODE:29400 --rdzv-id myjob \\
             -m labutils run mymodule:train --args '[10]' --output results.pt

Each process initialises the default process group from torchrun's environment, with the
backend rank 0 chose for the whole job (NCCL when each of its ranks has a GPU of its own and
CUDA works, gloo otherwise; under NCCL bound to the process's GPU), calls ``train(10)``, and rank 0 saves the
list of every rank's result (gathered with ``all_gather_object``, tensors on the CPU) to
``--output``.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys

from labutils.ranks import _wire
from labutils.command.usage import UsageError

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def add_arguments(parser) -> None:
    parser.add_argument("target", help="module:function (or path/to/file.py:function) to run on every rank")
    parser.add_argument("--args", default="[]", help="JSON list of positional arguments")
    parser.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    parser.add_argument("--output", help="rank 0 saves every rank's result here (torch.save)")


def load_target(target: str):
    """Resolve ``module:function`` or ``file.py:function`` to the function."""
    if ":" not in target:
        raise UsageError(f"target must look like module:function, got {target!r}")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py"):
        if not os.path.exists(where):
            raise UsageError(f"no such file: {where}")
        spec = importlib.util.spec_from_file_location("_labutils_target", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = _import_from_cwd_first(where)
        except ImportError as exc:
            raise UsageError(f"cannot import {where!r}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{where} has no function {name!r}")
    return fn


def _import_from_cwd_first(dotted: str):
    """Import ``dotted`` ("mod" or "pkg.mod"), its top-level package found in the current
    folder first (as ``python -m`` would), else wherever a normal import finds it."""
    top = dotted.partition(".")[0]
    if top not in sys.modules:
        spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
        if spec is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[top]
                raise
    return importlib.import_module(dotted)


#: the key (in the job's rendezvous store) under which rank 0 publishes the job's backend
BACKEND_KEY = "labutils/job_backend"


def job_backend(asked: str, store, rank: int, local_world: int) -> str:
    """The backend of the whole job, decided once: rank 0 resolves ``asked`` ("auto" probes
    CUDA on its node, up to :data:`labutils.devices.cuda_probe.PROBE_TIMEOUT_S`) and publishes the
    answer in the rendezvous ``store``; every other process waits for it there. No process
    decides alone, so one slow probe cannot leave a job half gloo, half NCCL. A process that
    cannot follow rank 0's NCCL (fewer GPUs on its node than its local ranks) fails at once
    and says so, instead of hanging the rendezvous."""
    from labutils.devices.backend import choose_backend, visible_gpu_count

    if rank == 0:
        chosen = choose_backend(asked, local_world).backend
        store.set(BACKEND_KEY, chosen)
        return chosen
    chosen = store.get(BACKEND_KEY).decode()
    if chosen == "nccl" and visible_gpu_count() < local_world:
        raise UsageError(f"rank 0 chose NCCL for this job, but this node shows {visible_gpu_count()} GPU(s) "
                         f"for {local_world} local ranks: start as many processes per node as it has "
                         "GPUs, or pass --backend gloo")
    return chosen


def attempt_store(store):
    """``store`` with its keys kept apart per torchrun attempt (``TORCHELASTIC_RESTART_COUNT``).

    After ``--max-restarts`` starts a failed job again, its new processes may meet in the same
    store as the old ones. Without a prefix of their own they could read what a dead process of the
    previous attempt published there (its backend choice, or gloo's and NCCL's connection details)
    and connect to an address nobody listens on any more."""
    import torch.distributed as dist

    return dist.PrefixStore(f"labutils/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def init_from_environment(backend: str = "auto"):
    """Initialise the default process group from torchrun's variables; return the device.

    The backend is the job's (:func:`job_backend`: rank 0 decides for all, through the
    rendezvous store; "auto" gives NCCL only when each of rank 0's ``LOCAL_WORLD_SIZE``
    ranks has a GPU and CUDA works). Under NCCL the rank's own GPU (``cuda:<LOCAL_RANK>``)
    becomes its current device and is passed to ``init_process_group`` as ``device_id``, so
    NCCL binds it at once and every CUDA buffer of this process (collectives' own included)
    lives there, not on cuda:0.
    """
    import torch
    import torch.distributed as dist

    from labutils import rank as rank_info

    missing = [v for v in _TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise UsageError(f"not started by torchrun (missing {', '.join(missing)}); "
                         "use `torchrun ... -m labutils run module:function`")
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if dist.is_initialized():
        backend = dist.get_backend()
    else:
        store, rank, world_size = next(dist.rendezvous("env://"))
        store = attempt_store(store)
        backend = job_backend(backend, store, rank, local_world)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        options = {"device_id": device}
    else:
        device, options = torch.device("cpu"), {}
    if not dist.is_initialized():
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, **options)
    rank_info.configure(device, backend)
    return device


def main(args) -> int:
    import cloudpickle
    import torch
    import torch.distributed as dist

    try:
        call_args, call_kwargs = json.loads(args.args), json.loads(args.kwargs)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args/--kwargs must be JSON: {exc}") from None
    fn = load_target(args.target)
    init_from_environment(args.backend)
    try:
        result = _wire.dumps_on_cpu(fn(*call_args, **call_kwargs))  # tensors on the CPU, wherever they sit
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        if dist.get_rank() == 0 and args.output:
            torch.save([cloudpickle.loads(b) for b in gathered], args.output)
    finally:
        dist.destroy_process_group()
    # Leave without running interpreter teardown: with gloo, DDP's reducer threads can abort
    # the process at exit ("terminate called without an active exception") after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
