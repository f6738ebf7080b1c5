"""Self-checks for chapter 2 (GPU architecture): one call per exercise prints one line.

    from labutils.checks import gpu as check
    check.thread_index(answer_index)

Each check prints "correct: ..." with the working, a named mistake, or "not answered yet".
"""
from __future__ import annotations

import math

from labutils.checks.answers import first_match, number_problem


def thread_index(answer) -> None:
    """Exercise: the global index of thread 17 of block 3, with 256 threads per block."""
    block, block_dim, thread = 3, 256, 17
    expected = block * block_dim + thread
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: blockIdx.x * blockDim.x + threadIdx.x = {block} x {block_dim} + {thread} = {expected}"),
        (block * block_dim, f"that is the block's first thread; add threadIdx.x = {thread}"),
        ((block - 1) * block_dim + thread, f"blocks count from 0: block {block} starts at {block} x {block_dim}"),
        (block + block_dim * thread, "blockIdx and threadIdx swapped: index = blockIdx.x * blockDim.x + threadIdx.x"),
        ((block + 1) * block_dim + thread, f"blocks count from 0: block {block} is the fourth block, not the fifth"),
    ], f"not {answer}: index = blockIdx.x * blockDim.x + threadIdx.x", rel_tol=0))


def simt_efficiency(answer) -> None:
    """Exercise: a warp of 32 where 8 lanes run a 20-instruction `if` and 24 a 4-instruction `else`."""
    lanes, then_lanes, then_cost, else_cost = 32, 8, 20, 4
    useful = then_lanes * then_cost + (lanes - then_lanes) * else_cost
    expected = useful / (lanes * (then_cost + else_cost))
    working = f"({then_lanes} x {then_cost} + {lanes - then_lanes} x {else_cost}) / ({lanes} x ({then_cost} + {else_cost}))"
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: {working} = {expected:.3f}"),
        (useful / (lanes * then_cost),
         f"the warp issues BOTH paths, one after the other: {then_cost} + {else_cost} instructions, not {then_cost}"),
        (1.0, "the lanes disagree, so the warp is divergent: the masked lanes idle during the other path"),
        (100 * expected, "give a fraction (0.5 for 50%), not a percentage"),
    ], f"not {answer}: efficiency = useful lane-instructions / ({lanes} x instructions issued)", rel_tol=0.01))


def gpus_for_weights(answer) -> None:
    """Exercise: H200 SXM GPUs needed to hold a 405e9-parameter model's BF16 weights x 1.2."""
    from labutils.costmodel.roofline import DEVICES

    # The datasheet's "141 GB" (DEVICES holds it as 141 GiB, what the driver reports), read in
    # GB = 1e9 bytes as a student reading the datasheet does; either way 7 GPUs are needed.
    params, headroom, memory = 405e9, 1.2, DEVICES["h200"].memory_bytes / 2**30 * 1e9
    needed = 2 * params * headroom
    expected = math.ceil(needed / memory)
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: {needed / 1e9:.0f} GB / {memory / 1e9:.0f} GB per GPU, rounded up = {expected}"),
        (math.ceil(4 * params * headroom / memory), "BF16 is 2 bytes per parameter, not 4"),
        (expected - 1, f"{expected - 1} H200s hold {(expected - 1) * memory / 1e9:.0f} GB, less than the "
                       f"{needed / 1e9:.0f} GB needed: either the 20% headroom (KV cache, activations, buffers) is "
                       f"missing, or you rounded down; multiply by {headroom} and round UP"),
    ], f"not {answer}: ceil(2 bytes x {params:.3g} parameters x {headroom} / H200 memory in bytes)", rel_tol=0))


def systolic_cycles(answer) -> None:
    """Exercise: cycles of an output-stationary 128 x 128 array for a K = 128-deep product."""
    rows = cols = depth = 128
    expected = depth + rows + cols - 2
    print(number_problem(answer) or first_match(answer, [
        (expected, f"correct: K + R + C - 2 = {depth} + {rows} + {cols} - 2 = {expected}"),
        (depth, "that is only the steady state; the wavefront needs R + C - 2 more cycles to fill and drain"),
        (depth + rows + cols, "almost: the last cell (127, 127) does its last product at cycle 127 + 127 + 127, "
                              "and cycles count from 0"),
        (expected - 1, "one short: cycles count from 0, so the number of cycles is the last cycle + 1"),
        (rows * cols * depth, "that counts multiply-adds; the cells work in parallel, R x C of them per cycle"),
    ], f"not {answer}: cell (i, j) does product k at cycle i + j + k", rel_tol=0))
