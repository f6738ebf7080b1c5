"""Lab 4 (ZeRO) graded end to end: the reference makes ZeRO's collectives where torch makes them
(stage 1: only the all-gather of the parameters in step, the gradients arriving averaged as DDP
leaves them; stage 2: a reduce-scatter of the gradients per parameter group in backward, the
all-gather in step; per ZeRO-3 unit an all-gather in forward, an all-gather and a reduce-scatter
in backward) on shards the group size does not divide; through real nbgrader
(``grading.autograder.runner.grade_class``, what ``course grade`` runs) the solution scores full
marks, the release zero, and a fixture (parameters not all-gathered) loses exactly the parts it
names; the other fixtures in tests/fixtures/lab04 (AdamW in the textbook's order, uneven shards
wrong; one per way a stage fails to behave as torch's: the optimizer class
ignored, gradients averaged again in step, a missing gradient counted as zero, a checkpoint of
the shard only, a deprecated collective, stage 2 reducing in step or all-reducing; weight decay
coupled, state for every parameter, ZeRO-3 keeping or saving its gathered parameters) are held
to the same through the judge alone (no kernel), on the hidden tests whose objects their edits
can change, to keep this file short."""
from __future__ import annotations

import ast

import pytest
import torch

from graded_lab import GradedLab
from grading.autograder.fixtures import apply_fixture, student_solution

LAB = GradedLab("lab04_zero", rank_timeout_s=60.0, given_cells=("setup", "check_helpers", "given_slots"))
#: The fixtures graded through nbgrader; the others go through the judge only.
NBGRADER_FIXTURES = ("stale_ranks_without_all_gather",)
pytestmark = pytest.mark.usefixtures("no_leftover_processes")

#: ZeRO (arXiv:1910.02054 section 7): stages 1 and 2 move 2 N per step. Behind DDP (stage 1) the
#: gradients arrive averaged and a step all-gathers the parameters, per parameter group; stage 2
#: reduce-scatters the gradients in backward, then all-gathers in step.
STEP_COLLECTIVES = {"test_zero_stage1": {"step": {"all_gather": 1}},
                    "test_zero_stage2": {"backward": {"reduce_scatter": 1}, "step": {"all_gather": 1}}}
#: Stage 3 (section 5.3): per unit, an all-gather in forward, an all-gather and a reduce-scatter in backward.
UNIT_COLLECTIVES = {"forward": {"all_gather": 1}, "backward": {"all_gather": 1, "reduce_scatter": 1}}


@pytest.mark.parametrize("test", list(STEP_COLLECTIVES))
def test_the_reference_communicates_as_zero_does_and_the_solution_passes(test):
    cases, results = LAB.judge_the_solution(test)
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            groups = len(set(case.params["groups_of"]))
            phases = {f"step {step}: {phase}": {op: groups * n for op, n in calls.items()}
                      for step in (1, 2, 3) for phase, calls in STEP_COLLECTIVES[test].items()}
            assert {k: v for k, v in reference["comm"].items() if k.startswith("step ")} == phases, case.name
    sizes = [sum(v.numel() for k, v in case.groups[0].items() if k.startswith("p")) for case in cases]
    assert any(size % case.group_size for size, case in zip(sizes, cases))  # uneven shards
    assert any(len(set(case.params["groups_of"])) == 2 for case in cases)
    assert {case.params["optimizer"] for case in cases} == {"AdamW", "SGD"}


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
    edited_cells = {edit.cell for edit in fixture.edits}
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


@pytest.mark.timeout(900)  # six notebooks whose ranks each build torch optimizers (the first imports torch's compiler)
def test_through_nbgrader_the_solution_scores_full_marks_the_release_zero_and_each_fixture_its_loss(tmp_path):
    LAB.grade_through_nbgrader(tmp_path, NBGRADER_FIXTURES + tuple(LAB.attack_names()), max_points=17)


#: The student's stage 1 keeps a value of its own (each group's shard width), which their stage 2
#: uses, and stage 2 calls its base class by name instead of super().
EXPLICIT_BASE_CALL = '''
_solution_stage1 = ZeroStage1
class ZeroStage1(_solution_stage1):
    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        self.shard_widths = getattr(self, "shard_widths", []) + [sum(hi - lo for _, lo, hi, _ in self.pieces[-1])]
_solution_stage2 = ZeroStage2
class ZeroStage2(ZeroStage1):
    def __init__(self, *args, **kwargs):
        ZeroStage1.__init__(self, *args, **kwargs)
        self.ready, self.next_group = set(), 0
        owner = weakref.ref(self)
        def hook(param):
            if owner() is not None:
                owner().on_gradient_ready(param)
        handles = [param.register_post_accumulate_grad_hook(hook)
                   for index in range(len(self.param_groups)) for param in self.trainable(index)]
        weakref.finalize(self, lambda: [handle.remove() for handle in handles])
    collect_gradients = _solution_stage2.collect_gradients
    on_gradient_ready = _solution_stage2.on_gradient_ready
    finish_backward = _solution_stage2.finish_backward
    def reduce_group(self, index):
        assert len(self.shard_widths) == len(self.param_groups)
        _solution_stage2.reduce_group(self, index)
'''


@pytest.mark.usefixtures("judge_in_this_process")
def test_a_stage_2_that_calls_its_base_class_by_name_loses_nothing():
    from grading.judge import client, engine

    namespace = LAB.solution_namespace()
    exec(compile(EXPLICIT_BASE_CALL, "<cell zero_stage2>", "exec"), namespace)
    objects = {"ZeroStage2": namespace["ZeroStage2"]}
    verdict = engine.run_test("lab04_zero", "test_zero_stage2", list(objects), client.dumps(objects), {},
                              rank_timeout_s=120.0, backend="gloo", seed=5)
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
