"""Lab 6 (expert parallelism) graded end to end: the reference makes the all-to-alls of an
expert-parallel MoE layer (one of the counts, then one of the rows out and one back, the backward
pass sending the rows' gradients back with the splits swapped) and sends the bytes of the rows it
routes; through real nbgrader (``grading.autograder.runner.grade_class``, what ``course grade``
runs) the solution scores full marks, the release zero, and a classic mistake (capacity ignored)
loses exactly the parts it names; the other fixtures in tests/fixtures/lab06 (the gradient not
routed back, the combine in the wrong order, ...) are held to the same through the judge alone
(no kernel)."""
from __future__ import annotations

import pytest

from graded_lab import GradedLab, judge_only_fixture_test

LAB = GradedLab("lab06_expert_parallel", rank_timeout_s=30.0)
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("capacity_ignored",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")

#: all_to_all_single calls of each phase: routing is local; the counts, then the rows (Megatron-LM
#: token_dispatcher.py's order); an MoE forward: counts, dispatch, combine; its backward: the two row calls.
EXPECTED_CALLS = {
    "test_route": {"route": {}, "forward": {}, "backward": {}},
    "test_all_to_all": {"counts": {"all_to_all": 1}, "forward": {"all_to_all": 1},
                        "backward": {"all_to_all": 1}},
    "test_moe": {"forward": {"all_to_all": 3}, "backward": {"all_to_all": 2}},
}
HIDDEN_BYTES = 4 * 8  # one float32 row of h = 8


@pytest.mark.parametrize("test", sorted(EXPECTED_CALLS))
def test_the_reference_makes_the_expert_parallel_all_to_alls_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for index, case in enumerate(cases):
        references = [result["reference"][index] for result in results]
        assert all(reference["comm"] == EXPECTED_CALLS[test] for reference in references), case.name
        if test == "test_route" and case.params["factor"] == 1.0:  # capacity factor 1: some queue overflows
            assert any(bool((r["values"]["kept assignments"] == 0).any()) for r in references), case.name
        if test == "test_moe":  # forward: the (E,) int64 counts, then whole rows out and back; backward: the rows
            for reference in references:
                forward = reference["values"]["bytes of each all_to_all_single in forward"].tolist()
                backward = reference["values"]["bytes of each all_to_all_single in backward"].tolist()
                assert forward[0] == 8 * case.params["experts"]
                assert all(b % HIDDEN_BYTES == 0 for b in forward[1:]) and backward == forward[1:], case.name


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


test_through_the_judge_each_other_fixture_loses_exactly_its_parts = judge_only_fixture_test(LAB, NBGRADER_FIXTURES)


@pytest.mark.timeout(900)  # a class through nbgrader (lab 2's took 221 s on a busy 2-core machine)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES + tuple(LAB.attack_names()), max_points=13)
