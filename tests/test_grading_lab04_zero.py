"""Lab 4 (ZeRO) graded end to end: the reference makes ZeRO's collectives (an all-reduce or a
reduce-scatter of the gradients, an all-gather of the parameters) on shards the group size
does not divide; through real nbgrader (``grading.autograder.runner.grade_class``, what ``labutils
grade`` runs) the solution scores full marks, the release zero, and the fixtures of the
issue's mistakes (parameters not all-gathered, state for all parameters on every rank, uneven
shards wrong) lose exactly the parts they name; the other fixtures in tests/fixtures/lab04 are
held to the same through the judge alone (no kernel), to keep this file near 90 s on 2 cores."""
from __future__ import annotations

import pytest

from graded_lab import GradedLab

LAB = GradedLab("lab04_zero", rank_timeout_s=30.0, given_cells=("setup", "check_helpers", "given_slots"))
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("stale_ranks_without_all_gather", "full_state_on_every_rank", "uneven_shards_rounded_up")
pytestmark = pytest.mark.usefixtures("no_leftover_processes")

#: ZeRO (arXiv:1910.02054 section 7): stages 1 and 2 move 2 Psi per step, as an all-reduce (stage 1) or a
#: reduce-scatter (stage 2) of the gradients, then an all-gather of the parameters.
STEP_COLLECTIVES = {"test_zero_stage1": {"all_reduce": 1, "all_gather": 1},
                    "test_zero_stage2": {"reduce_scatter": 1, "all_gather": 1}}


@pytest.mark.parametrize("test", list(STEP_COLLECTIVES))
def test_the_reference_communicates_as_zero_does_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            assert reference["comm"]["step"] == STEP_COLLECTIVES[test], case.name
    assert any(sum(v.numel() for k, v in case.groups[0].items() if k.startswith("p")) % case.group_size for case in cases)


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


@pytest.mark.parametrize("name", [n for n in LAB.fixture_names() if n not in NBGRADER_FIXTURES])
def test_through_the_judge_each_other_fixture_loses_exactly_its_parts(name):
    assert LAB.losses_through_the_judge(name) == LAB.fixture(name).loses


def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES, max_points=12)


#: The student's stage 1 keeps a value of its own (the shard's width), which their stage 2 uses, and
#: stage 2 calls its base class by name instead of super().
EXPLICIT_BASE_CALL = '''
_solution_stage1 = ZeroStage1Adam


class ZeroStage1Adam(_solution_stage1):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shard_width = self.stop - self.start


class ZeroStage2Adam(ZeroStage1Adam):
    def __init__(self, *args, **kwargs):
        ZeroStage1Adam.__init__(self, *args, **kwargs)

    def mean_gradient_shard(self):
        slots = shard_slots(self.flat_gradients(), self.world_size)
        shard = slots.new_empty(slots.shape[1])
        dist.reduce_scatter_tensor(shard, slots.reshape(-1), group=self.group)
        return shard[:self.shard_width] / self.world_size
'''


def test_a_stage_2_that_calls_its_base_class_by_name_loses_nothing():
    from grading.judge import client, engine

    namespace = LAB.solution_namespace()
    exec(compile(EXPLICIT_BASE_CALL, "<cell zero_stage2>", "exec"), namespace)
    objects = {"ZeroStage2Adam": namespace["ZeroStage2Adam"]}
    verdict = engine.run_test("lab04_zero", "test_zero_stage2", list(objects), client.dumps(objects), {},
                              rank_timeout_s=30.0, backend="gloo", seed=5)
    assert verdict.passed and not verdict.judge_error, verdict.lines
