"""Self-checks of chapter 8 (tensor parallelism): one call per exercise, a one-line verdict.

    from labutils.checks import tensor_parallel as check
    check.bytes_per_layer(answer)
"""
from __future__ import annotations

from labutils.checks.answers import bytes_problem, first_match, number_problem

#: exercise 1: a GPT-3 layer (arXiv:2005.14165) under TP = 8, bf16 activations (2 bytes)
LAYER = dict(hidden=12288, seq_len=2048, micro_batch_size=1, tp_size=8, bytes_per_value=2)
#: exercise 2: a row-parallel layer on t ranks whose bias entries are all `bias`
BIAS_CASE = dict(t=4, bias=0.5)
#: exercise 3: the GPT-3 layer's activations (arXiv:2205.05198) under TP = 8
ACTIVATION_CASE = dict(seq_len=2048, micro_batch_size=1, hidden=12288, heads=96, tp=8)


def bytes_per_layer(answer) -> None:
    """Exercise 1: bytes one GPU sends for one layer's TP all-reduces, forward + backward."""
    print(_bytes_per_layer_verdict(answer))


def _bytes_per_layer_verdict(answer) -> str:
    from labutils import costmodel

    expected = costmodel.comm_volume("tp", layers=1, **LAYER).bytes_per_step
    t = LAYER["tp_size"]
    buffer = LAYER["hidden"] * LAYER["seq_len"] * LAYER["micro_batch_size"] * LAYER["bytes_per_value"]
    ring_factor_missing = (f"close: the ring sends 2(t-1)/t of the buffer, not 2 (or 1); "
                           f"at t = {t} that is {2 * (t - 1) / t:g}")
    return bytes_problem(answer, expected) or first_match(
        answer,
        [(expected, f"correct: 4 all-reduces x 2(t-1)/t x b s h x 2 bytes = {expected:,.0f} bytes"),
         (expected / 2, "half of it: either you counted only the 2 forward all-reduces (f's backward adds 2 more), "
                        "or you used the all-gather factor (t-1)/t where an all-reduce sends 2(t-1)/t of its buffer"),
         (4 * buffer * 2, ring_factor_missing),
         (4 * buffer, ring_factor_missing),
         (expected * 2, "check the bytes per value: bf16 is 2 bytes, not 4")],
        f"not quite: count the all-reduces per layer (forward and backward), their buffer "
        f"(b x s x h values of 2 bytes = {buffer:,} bytes) and the ring factor 2(t-1)/t")


def bias_error(answer) -> None:
    """Exercise 2: how far each output entry is off when every rank adds the bias before the all-reduce."""
    print(_bias_error_verdict(answer))


def _bias_error_verdict(answer) -> str:
    t, bias = BIAS_CASE["t"], BIAS_CASE["bias"]
    return number_problem(answer, show_type=True) or first_match(
        answer,
        [((t - 1) * bias, f"correct: t copies of b are summed, one was wanted: (t-1) b = {(t - 1) * bias:g}"),
         (t * bias, "that is the total bias in the wrong output (t b); the right output already has one b: "
                    "the error is (t-1) b"),
         (0, "the all-reduce sums what every rank holds, the bias included: rerun 8.1 and read the last row"),
         (bias, "that is one copy of b, which the right output also has; count the extra copies: "
                "t ranks added b before the sum")],
        "not quite: how many ranks add b before the sum, and how many copies of b should the output have?")


def activation_memory(answer) -> None:
    """Exercise 3: activation bytes one GPT-3 layer keeps per GPU under TP = 8, no sequence parallelism."""
    print(_activation_memory_verdict(answer))


def _activation_memory_verdict(answer) -> str:
    from labutils.costmodel import strategy

    case = dict(ACTIVATION_CASE)
    t = case.pop("tp")
    expected = strategy.activation_bytes_per_layer(**case, tp=t)
    unsplit = strategy.activation_bytes_per_layer(**case, tp=1)
    return bytes_problem(answer, expected) or first_match(
        answer,
        [(expected, f"correct: sbh(10 + 24/t + 5as/(ht)) = {expected / 1e9:.2f} GB"),
         (unsplit, "that is the layer without parallelism; with TP the 24 sbh and the attention term are divided by t"),
         (unsplit / t, "that is TP with sequence parallelism; without it the 10 sbh term is not divided by t")],
        "not quite: sbh(10 + 24/t + 5as/(ht)) bytes, with s b h = 2048 x 1 x 12288")
