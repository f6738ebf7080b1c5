"""Lab 7 (PyTorch's APIs) graded end to end: the reference plan makes the collectives of tensor and
sequence parallelism (reduce-scatters and all-gathers along the sequence, no all-reduce) and, with
FSDP2 over the other mesh dimension, FSDP's all-gathers and reduce-scatters on top, all counted at the
judge's process groups although DTensor issues them through torch's functional collectives; through
real nbgrader (``grading.autograder.runner.grade_class``, what ``course grade`` runs) the solution
scores full marks, the release zero, and a classic mistake (a partial sum never reduced) loses
exactly the parts it names; the other fixtures in tests/fixtures/lab07 (FSDP applied before tensor
parallelism, a checkpoint saved from a single rank, ...) are held to the same through the judge
alone (no kernel). The checkpoint test saves on 4 ranks and loads on 2 of another launch, which receive
the files alone (``grading.judge.handoff``)."""
from __future__ import annotations

import pytest
import torch

from graded_lab import GradedLab, judge_only_fixture_test

from grading.judge import handoff
from grading.judge.lab07_pytorch_apis import SHARED_WRITING

LAB = GradedLab("lab07_pytorch_apis", rank_timeout_s=30.0)
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("missing_partial_reduction",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")

#: Collectives of one forward and one backward pass of the 2-block model with the reference plan.
#: Forward: reduce-scatters along the sequence after the embedding and after each block's wo and w2
#: (1 + 2 x 2 = 5); all-gathers of the sequence before each block's attention and feed-forward, before
#: the output layer, and of the logits (2 x 2 + 1 + 1 = 6). Backward: each one's transpose, except the
#: logits' all-gather, whose gradient needs no communication (5 and 5).
TENSOR_PARALLEL_CALLS = {"forward": {"all_gather": 6, "reduce_scatter": 5},
                         "backward": {"all_gather": 5, "reduce_scatter": 5}}
#: FSDP2 alone (tp = 1): one all-gather per unit (2 blocks, then the root) forward; backward, the
#: blocks' parameters gathered again (the root's stay unsharded after forward) and one reduce-scatter
#: of gradients per unit.
FSDP_ONLY_CALLS = {"forward": {"all_gather": 3}, "backward": {"all_gather": 2, "reduce_scatter": 3}}


def test_the_mesh_test_makes_no_collective_in_its_passes_and_the_solution_passes():
    cases, results = LAB.judge_the_solution("test_mesh")
    for index, case in enumerate(cases):
        assert all(r["reference"][index]["comm"] == {"forward": {}, "backward": {}} for r in results), case.name


def test_the_reference_plan_makes_the_sequence_parallel_collectives_and_the_solution_passes():
    cases, results = LAB.judge_the_solution("test_tensor_parallel")
    for index, case in enumerate(cases):
        assert all(r["reference"][index]["comm"] == TENSOR_PARALLEL_CALLS for r in results), case.name


def test_fsdp_over_the_tensor_parallel_model_adds_its_own_collectives_and_the_solution_passes():
    cases, results = LAB.judge_the_solution("test_parallelize")
    for index, case in enumerate(cases):
        for result in results:
            comm = result["reference"][index]["comm"]
            assert comm["optimizer step 1"] == {} and comm["forward of step 3"] == comm["forward"], case.name
            if case.params["tp"] == 1:
                assert {phase: comm[phase] for phase in ("forward", "backward")} == FSDP_ONLY_CALLS, case.name
            else:  # TP's collectives, FSDP's, and the sequence-parallel norms' gradients all-reduced over tp
                assert comm["forward"]["reduce_scatter"] == TENSOR_PARALLEL_CALLS["forward"]["reduce_scatter"]
                assert comm["backward"]["all_reduce"] == 10, case.name  # weight and bias of 5 norms


def test_the_checkpoint_saved_on_four_ranks_is_loaded_by_two_others_and_the_solution_passes():
    cases, results = LAB.judge_the_solution("test_checkpoint")
    assert len(results) == 2  # the second launch's ranks, which loaded it
    for index, case in enumerate(cases):
        assert all(float(r["reference"][index]["values"][SHARED_WRITING]) == 1.0 for r in results), case.name


def test_the_second_launch_receives_every_file_the_first_wrote_the_lowest_rank_first_and_their_sizes():
    def wrote(**files):
        return {"student": [{"files": {name: torch.tensor(list(data), dtype=torch.uint8)
                                       for name, data in files.items()}}]}
    first = [wrote(**{".metadata": b"m0", "__0_0.distcp": b"abc"}), wrote(**{".metadata": b"m1"}), wrote()]
    files = handoff.merged_files(first, "student", 0)
    assert sorted(files) == [".metadata", "__0_0.distcp"] and bytes(files[".metadata"].tolist()) == b"m0"
    assert handoff.bytes_written(first, "student", 0).tolist() == [5.0, 2.0, 0.0]


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


test_through_the_judge_each_other_fixture_loses_exactly_its_parts = judge_only_fixture_test(LAB, NBGRADER_FIXTURES)


@pytest.mark.timeout(900)  # a class through nbgrader (lab 2's took 221 s on a busy 2-core machine)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES + tuple(LAB.attack_names()), max_points=14)
