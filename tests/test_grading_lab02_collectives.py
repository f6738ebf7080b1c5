"""Lab 2 (collectives) graded end to end: the reference sends what a ring must; through real
nbgrader (``grading.autograder.runner.grade_class``, what ``course grade`` runs) the solution scores
full marks, the release zero, and a deadlocking send/recv order loses exactly the parts it names,
timed out; the other fixtures in tests/fixtures/lab02 (chunk bookkeeping, busbw with the wrong
factor, ...) are held to the same through the judge alone (no kernel): a notebook through nbgrader
costs its kernel, its sandbox's rank template and its ranks."""
from __future__ import annotations

import pytest

from graded_lab import GradedLab, judge_only_fixture_test, part

#: The deadlock fixture waits out the rank timeout (seconds), twice.
LAB = GradedLab("lab02_collectives", rank_timeout_s=8.0)
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("deadlocking_send_order",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")


def _ring_messages(test: str, ring: int) -> dict:
    """Sends and receives per rank of one call (a ring all-reduce is 2(n-1) steps: n-1 of reduce-scatter, n-1 of all-gather)."""
    steps = {"test_ring_reduce_scatter": ring - 1, "test_ring_all_gather": ring - 1,
             "test_ring_all_reduce": 2 * (ring - 1)}
    return {"send": steps[test], "recv": steps[test]}


@pytest.mark.parametrize("test", ["test_ring_reduce_scatter", "test_ring_all_gather", "test_ring_all_reduce"])
def test_the_reference_sends_what_a_ring_must_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            assert reference["comm"]["forward"] == _ring_messages(test, case.group_size), case.name
    sizes = [(case.groups[0]["x"][0].numel(), case.group_size) for case in cases]
    assert any(numel % ring for numel, ring in sizes) and any(numel < ring for numel, ring in sizes)


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


test_through_the_judge_each_other_fixture_loses_exactly_its_parts = judge_only_fixture_test(LAB, NBGRADER_FIXTURES)


@pytest.mark.timeout(900)  # a class through nbgrader (lab 2's took 221 s on a busy 2-core machine)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    report = LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES, max_points=16)
    basics = part(report, "deadlocking_send_order", "test_ring_basics")
    assert "timed out" in basics.lines[0] and "send_and_receive" in basics.lines[0]
