"""Self-checks of chapter 9 (pipeline parallelism): one call per exercise, a one-line verdict.
p is the number of stages, m the microbatches per step (``labutils.schedules``).

    from labutils.checks import pipeline as check
    check.gpipe_bubble(answer)
"""
from __future__ import annotations

from labutils.checks._answers import close, fraction_problem, whole_number_problem

#: exercise 1 and 2: stages and microbatches
BUBBLE_CASE = dict(p=8, m=32)
#: exercise 3: stages and microbatches of a non-interleaved pipeline
MESSAGES_CASE = dict(p=4, m=16)


def gpipe_bubble(answer) -> None:
    """Exercise 1: the bubble of a GPipe step as a fraction of the total step time."""
    print(_gpipe_bubble_verdict(answer))


def _gpipe_bubble_verdict(answer) -> str:
    from labutils import schedules

    p, m = BUBBLE_CASE["p"], BUBBLE_CASE["m"]
    formula = schedules.bubble_formula("gpipe", p, m)
    problem = fraction_problem(answer)
    if problem:
        return problem
    if close(answer, formula["of_total"]):
        return f"correct: (p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {formula['of_total']:.3f}"
    if close(answer, formula["relative_to_ideal"]):
        return "that is (p-1)/m, the bubble relative to the ideal time; of the total step it is (p-1)/(m+p-1)"
    if close(answer, (p - 1) / p):
        return "that is the naive bubble with a single batch; microbatches fill the pipeline"
    return "not quite: count the idle slots of one stage (fill + drain) against all its slots"


def first_stage_in_flight(answer) -> None:
    """Exercise 2: the most microbatches' activations the first stage holds under 1F1B."""
    print(_first_stage_in_flight_verdict(answer))


def _first_stage_in_flight_verdict(answer) -> str:
    from labutils import schedules

    p, m = BUBBLE_CASE["p"], BUBBLE_CASE["m"]
    expected = schedules.simulate(schedules.build_schedule("1f1b", p, m)).peak_in_flight()[0]
    problem = whole_number_problem(answer, "a whole number of microbatches")
    if problem:
        return problem
    if answer == expected:
        return (f"correct: the first stage runs p - 1 = {p - 1} warm-up forwards and one more "
                f"before its first backward: {expected}")
    if answer == m:
        return "that is GPipe, which finishes all m forwards first; 1F1B starts backwards early"
    if answer == p - 1:
        return "one short: the warm-up is p - 1 forwards, then one more forward before the first backward frees one"
    if answer == 1:
        return "that is the last stage; the first stage must fill the pipeline"
    return "not quite: under 1F1B the first stage holds at most p microbatches, whatever m is"


def messages_per_step(answer) -> None:
    """Exercise 3: point-to-point messages the whole pipeline sends per step."""
    print(_messages_per_step_verdict(answer))


def _messages_per_step_verdict(answer) -> str:
    from labutils import costmodel

    p, m = MESSAGES_CASE["p"], MESSAGES_CASE["m"]
    expected = costmodel.comm_volume("pp", hidden=1, seq_len=1, micro_batch_size=1, num_microbatches=m,
                                     pp_size=p).group_calls_per_step
    problem = whole_number_problem(answer, "a whole number of messages")
    if problem:
        return problem
    if answer == expected:
        return f"correct: 2 m (p-1) = {expected}: each of the p-1 boundaries carries m activations and m gradients"
    if answer == expected // 2:
        return "you counted one direction only: gradients travel back across every boundary too"
    if answer == 2 * m * p:
        return "there are p-1 boundaries between p stages, not p"
    if answer == 2 * m:
        return "that is what one interior stage sends; the question asks for the whole pipeline"
    return "not quite: messages = boundaries x microbatches x 2 directions"
