"""Lab 4 (ZeRO) graded end to end: the reference makes ZeRO's collectives (an all-reduce or a
reduce-scatter of the gradients and an all-gather of the parameters per parameter group; per
ZeRO-3 unit an all-gather in forward, an all-gather and a reduce-scatter in backward) on shards
the group size does not divide; through real nbgrader (``grading.autograder.runner.grade_class``,
what ``course grade`` runs) the solution scores full marks, the release zero, and three fixtures
(parameters not all-gathered, state for all parameters on every rank, uneven shards wrong) lose
exactly the parts they name; the other fixtures in tests/fixtures/lab04 (weight decay coupled,
a group's lr ignored, state under other names or behind views, ZeRO-3 keeping or saving its
gathered parameters) are held to the same through the judge alone (no kernel), on the hidden tests
whose objects their edits can change, to keep this file short."""
from __future__ import annotations

import ast

import pytest
import torch

from graded_lab import GradedLab
from grading.autograder.fixtures import apply_fixture, student_solution

LAB = GradedLab("lab04_zero", rank_timeout_s=30.0, given_cells=("setup", "check_helpers", "given_slots"))
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("stale_ranks_without_all_gather", "full_state_on_every_rank", "uneven_shards_rounded_up")
pytestmark = pytest.mark.usefixtures("no_leftover_processes")

#: ZeRO (arXiv:1910.02054 section 7): stages 1 and 2 move 2 N per step, as an all-reduce (stage 1) or a
#: reduce-scatter (stage 2) of the gradients, then an all-gather of the parameters, per parameter group.
STEP_COLLECTIVES = {"test_zero_stage1": {"all_reduce": 1, "all_gather": 1},
                    "test_zero_stage2": {"reduce_scatter": 1, "all_gather": 1}}
#: Stage 3 (section 5.3): per unit, an all-gather in forward, an all-gather and a reduce-scatter in backward.
UNIT_COLLECTIVES = {"forward": {"all_gather": 1}, "backward": {"all_gather": 1, "reduce_scatter": 1}}


@pytest.mark.parametrize("test", list(STEP_COLLECTIVES))
def test_the_reference_communicates_as_zero_does_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            groups = len(set(case.params["groups_of"]))
            assert reference["comm"]["step"] == {op: groups * n for op, n in STEP_COLLECTIVES[test].items()}, case.name
    sizes = [sum(v.numel() for k, v in case.groups[0].items() if k.startswith("p")) for case in cases]
    assert any(size % case.group_size for size, case in zip(sizes, cases))  # uneven shards
    assert any(len(set(case.params["groups_of"])) == 2 for case in cases)


def test_the_reference_zero3_gathers_per_unit_and_the_solution_passes():
    cases, results = LAB.judge_the_solution("test_zero_stage3")
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            for phase, calls in UNIT_COLLECTIVES.items():
                assert reference["comm"][phase] == {op: 2 * n for op, n in calls.items()}, case.name


def test_every_fixture_applies_to_todays_solution_and_names_real_test_cells():
    LAB.check_fixtures_apply_and_name_real_test_cells()


def _tests_the_fixture_can_change(name: str) -> list:
    """The hidden tests whose graded objects are, or derive from, a class or function defined in a
    cell the fixture edits. The others grade the solution's own objects (the parts they build on are
    replaced by the grader's), which pass (``judge_the_solution`` above and nbgrader's full marks)."""
    fixture = LAB.fixture(name)
    edited_cells = {cell for _, cell, _ in fixture.edits}
    notebook = apply_fixture(student_solution(*LAB.notebooks()), fixture)
    defined = set()
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in edited_cells:
            defined |= {node.name for node in ast.parse(cell.source).body
                        if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    namespace = LAB.solution_namespace(name)

    def changed(obj) -> bool:
        return any(klass.__name__ in defined for klass in (obj.__mro__ if isinstance(obj, type) else (obj,)))

    return [test for test, spec in LAB.tests().items() if any(changed(namespace[n]) for n in spec.objects)]


@pytest.mark.parametrize("name", [n for n in LAB.fixture_names() if n not in NBGRADER_FIXTURES])
def test_through_the_judge_each_other_fixture_loses_exactly_its_parts(name):
    tests = _tests_the_fixture_can_change(name)
    assert LAB.fixture(name).loses <= set(tests), tests
    assert LAB.losses_through_the_judge(name, tests=tests) == LAB.fixture(name).loses


def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES, max_points=17)


#: The student's stage 1 keeps a value of its own (the shard's width), which their stage 2 uses, and
#: stage 2 calls its base class by name instead of super().
EXPLICIT_BASE_CALL = '''
_solution_stage1 = ZeroStage1AdamW


class ZeroStage1AdamW(_solution_stage1):
    def new_shard_state(self, index):
        numel, start, stop = self.shard_range(index)
        self.shard_widths = getattr(self, "shard_widths", []) + [stop - start]
        return super().new_shard_state(index)


class ZeroStage2AdamW(ZeroStage1AdamW):
    def __init__(self, *args, **kwargs):
        ZeroStage1AdamW.__init__(self, *args, **kwargs)

    def mean_gradient_shard(self, index):
        slots = shard_slots(self.flat_gradients(index), self.world_size)
        shard = slots.new_empty(slots.shape[1])
        dist.reduce_scatter_tensor(shard, slots.reshape(-1), group=self.group)
        return shard[:self.shard_widths[index]] / self.world_size
'''


def test_a_stage_2_that_calls_its_base_class_by_name_loses_nothing():
    from grading.judge import client, engine

    namespace = LAB.solution_namespace()
    exec(compile(EXPLICIT_BASE_CALL, "<cell zero_stage2>", "exec"), namespace)
    objects = {"ZeroStage2AdamW": namespace["ZeroStage2AdamW"]}
    verdict = engine.run_test("lab04_zero", "test_zero_stage2", list(objects), client.dumps(objects), {},
                              rank_timeout_s=30.0, backend="gloo", seed=5)
    assert verdict.passed and not verdict.judge_error, verdict.lines


class _HidesState:
    """An object that keeps 4-byte-per-value tensors in every place the memory walk must reach."""

    class_cache = {}

    def __init__(self, param):
        self.params = [param]
        self.named = {"m": torch.zeros(10)}                    # 40 bytes
        self.nested = {"group": {"v": [torch.zeros(20)]}}      # 80 bytes, a dict of dicts of a list
        hidden = torch.zeros(30)                                # 120 bytes, in a closure
        self.reader = lambda: hidden
        full = torch.zeros(100)                                 # 400 bytes behind a view of 5 values
        self.view = full[:5]
        param.stash = torch.zeros(7)                            # 28 bytes on a parameter's own attributes
        _HidesState.class_cache[id(self)] = torch.zeros(11)     # 44 bytes in a class attribute


def test_the_memory_walk_finds_tensors_under_any_name_and_leaves_out_the_parameters():
    from grading.judge.held_memory import held_storages, storages_of

    param = torch.nn.Parameter(torch.zeros(1000))
    param.grad = torch.zeros(1000)
    holder = _HidesState(param)
    held = held_storages([holder], storages_of([param, param.grad]))
    assert sorted(held.values()) == [28, 40, 44, 80, 120, 400]
    assert sum(held_storages([holder], set()).values()) == 4000 + 712  # the parameter counts unless left out


@pytest.mark.parametrize("test", ["test_zero_stage2", "test_zero_stage3"])
def test_each_rank_receives_the_parameters_and_only_its_own_gradients_or_rows(test):
    """What ``rank_data`` sends each rank of Parts 2 to 4: every parameter (each rank starts from all of
    them), and of the per-rank tensors (gradients ``g<i>``: steps, ranks, *shape; rows ``x``, ``dout``:
    ranks, BATCH, HIDDEN) its own slice alone."""
    from grading.judge import engine

    spec = LAB.tests()[test]
    cases = spec.make_cases(torch.Generator().manual_seed(0))
    for rank, (seen, data) in enumerate(engine.split_by_rank(spec, cases)):
        for shown, own, case in zip(seen, data, cases):
            group, group_rank = case.groups[rank // case.group_size], rank % case.group_size
            assert not shown.groups and set(own) == set(group), case.name
            for name, whole in group.items():
                mine = (whole[:, group_rank] if name.startswith("g") else
                        whole[group_rank] if name in ("x", "dout") else whole)
                assert torch.equal(own[name], mine) and own[name].shape == mine.shape, (case.name, rank, name)
