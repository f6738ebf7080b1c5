"""`labutils model QUESTION`: answer a cost-model question from the command line.

    labutils model zero --params 7.5e9 --world-size 64
    labutils model bubble --schedule 1f1b --stages 4 --microbatches 16 [--chunks 2]
    labutils model comm --strategy tp --layers 96 --hidden 12288 --seq-len 2048 --micro-batch-size 1 --tp-size 8
    labutils model comm --params 175e9 --layers 96 --hidden 12288 --seq-len 2048 --micro-batch-size 1 \
        --microbatches 32 --tp-size 8 --pp-size 8 --dp-size 16      # every strategy the arguments allow
    labutils model roofline --gpu h100 --gemm 8192 8192 8192 --dtype bf16   # or --softmax 8192 8192, ...

GB = 1e9 bytes, GB/s = 1e9 B/s, TFLOP/s = 1e12 FLOP/s.
"""
from __future__ import annotations

import argparse
from fractions import Fraction

from labutils.command.usage import UsageError

QUESTIONS = ("zero", "bubble", "comm", "roofline")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="question", metavar="QUESTION")

    zero = sub.add_parser("zero", help="bytes per GPU for DDP and each ZeRO stage")
    zero.add_argument("--params", type=float, required=True, help="parameter count, e.g. 7.5e9")
    zero.add_argument("--world-size", type=int, required=True, help="data-parallel GPUs N")
    zero.add_argument("--optimizer-bytes", type=float, default=12,
                      help="optimizer bytes per parameter K (12 for mixed-precision Adam)")

    bubble = sub.add_parser("bubble", help="pipeline bubble of a schedule, both conventions")
    bubble.add_argument("--schedule", required=True, help="naive, gpipe, 1f1b or interleaved_1f1b")
    bubble.add_argument("--stages", type=int, required=True, help="pipeline stages p")
    bubble.add_argument("--microbatches", type=int, required=True, help="microbatches per step m")
    bubble.add_argument("--chunks", type=int, default=1, help="model chunks per rank v (interleaved_1f1b)")

    comm = sub.add_parser("comm", help="per-device communication volume and calls per step, per strategy")
    comm.add_argument("--strategy", default="all",
                      help="dp, fsdp, tp, pp, or all (default: a table of every strategy the arguments allow)"),
    comm.add_argument("--params", type=float, help="parameter count (dp, fsdp)")
    comm.add_argument("--layers", type=int, help="transformer layers (fsdp, tp)")
    comm.add_argument("--hidden", type=int, help="model width h (tp, pp)")
    comm.add_argument("--seq-len", type=int, help="tokens per sequence s (tp, pp)")
    comm.add_argument("--micro-batch-size", type=int, help="sequences per microbatch b (tp, pp)")
    comm.add_argument("--microbatches", type=int, default=1, help="microbatches per step m")
    comm.add_argument("--tp-size", type=int, default=1)
    comm.add_argument("--pp-size", type=int, default=1)
    comm.add_argument("--dp-size", type=int, default=1)
    comm.add_argument("--bytes-per-value", type=int, default=2, help="2 for fp16/bf16")
    comm.add_argument("--sequence-parallel", action="store_true", help="tp: all-gather + reduce-scatter")
    comm.add_argument("--bandwidth-GBps", type=float,
                      help="per-direction link bandwidth (GB/s) to turn bytes into seconds")

    roofline = sub.add_parser("roofline", help="where an op sits on a GPU's roofline")
    roofline.add_argument("--gpu", required=True, help="v100, a100, h100, h200 or b200")
    roofline.add_argument("--dtype", default="bf16", help="bf16, fp16, ... (V100 has no bf16)")
    roofline.add_argument("--gemm", type=int, nargs=3, metavar=("M", "N", "K"), help="C[M,N] = A[M,K] B[K,N]")
    roofline.add_argument("--elementwise", type=int, metavar="N", help="c = a + b on N elements")
    roofline.add_argument("--softmax", type=int, nargs=2, metavar=("ROWS", "COLS"), help="row softmax, fused")
    roofline.add_argument("--layernorm", type=int, nargs=2, metavar=("ROWS", "COLS"), help="LayerNorm, fused")
    roofline.add_argument("--attention", type=int, nargs=4, metavar=("BATCH", "HEADS", "SEQ", "HEAD_DIM"),
                          help="fused attention forward")


def main(args: argparse.Namespace) -> int:
    handlers = {"zero": _zero, "bubble": _bubble, "comm": _comm, "roofline": _roofline}
    if args.question not in handlers:
        raise UsageError(f"say which question: {', '.join(QUESTIONS)} (e.g. labutils model zero --help)")
    try:
        handlers[args.question](args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return 0


def _gb(nbytes: float) -> str:
    """Bytes as GB (1e9 B), or MB (1e6 B) below one GB."""
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.2f} MB"


def _zero(args) -> None:
    from labutils.costmodel import zero_comm_bytes, zero_memory_table

    table = zero_memory_table(args.params, args.world_size, optimizer_bytes_per_param=args.optimizer_bytes)
    print(f"Model states per GPU, {args.params:.4g} parameters, N = {args.world_size} GPUs "
          f"(GB = 1e9 bytes; 2 + 2 + K = {args.optimizer_bytes:g} bytes per parameter; activations not included)")
    print(f"{'stage':<10}{'params':>10}{'grads':>10}{'optimizer':>11}{'total':>10}   sent per GPU per step")
    for row in table:
        label = "0 (DDP)" if row.stage == 0 else str(row.stage)
        psi = "3 Psi" if row.stage == 3 else "2 Psi"
        comm = zero_comm_bytes(args.params, args.world_size, row.stage)
        print(f"{label:<10}{row.params / 1e9:>10.2f}{row.grads / 1e9:>10.2f}{row.optimizer_states / 1e9:>11.2f}"
              f"{row.total / 1e9:>10.2f}   {psi} x (N-1)/N = {_gb(comm)}")


def _formula_line(label: str, formula: str, value: Fraction) -> str:
    return f"{label:<48}{formula:<16}= {value} = {float(value):.2%}"


def _bubble(args) -> None:
    from labutils.costmodel.schedules import bubble_formula, build_schedule, simulate

    p, m, v = args.stages, args.microbatches, args.chunks
    bubble_formula(args.schedule, p, m, v)  # validates the arguments,
    schedule = build_schedule(args.schedule, p, m, v)  # and the schedule's own constraints, before printing
    if args.schedule == "naive":
        of_total, ideal = Fraction(p - 1, p), Fraction(p - 1)
        forms = ("(p-1)/p", "p-1")
    else:
        of_total, ideal = Fraction(p - 1, v * m + p - 1), Fraction(p - 1, v * m)
        forms = ("(p-1)/(vm+p-1)", "(p-1)/(vm)") if v > 1 else ("(p-1)/(m+p-1)", "(p-1)/m")
    print(f"{args.schedule}: p = {p} stages, m = {m} microbatches" + (f", v = {v} chunks per rank" if v > 1 else ""))
    print(_formula_line("bubble as a share of the whole step", forms[0], of_total))
    print(_formula_line("bubble relative to the ideal (no-bubble) time", forms[1], ideal))
    timeline = simulate(schedule, t_forward=1.0 / v, t_backward=2.0 / v)
    peaks = " ".join(str(n) for n in timeline.peak_in_flight())
    print(f"simulated with t_B = 2 t_F: bubble {timeline.bubble_fraction():.2%} of the step; "
          f"most activations held per rank (microbatch x chunk): {peaks}")


def _volume(args, strategy: str):
    from labutils.costmodel import comm_volume

    return comm_volume(
        strategy, params=args.params, layers=args.layers, hidden=args.hidden, seq_len=args.seq_len,
        micro_batch_size=args.micro_batch_size, num_microbatches=args.microbatches, tp_size=args.tp_size,
        pp_size=args.pp_size, dp_size=args.dp_size, bytes_per_value=args.bytes_per_value,
        sequence_parallel=args.sequence_parallel,
    )


def _comm(args) -> None:
    if args.strategy == "all":
        _comm_table(args)
        return
    volume = _volume(args, args.strategy)
    print(f"{volume.strategy}: {_gb(volume.bytes_per_step)} sent per device per step (as much received), "
          f"in {volume.calls_per_step} {volume.op} call(s) on buffers of {_gb(volume.message_bytes)}")
    print(f"formula: {volume.formula}")
    print(f"whole group of {volume.group_size}: {volume.group_calls_per_step} call(s)/message(s), "
          f"{_gb(volume.total_bytes_per_step)} sent in all (switch load, not step time)")
    if args.bandwidth_GBps is not None:
        print(f"at {args.bandwidth_GBps:g} GB/s per direction: {volume.time_s(args.bandwidth_GBps):.4g} s "
              f"per step if nothing overlaps (latency not counted)")
    print("assumptions:")
    for assumption in volume.assumptions:
        print(f"  - {assumption}")


def _comm_table(args) -> None:
    """One row per strategy whose arguments were given; the others are named with what they need."""
    from labutils.costmodel import STRATEGIES

    volumes, missing = [], []
    for strategy in STRATEGIES:
        try:
            volumes.append(_volume(args, strategy))
        except ValueError as exc:
            if "needs" not in str(exc):  # a real mistake (e.g. layers not a multiple of pp_size)
                raise
            needs = str(exc).split("needs ", 1)[1].split(", ")
            missing.append(f"{strategy} (needs {', '.join('--' + name.replace('_', '-') for name in needs)})")
    if not volumes:
        raise UsageError("give the sizes of at least one strategy: --params for dp; --params and --layers "
                         "for fsdp; --hidden, --seq-len and --micro-batch-size (and --layers for tp) for tp and pp")
    seconds = args.bandwidth_GBps is not None
    print(f"Communication per training step, per device (GB = 1e9 bytes sent; as many received); "
          f"layout t = {args.tp_size} x p = {args.pp_size} x d = {args.dp_size}, m = {args.microbatches}")
    header = f"{'strategy':<9}{'op':<27}{'sent/device':>13}{'calls/device':>14}{'calls in group':>16}"
    print(header + (f"{'s at ' + format(args.bandwidth_GBps, 'g') + ' GB/s':>16}" if seconds else ""))
    for v in volumes:
        row = f"{v.strategy:<9}{v.op:<27}{_gb(v.bytes_per_step):>13}{v.calls_per_step:>14}{v.group_calls_per_step:>16}"
        print(row + (f"{v.time_s(args.bandwidth_GBps):>16.4g}" if seconds else ""))
    print("formulas:")
    for v in volumes:
        print(f"  {v.strategy}: {v.formula}")
    if missing:
        print(f"not computed: {'; '.join(missing)}")
    print("assumptions of one strategy: labutils model comm --strategy NAME ...")


def _roofline(args) -> None:
    from labutils.costmodel import roofline as rf

    ops = {"gemm": rf.gemm, "elementwise": rf.elementwise, "softmax": rf.softmax, "layernorm": rf.layernorm,
           "attention": rf.attention}
    chosen = [name for name in ops if getattr(args, name) is not None]
    if len(chosen) != 1:
        raise UsageError("give exactly one op: --gemm M N K, --elementwise N, --softmax ROWS COLS, "
                         "--layernorm ROWS COLS or --attention B H S D")
    device = rf.get_device(args.gpu)
    dtype = rf.canonical_dtype(args.dtype)
    sizes = getattr(args, chosen[0])
    op = ops[chosen[0]](*(sizes if isinstance(sizes, list) else [sizes]), dtype=dtype)
    peak, ridge = device.peak(dtype), rf.ridge_point(device, dtype)
    print(f"{device.name}, {dtype}: dense peak {peak / 1e12:g} TFLOP/s, memory {device.mem_bandwidth / 1e9:g} GB/s, "
          f"ridge point {ridge:.0f} FLOP/B (source: {device.source})")
    print(f"{op.name}: {op.flops:.4g} FLOP, {op.bytes:.4g} bytes moved at least, "
          f"intensity {op.intensity:.4g} FLOP/B -> {rf.bound(op, device, dtype)}-bound")
    print(f"attainable {rf.attainable(op.intensity, device, dtype) / 1e12:.4g} TFLOP/s; "
          f"takes at least {rf.min_time(op, device, dtype) * 1e6:.4g} us")
