"""Lab 3 (data parallelism) graded end to end: the reference makes DDP's all-reduces (one per
parameter, one per bucket, and in the ``DataParallel`` wrapper buckets started during backward
in order, the rest by finish_gradient_synchronization(), nothing under no_sync()); through real
nbgrader (``grading.autograder.runner.grade_class``, what ``course grade`` runs) the solution
scores full marks, the release zero, and a fixture (gradients summed but not averaged) loses
exactly the parts it names; the other fixtures (hooks on frozen parameters, ...) in
tests/fixtures/lab03 are held to the same through the judge alone (no kernel), each on the tests
whose graded objects it rewrites (every other test receives the solution's objects, or the
reference's in their place, and the solution passes it), to keep this file short."""
from __future__ import annotations

import ast

import pytest
import torch

from graded_lab import GradedLab
from grading.judge import engine

LAB = GradedLab("lab03_data_parallel", rank_timeout_s=30.0)
#: Seconds a call on ranks may take in the parts other than the training test (about 1 s each on
#: 2 cores): a fixture that deadlocks there waits this long instead of the training test's 30 s.
SHORT_RANK_TIMEOUT_S = 10.0
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("summed_not_averaged",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")


def _wrapper_all_reduces(case, group_rank: int) -> dict:
    """What DataParallel sends in the gradients test, derived by hand from ReplicaMLP's float32 sizes
    (head.weight 96 B, head.bias 12 B, fc1.weight 192 B, fc1.bias 32 B, fc2.weight 96 B, fc2.bias 12 B;
    buckets in reverse parameters() order, closed at >= cap bytes, started in order).

    cap 120, all trainable: [fc2.bias, fc2.weight, fc1.bias] [fc1.weight] [head.bias, head.weight]: the
    head is unused, so 2 buckets start during backward and its bucket in finish. fc1 frozen:
    [fc2.bias, fc2.weight, head.bias] [head.weight]: the head's gradient holds bucket 0 back, so
    everything waits for finish, except on group rank 0 in step 2, the one rank that uses the head.
    cap 1000: one bucket, sent during backward only when every parameter got a gradient."""
    frozen, cap = case.params["frozen_fc1"], case.params["cap"]
    buckets = {(False, 120): 3, (True, 120): 2, (False, 1000): 1, (True, 1000): 1}[(frozen, cap)]
    calls = {}
    for step in (1, 2):
        head_used = frozen and step == 2 and group_rank == 0
        in_backward = buckets if head_used else (2 if (not frozen and cap == 120) else 0)
        calls[f"step {step}: backward"] = {"all_reduce": in_backward} if in_backward else {}
        rest = buckets - in_backward
        calls[f"step {step}: finish_gradient_synchronization"] = {"all_reduce": rest} if rest else {}
    return calls


def _expected_all_reduces(test: str, case, group_rank: int) -> dict:
    if test == "test_average_gradients":
        return {"sync": {"all_reduce": 4}}
    if test == "test_buckets":
        caps = (case.params["cap"], case.params["first"])
        return {"sync": {"all_reduce": {(1, None): 4, (120, None): 2, (1000, None): 1, (120, 40): 2}[caps]}}
    if case.params["kind"] == "replicas":  # ReplicaMLP all used: 3 buckets at cap 120, 1 at 1000
        return {"two backward passes under no_sync()": {},
                "the synchronised backward and finish_gradient_synchronization":
                    {"all_reduce": {120: 3, 1000: 1}[case.params["cap"]]}}
    return _wrapper_all_reduces(case, group_rank)


@pytest.mark.parametrize("test", ["test_average_gradients", "test_buckets", "test_data_parallel"])
def test_the_reference_sends_what_ddp_does_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for rank, result in enumerate(results):
        for case, reference in zip(cases, result["reference"]):
            for phase, calls in _expected_all_reduces(test, case, rank % case.group_size).items():
                assert reference["comm"][phase] == calls, (case.name, rank, phase)


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


def _tests_it_rewrites(fixture) -> dict:
    """{test: spec} of the hidden tests that grade a function or class the fixture defines, or one
    whose definition it replaces a part of (``def: DataParallel.no_sync`` rewrites DataParallel)."""
    defined = {edit.definition.split(".")[0] for edit in fixture.edits if edit.definition}
    defined |= {node.name for edit in fixture.edits if not edit.definition for node in ast.parse(edit.text).body
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    return {test: spec for test, spec in LAB.tests().items() if defined & set(spec.objects)}


@pytest.mark.parametrize("name", [n for n in LAB.fixture_names() if n not in NBGRADER_FIXTURES])
def test_through_the_judge_each_other_fixture_loses_exactly_its_parts(name):
    fixture = LAB.fixture(name)
    tests = _tests_it_rewrites(fixture)
    timeout = None if "test_train_data_parallel" in tests else SHORT_RANK_TIMEOUT_S
    assert LAB.losses_through_the_judge(name, tests=tests, rank_timeout_s=timeout) == fixture.loses


@pytest.mark.timeout(900)  # a class through nbgrader (lab 2's took 221 s on a busy 2-core machine)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES, max_points=16)


@pytest.mark.parametrize("test", ["test_average_gradients", "test_data_parallel", "test_train_data_parallel"])
def test_each_rank_receives_only_its_own_rows_and_where_ranks_start_apart_only_its_own_parameters(test):
    """What ``rank_data`` sends each rank: its contiguous 1/d of every batch (in the training test
    inside the whole batch's shape, the other rows NaN), the parameters and buffer of group rank 0,
    or where ranks start apart (group rank > 0) others of the same shapes, never group rank 0's."""
    from grading.judge.lab03_data_parallel import BATCH

    spec = LAB.tests()[test]
    cases = spec.make_cases(torch.Generator().manual_seed(0))
    for rank, (seen, data) in enumerate(engine.split_by_rank(spec, cases)):
        for shown, own, case in zip(seen, data, cases):
            group, group_rank = case.groups[rank // case.group_size], rank % case.group_size
            rows = torch.arange(BATCH).tensor_split(case.group_size)[group_rank]
            others = [row for row in range(BATCH) if row not in rows.tolist()]
            assert not shown.groups and set(own) == set(group) - {"offsets"}, case.name
            for name in ("x", "y"):
                received = own[name]
                if test == "test_train_data_parallel":
                    assert received.shape == group[name].shape and received[:, others].isnan().all()
                    received = received[:, rows]
                assert torch.equal(received, group[name][:, rows]), (case.name, rank, name)
            apart = case.params.get("apart", False) and group_rank > 0
            for name in set(own) - {"x", "y"}:
                assert own[name].shape == group[name].shape
                assert torch.equal(own[name], group[name]) != apart, (case.name, rank, name)
