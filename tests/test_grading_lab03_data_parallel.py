"""Lab 3 (data parallelism) graded end to end: the reference makes DDP's all-reduces (one per
parameter, one per bucket, buckets sent during backward and the unused head's by finish());
through real nbgrader (``grading.autograder.runner.grade_class``, what ``course grade`` runs) the
solution scores full marks, the release zero, and the fixtures of the issue's mistakes
(gradients summed but not averaged, a bucket never flushed, unused parameters) lose exactly
the parts they name; the other fixtures in tests/fixtures/lab03 are held to the same through
the judge alone (no kernel), to keep this file near 90 s on 2 cores."""
from __future__ import annotations

import pytest

from graded_lab import GradedLab

LAB = GradedLab("lab03_data_parallel", rank_timeout_s=30.0)
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("summed_not_averaged", "last_bucket_never_flushed", "unused_parameter_bucket_never_sent")
pytestmark = pytest.mark.usefixtures("no_leftover_processes")


#: What lab 3 asks for (PyTorch DDP's design, arXiv:2006.15704): one all-reduce per parameter (4 in TinyMLP), per bucket, and in
#: the overlapped version 2 buckets sent during backward and 1 (the unused head's) by finish().
def _expected_all_reduces(test: str, case) -> dict:
    if test == "test_average_gradients":
        return {"sync": {"all_reduce": 4}}
    if test == "test_buckets":
        return {"sync": {"all_reduce": {1: 4, 120: 2, 1000: 1}[case.params["cap"]]}}
    in_backward = {(False, 120): 2, (False, 1000): 1, (True, 120): 2, (True, 1000): 0}
    total = {(False, 120): 2, (False, 1000): 1, (True, 120): 3, (True, 1000): 1}
    key = (case.params["unused_head"], case.params["cap"])
    return {"backward": {"all_reduce": in_backward[key]} if in_backward[key] else {},
            "finish": {"all_reduce": total[key] - in_backward[key]} if total[key] - in_backward[key] else {}}


@pytest.mark.parametrize("test", ["test_average_gradients", "test_buckets", "test_overlapping_sync"])
def test_the_reference_sends_what_ddp_does_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            for phase, calls in _expected_all_reduces(test, case).items():
                assert reference["comm"][phase] == calls, (case.name, phase)


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


@pytest.mark.parametrize("name", [n for n in LAB.fixture_names() if n not in NBGRADER_FIXTURES])
def test_through_the_judge_each_other_fixture_loses_exactly_its_parts(name):
    assert LAB.losses_through_the_judge(name) == LAB.fixture(name).loses


def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES, max_points=15)
