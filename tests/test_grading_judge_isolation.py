"""No grader code where student code runs: a submission's ranks receive the harness, the test's rank
code, the reference objects the test lends and nothing else of the grader (no module of it, no other
reference object, no dense maths); attacks that borrow the reference from the rank's memory
(tests/fixtures/attacks/LAB/borrows_*: sys.modules, gc) score what an empty part scores, and so does
optimizer state hidden in a module global (the memory the rank's process holds is measured), while
the solution keeps full marks; the rank template of ``course grade`` starts with no grader module and no grader file."""
from __future__ import annotations

import functools
import json
import os
import textwrap

import pytest
import torch

import labutils
from graded_lab import GradedLab
from labutils.ranks import _starters

from grading.autograder import rank_guard
from grading.judge import engine, rankside, shipping

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATTACKS_DIR = os.path.join(REPO, "tests", "fixtures", "attacks")
#: Attacks on a lab's own cells, one folder per lab (the attacks beside them are lab 1's).
ATTACK_LABS = sorted(name for name in os.listdir(ATTACKS_DIR) if os.path.isdir(os.path.join(ATTACKS_DIR, name)))

#: One rank template for the whole module; afterwards no process of ours may survive.
pytestmark = pytest.mark.usefixtures("no_leftover_processes_after_the_module", "judge_in_this_process")


@functools.cache
def _attack_lab(lab: str) -> GradedLab:
    """Lab ``lab`` with its attacks as fixtures; one per lab, so its reference runs are made once."""
    graded = GradedLab(lab, rank_timeout_s=120.0, given_cells=("setup", "check_helpers", "given_mappings", "given_slots"))
    graded.fixtures_dir = os.path.join(ATTACKS_DIR, lab)
    return graded


@functools.cache
def _solutions_verdict(lab: str, test: str):
    return _attack_lab(lab).verdict(_attack_lab(lab).solution_namespace(), test)


ATTACKS = [(lab, name) for lab in ATTACK_LABS for name in _attack_lab(lab).fixture_names()]


def test_there_are_attacks_that_borrow_the_reference_for_two_labs():
    assert len({lab for lab, _ in ATTACKS}) >= 2, ATTACKS


@pytest.mark.parametrize("lab, fixture", ATTACKS)
def test_an_attack_that_borrows_the_reference_from_the_ranks_memory_finds_nothing_and_the_solution_keeps_full_marks(
        lab, fixture):
    graded = _attack_lab(lab)
    loses = graded.fixture(fixture).loses
    assert loses, fixture
    attacked = graded.solution_namespace(fixture)
    for test in sorted(loses):
        verdict = graded.verdict(attacked, test)
        assert not verdict.passed and not verdict.judge_error, verdict.lines
        failures = [line for line in verdict.lines if line.startswith("✗")]
        clue = "NotImplementedError" if fixture.startswith("borrows") else "bytes"  # nothing found / memory measured
        assert failures and all(clue in line for line in failures), verdict.lines
        honest = _solutions_verdict(lab, test)
        assert honest.passed, honest.lines


# ----- what a submission's launch carries ----------------------------------------------------------------

def _programs(lab: str, test: str) -> tuple:
    module = engine.load_lab(lab)
    spec = module.TESTS[test]
    seen, data = engine.split_by_rank(spec, spec.make_cases(torch.Generator().manual_seed(0)))[0]
    lent = {name: module.REFERENCE[name] for name in spec.substitutes}
    return module, spec, seen, data, lent


@pytest.mark.parametrize("lab, test", [(lab, test) for lab in engine.available_labs()
                                       for test in engine.load_lab(lab).TESTS])
def test_every_tests_submission_program_is_written_without_a_graded_reference_object(lab, test):
    module, spec, seen, data, lent = _programs(lab, test)
    program = shipping.program(rankside.run_submission, (spec.run_case, lent, spec.world_size, seen, data, b"", {}),
                               shipping.graded_objects(module, spec))
    assert isinstance(program, bytes) and program


def test_a_program_that_would_carry_a_graded_reference_object_or_a_grader_module_is_not_written():
    module, spec, seen, data, lent = _programs("lab01_tensor_parallel", "test_row_parallel")
    refused = shipping.graded_objects(module, spec)
    with pytest.raises(shipping.ShippingRefused, match="reference RowParallelLinear"):
        shipping.program(rankside.run_submission, (spec.run_case, dict(lent, extra=module.REFERENCE["RowParallelLinear"]),
                                                   spec.world_size, seen, data, b"", {}), refused)
    with pytest.raises(shipping.ShippingRefused, match="expected of test_row_parallel"):
        shipping.program(rankside.run_submission, (spec.run_case, dict(lent, extra=spec.expected), spec.world_size,
                                                   seen, data, b"", {}), refused)
    with pytest.raises(shipping.ShippingRefused, match="names the module grading.judge.engine"):
        shipping.program(print, (engine,))


_CENSUS = '''
import gc
import sys

class ColumnParallelLinear(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        modules = sorted(name for name in sys.modules if name.split(".")[0] == "grading")
        held = sorted({f"{obj.__module__}.{obj.__qualname__}" for obj in gc.get_objects()
                       if isinstance(obj, type) or callable(obj) and hasattr(obj, "__code__")
                       if str(getattr(obj, "__module__", "")).startswith("grading.reference")})
        raise ValueError(f"modules={modules} held={held}")
'''


def test_a_submissions_ranks_hold_no_grader_module_and_only_the_reference_objects_the_test_lends():
    graded = GradedLab("lab01_tensor_parallel", rank_timeout_s=30.0, given_cells=("setup", "check_helpers", "given_mappings"))
    namespace = graded.solution_namespace()
    exec(textwrap.dedent(_CENSUS), namespace)
    verdict = _attack_lab("lab01_tensor_parallel").verdict(namespace, "test_column_parallel")
    line = verdict.lines[0]
    assert "ValueError: modules=[] held=[" in line, verdict.lines
    held = line.split("held=")[1]
    assert "tp_communications" in held  # the mappings f and g, lent to this test
    for graded_elsewhere in ("ColumnParallelLinear", "RowParallelLinear", "ParallelMLP"):
        assert graded_elsewhere not in held, line


# ----- the rank template of course grade ------------------------------------------------------------------

def test_the_rank_template_behind_the_guard_holds_no_grader_module_and_no_grader_file(tmp_path, monkeypatch):
    staged = tmp_path / "staged-grading"
    (staged / "judge").mkdir(parents=True)
    (staged / "judge" / "reference_copy.py").write_text("ANSWER = 42\n")
    labutils.shutdown()
    monkeypatch.setenv(_starters.RANK_WRAPPER_ENV, json.dumps([os.sys.executable, "-m", rank_guard.__name__, str(staged)]))
    try:
        found = labutils.launch(eval, 2, "sorted(m for m in __import__('sys').modules if m.split('.')[0] == 'grading')",
                                backend="gloo", timeout=60)
    finally:
        labutils.shutdown()
    assert found == [[], []]
    assert list(staged.iterdir()) == []


def test_the_guard_refuses_a_command_line_other_than_the_templates():
    with pytest.raises(SystemExit, match="usage: rank_guard"):
        rank_guard.template_command(["/staged", "python", "-c", "print(1)", "3"])
    assert rank_guard.template_command(["/staged", "/py", "-m", rank_guard.TEMPLATE_MODULE, "7"]) == [
        "/py", "-P", "-m", rank_guard.TEMPLATE_MODULE, "7"]
