"""Self-checks of chapter 9 (pipeline parallelism): one call per exercise, a one-line verdict.
p is the number of stages, m the microbatches per step (``labutils.costmodel.schedules``).

    from labutils.checks import pipeline as check
    check.gpipe_bubble(answer)
"""
from __future__ import annotations

from labutils.checks.answers import first_match, fraction_problem, whole_number_problem

#: exercise 1 and 2: stages and microbatches
BUBBLE_CASE = dict(p=8, m=32)
#: exercise 3: stages and microbatches of a non-interleaved pipeline
MESSAGES_CASE = dict(p=4, m=16)


def gpipe_bubble(answer) -> None:
    """Exercise 1: the bubble of a GPipe step as a fraction of the total step time."""
    print(_gpipe_bubble_verdict(answer))


def _gpipe_bubble_verdict(answer) -> str:
    from labutils.costmodel import schedules

    p, m = BUBBLE_CASE["p"], BUBBLE_CASE["m"]
    formula = schedules.bubble_formula("gpipe", p, m)
    return fraction_problem(answer) or first_match(
        answer,
        [(formula["of_total"], f"correct: (p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {formula['of_total']:.3f}"),
         (formula["relative_to_ideal"], "that is (p-1)/m, the bubble relative to the ideal time; "
                                        "of the total step it is (p-1)/(m+p-1)"),
         ((p - 1) / p, "that is the naive bubble with a single batch; microbatches fill the pipeline")],
        "not quite: count the idle slots of one stage (fill + drain) against all its slots")


def first_stage_in_flight(answer) -> None:
    """Exercise 2: the most microbatches' activations the first stage holds under 1F1B."""
    print(_first_stage_in_flight_verdict(answer))


def _first_stage_in_flight_verdict(answer) -> str:
    from labutils.costmodel import schedules

    p, m = BUBBLE_CASE["p"], BUBBLE_CASE["m"]
    expected = schedules.simulate(schedules.build_schedule("1f1b", p, m)).peak_in_flight()[0]
    return whole_number_problem(answer, "a whole number of microbatches") or first_match(
        answer,
        [(expected, f"correct: the first stage runs p - 1 = {p - 1} warm-up forwards and one more "
                    f"before its first backward: {expected}"),
         (m, "that is GPipe, which finishes all m forwards first; 1F1B starts backwards early"),
         (p - 1, "one short: the warm-up is p - 1 forwards, then one more forward before the first backward frees one"),
         (1, "that is the last stage; the first stage must fill the pipeline")],
        "not quite: under 1F1B the first stage holds at most p microbatches, whatever m is", rel_tol=0)


def messages_per_step(answer) -> None:
    """Exercise 3: point-to-point messages the whole pipeline sends per step."""
    print(_messages_per_step_verdict(answer))


def _messages_per_step_verdict(answer) -> str:
    from labutils import costmodel

    p, m = MESSAGES_CASE["p"], MESSAGES_CASE["m"]
    expected = costmodel.comm_volume("pp", hidden=1, seq_len=1, micro_batch_size=1, num_microbatches=m,
                                     pp_size=p).group_calls_per_step
    return whole_number_problem(answer, "a whole number of messages") or first_match(
        answer,
        [(expected, f"correct: 2 m (p-1) = {expected}: each of the p-1 boundaries carries m activations "
                    "and m gradients"),
         (expected // 2, "you counted one direction only: gradients travel back across every boundary too"),
         (2 * m * p, "there are p-1 boundaries between p stages, not p"),
         (2 * m, "that is what one interior stage sends; the question asks for the whole pipeline")],
        "not quite: messages = boundaries x microbatches x 2 directions", rel_tol=0)
