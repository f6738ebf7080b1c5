"""Self-checks for chapter 2 (GPU architecture): one call per exercise prints one line.

    from labutils.checks import gpu as check
    check.thread_index(answer_index)

Each check prints "correct: ..." with the working, a named mistake, or "not answered yet".
"""
from __future__ import annotations

import math

from labutils.checks._verdict import close, number_or_reason, say


def thread_index(answer) -> None:
    """Exercise: the global index of thread 17 of block 3, with 256 threads per block."""
    value, reason = number_or_reason(answer)
    block, block_dim, thread = 3, 256, 17
    expected = block * block_dim + thread
    if reason:
        return say(reason)
    if value == expected:
        return say(f"correct: blockIdx.x * blockDim.x + threadIdx.x = {block} x {block_dim} + {thread} = {expected}")
    mistakes = {
        block * block_dim: f"that is the block's first thread; add threadIdx.x = {thread}",
        (block - 1) * block_dim + thread: f"blocks count from 0: block {block} starts at {block} x {block_dim}",
        block + block_dim * thread: "blockIdx and threadIdx swapped: index = blockIdx.x * blockDim.x + threadIdx.x",
        (block + 1) * block_dim + thread: f"blocks count from 0: block {block} is the fourth block, not the fifth",
    }
    say(mistakes.get(value, f"not {answer}: index = blockIdx.x * blockDim.x + threadIdx.x"))


def simt_efficiency(answer) -> None:
    """Exercise: a warp of 32 where 8 lanes run a 20-instruction `if` and 24 a 4-instruction `else`."""
    value, reason = number_or_reason(answer)
    lanes, then_lanes, then_cost, else_cost = 32, 8, 20, 4
    useful = then_lanes * then_cost + (lanes - then_lanes) * else_cost
    expected = useful / (lanes * (then_cost + else_cost))
    if reason:
        return say(reason)
    if close(value, expected, 0.01):
        return say(f"correct: ({then_lanes} x {then_cost} + {lanes - then_lanes} x {else_cost}) / "
                   f"({lanes} x ({then_cost} + {else_cost})) = {expected:.3f}")
    if close(value, useful / (lanes * then_cost), 0.01):
        return say(f"the warp issues BOTH paths, one after the other: {then_cost} + {else_cost} instructions, "
                   f"not {then_cost}")
    if close(value, 1.0, 0.01):
        return say("the lanes disagree, so the warp is divergent: the masked lanes idle during the other path")
    if close(value, 100 * expected, 0.01):
        return say("give a fraction (0.5 for 50%), not a percentage")
    say(f"not {answer}: efficiency = useful lane-instructions / ({lanes} x instructions issued)")


def gpus_for_weights(answer) -> None:
    """Exercise: H200 SXM GPUs needed to hold a 405e9-parameter model's BF16 weights x 1.2."""
    from labutils.roofline import DEVICES

    value, reason = number_or_reason(answer)
    params, headroom, memory = 405e9, 1.2, DEVICES["h200"].memory_bytes
    needed = 2 * params * headroom
    expected = math.ceil(needed / memory)
    if reason:
        return say(reason)
    if value == expected:
        return say(f"correct: {needed / 1e9:.0f} GB / {memory / 1e9:.0f} GB per GPU, rounded up = {expected}")
    if value == math.ceil(4 * params * headroom / memory):
        return say("BF16 is 2 bytes per parameter, not 4")
    if value == math.ceil(2 * params / memory):
        return say(f"{answer} H200s hold the weights without the 20% headroom (KV cache, activations, "
                   f"buffers): multiply by {headroom}")
    if value == expected - 1:
        return say(f"{answer} H200s hold {value * memory / 1e9:.0f} GB, less than the {needed / 1e9:.0f} GB "
                   "needed: round UP")
    say(f"not {answer}: ceil(2 bytes x {params:.3g} parameters x {headroom} / H200 memory in bytes)")


def systolic_cycles(answer) -> None:
    """Exercise: cycles of an output-stationary 128 x 128 array for a K = 128-deep product."""
    value, reason = number_or_reason(answer)
    rows = cols = depth = 128
    expected = depth + rows + cols - 2
    if reason:
        return say(reason)
    if value == expected:
        return say(f"correct: K + R + C - 2 = {depth} + {rows} + {cols} - 2 = {expected}")
    mistakes = {
        depth: "that is only the steady state; the wavefront needs R + C - 2 more cycles to fill and drain",
        depth + rows + cols: "almost: the last cell (127, 127) does its last product at cycle 127 + 127 + 127, "
                             "and cycles count from 0",
        depth + rows + cols - 3: "one short: cycles count from 0, so the number of cycles is the last cycle + 1",
        rows * cols * depth: "that counts multiply-adds; the cells work in parallel, R x C of them per cycle",
    }
    say(mistakes.get(value, f"not {answer}: cell (i, j) does product k at cycle i + j + k"))
