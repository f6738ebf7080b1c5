"""Lab 5 (pipeline parallelism) graded end to end: the reference holds m microbatches in
flight with GPipe and p - stage with 1F1B (as it counts them and as the judge measures them
from its messages), its replayed bubble is (p-1)/(m+p-1) for both, and it sends m activations
and m gradients per link;
through real nbgrader (``grading.autograder.runner.grade_class``, what ``course grade`` runs) the
solution scores full marks, the release zero, and a schedule that deadlocks loses exactly the
parts it names, timed out; the other fixtures of the issue's mistakes (1F1B that keeps every
microbatch in flight, openly or while reporting 1F1B's peak, losses not scaled by m) are held to
the same through the judge alone (no kernel)."""
from __future__ import annotations

import pytest

from graded_lab import GradedLab, judge_only_fixture_test, part
from grading.judge import lab05_pipeline_parallel as pp

#: The deadlock fixture waits out the rank timeout (seconds), twice.
LAB = GradedLab("lab05_pipeline_parallel", rank_timeout_s=8.0)
#: The fixture graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("blocking_sends_deadlock_1f1b",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")


def _peak(test: str, case, stage: int) -> int:
    """GPipe (arXiv:1811.06965) holds all m microbatches; 1F1B at most p on stage 0 (p - stage on stage s)."""
    m = case.params["m"]
    return m if test == "test_gpipe" else min(case.group_size - stage, m)


@pytest.mark.parametrize("test", ["test_gpipe", "test_1f1b"])
def test_the_reference_holds_what_the_schedule_says_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for rank, result in enumerate(results):
        for case, reference in zip(cases, result["reference"]):
            stage = rank % case.group_size
            for label in (pp.PEAK, pp.MEASURED_PEAK):
                assert reference["values"][label].item() == _peak(test, case, stage), (label, case.name)
            p, m = case.group_size, case.params["m"]
            assert reference["values"][pp.BUBBLE].item() == pytest.approx((p - 1) / (m + p - 1)), case.name
            messages = case.params["m"] * ((stage > 0) + (stage < case.group_size - 1))
            assert reference["comm"]["step"] == ({"send": messages, "recv": messages} if messages else {}), case.name
    assert any(case.params["m"] < case.group_size for case in cases)


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


test_through_the_judge_each_other_fixture_loses_exactly_its_parts = judge_only_fixture_test(LAB, NBGRADER_FIXTURES)


@pytest.mark.timeout(900)  # a class through nbgrader (lab 2's took 221 s on a busy 2-core machine)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    report = LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES + tuple(LAB.attack_names()), max_points=10)
    one_f_one_b = part(report, "blocking_sends_deadlock_1f1b", "test_1f1b")
    assert "timed out" in one_f_one_b.lines[0] and "send" in one_f_one_b.lines[0]
