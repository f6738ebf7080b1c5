"""`labutils bench OP`: benchmark one collective and print nccl-tests' table.

    labutils bench all_reduce --world-size 4 -b 8 -e 64M -f 2       # starts 4 ranks itself
    labutils bench all_gather --world-size 2 -b 1K -e 1M --json     # the records as JSON
    torchrun --nproc-per-node 8 -m labutils bench all_reduce -b 8 -e 1G -f 2

Under torchrun (RANK and WORLD_SIZE set) every process joins the process group from the
environment and runs the benchmark in-process; rank 0 prints. The flags follow
nccl-tests (-b, -e, -f, -n, -w, -d, -o, -r, -c, -a). The exit status is 1 when the check
found wrong elements.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys

from labutils.command.usage import UsageError


def add_arguments(parser) -> None:
    from labutils.measure.collectives_bench import DEFAULT_ITERS, DEFAULT_WARMUP, OPS, REDOPS, STATS, TIME_ACROSS_RANKS

    parser.add_argument("op", help=f"the collective: {', '.join(OPS)}")
    parser.add_argument("--world-size", type=int, default=None,
                        help="ranks to start (default 2); under torchrun, its WORLD_SIZE")
    parser.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 64K, 1M (K = 1024 B)")
    parser.add_argument("-e", "--maxbytes", default="1M", help="largest size, e.g. 64M, 1G")
    parser.add_argument("-f", "--stepfactor", type=int, default=2, help="multiply the size by this each step")
    parser.add_argument("-n", "--iters", type=int, default=DEFAULT_ITERS, help="timed iterations per size")
    parser.add_argument("-w", "--warmup-iters", type=int, default=DEFAULT_WARMUP,
                        help="warm-up iterations at every size (1, as nccl-tests >= 2.18)")
    parser.add_argument("-d", "--dtype", default="float", help="float, half, bfloat16, double, int32, int8, ...")
    parser.add_argument("-o", "--redop", default="sum", choices=REDOPS, help="reduction (all_reduce, reduce_scatter)")
    parser.add_argument("-r", "--root", type=int, default=0, help="root rank (broadcast)")
    parser.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="check results (#wrong)")
    parser.add_argument("-a", "--average", default="avg", choices=TIME_ACROSS_RANKS,
                        help="combine the ranks' times: avg (nccl-tests' default), max, min or rank0")
    parser.add_argument("--stat", default="mean", choices=STATS,
                        help="time over iterations: mean (nccl-tests), median or min (steadier on a busy CPU)")
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before started ranks are stopped")
    parser.add_argument("--json", action="store_true", help="print the records as JSON instead of the table")


def _options(args) -> dict:
    return {"iters": args.iters, "warmup": args.warmup_iters, "dtype": args.dtype, "redop": args.redop,
            "root": args.root, "check": bool(args.check), "time_across_ranks": args.average,
            "stat": args.stat}


def _under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _run_in_process(args) -> tuple[list[dict], bool]:
    """Under torchrun: join the group, benchmark, leave; (records, whether this rank prints)."""
    import torch.distributed as dist

    from labutils.measure.collectives_bench import run_collective_bench
    from labutils.ranks.multinode import init_from_environment

    world_size = int(os.environ["WORLD_SIZE"])
    if args.world_size is not None and args.world_size != world_size:
        raise UsageError(f"--world-size {args.world_size} disagrees with torchrun's WORLD_SIZE={world_size}: "
                         "leave --world-size out under torchrun")
    init_from_environment(args.backend)
    try:
        records = run_collective_bench(args.op, args.minbytes, args.maxbytes, args.stepfactor, **_options(args))
        return records, dist.get_rank() == 0
    finally:
        dist.destroy_process_group()


def _run_on_new_ranks(args) -> tuple[list[dict], bool]:
    from labutils.measure.collectives_bench import collective_bench

    world_size = 2 if args.world_size is None else args.world_size
    if world_size < 1:
        raise UsageError(f"--world-size must be at least 1, got {world_size}")
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the table / JSON only
        records = collective_bench(args.op, world_size, args.minbytes, args.maxbytes, args.stepfactor,
                                   backend=args.backend, timeout=args.timeout, **_options(args))
    return records, True


def main(args) -> int:
    from labutils.measure.collectives_bench import OPS, format_nccl_tests

    if args.op not in OPS:
        raise UsageError(f"unknown collective {args.op!r}: choose one of {', '.join(OPS)}")
    try:
        records, prints = _run_in_process(args) if _under_torchrun() else _run_on_new_ranks(args)
    except ValueError as exc:  # bad sizes, dtype, root, backend: the user's to fix
        raise UsageError(str(exc)) from None
    if not records:
        raise UsageError(f"no size between {args.minbytes} and {args.maxbytes} B gives each rank a whole "
                         "element: raise -e")
    if prints:
        print(json.dumps(records, indent=1) if args.json else format_nccl_tests(records))
    wrong = sum((r[f"{mode}_wrong"] or 0) for r in records for mode in ("oop", "ip"))
    return 1 if wrong else 0
