"""The judge on real ranks (gloo, 4 ranks): the reference passes and communicates as Megatron
does, submissions are compared in the judge's process, borrowed grader code is refused (also when
looked up at run time), the reference's results are out of the submission's reach, nothing
the ranks send back can run code in the judge, each rank receives only its own inputs, and the
red team's submissions (tests/fixtures/labNN/red_team: peeking, distributed_c10d, dummy
collectives, a replayed schedule) score what an empty part scores while correct variants pass."""
from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution
from grading.judge import client, comparisons, engine

LAB = "lab01_tensor_parallel"

#: One rank template for the whole module; afterwards no process of ours may survive.
pytestmark = pytest.mark.usefixtures("no_leftover_processes_after_the_module", "judge_in_this_process")


def _notebook_namespace(fixture: str | None = None) -> dict:
    """The student's solution (or a fixture of it) run as a kernel would, in a __main__ namespace
    (so cloudpickle sends its classes by value), without the checks and hidden tests."""
    source = nbformat.read(os.path.join(REPO, "solutions", LAB, f"{LAB}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", LAB, f"{LAB}.ipynb"), as_version=4)
    notebook = student_solution(source, release)
    if fixture:
        with open(os.path.join(REPO, "tests", "fixtures", "lab01", f"{fixture}.py")) as f:
            notebook = apply_fixture(notebook, parse_fixture(fixture, f.read()))
    namespace = {"__name__": "__main__"}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and (cell.id == "parameters" or grade_id in ("setup", "given_mappings")
                                         or cell.metadata.get("nbgrader", {}).get("solution")):
            exec(compile(cell.source, f"<cell {cell.id}>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def solution():
    return _notebook_namespace()


#: The collectives of each mapping and layer, forward / backward (Megatron-LM, arXiv:1909.08053 section 3).
MEGATRON_PATTERN = {
    "test_f": lambda p: ({}, {"all_reduce": 1}),
    "test_g": lambda p: ({"all_reduce": 1}, {}),
    "test_column_parallel": lambda p: ({"all_gather": 1} if p["gather_output"] else {}, {"all_reduce": 1}),
    "test_row_parallel": lambda p: ({"all_reduce": 1}, {} if p["input_is_parallel"] else {"all_gather": 1}),
    "test_parallel_mlp": lambda p: ({"all_reduce": 1}, {"all_reduce": 1}),
}


@pytest.mark.parametrize("test", list(MEGATRON_PATTERN))
def test_the_reference_communicates_as_megatron_does_and_the_solution_passes(test, solution):
    spec = engine.load_lab(LAB).TESTS[test]
    cases = spec.make_cases(torch.Generator().manual_seed(0))
    objects = {name: solution[name] for name in spec.objects}
    results = engine.merge(engine.launch_reference(LAB, test, cases, rank_timeout_s=60, backend="gloo"),
                           engine.launch_submission(LAB, test, cases, client.dumps(objects), {},
                                                    rank_timeout_s=60, backend="gloo"))
    for result in results:
        for case, reference in zip(cases, result["reference"]):
            forward, backward = MEGATRON_PATTERN[test](case.params)
            assert reference["comm"] == {"forward": forward, "backward": backward}, case.name
    # the comparison also checks the reference against dense maths (a judge error otherwise)
    verdict = engine.compare(test, spec, cases, results)
    assert verdict.passed and not verdict.judge_error, verdict.lines
    assert len(verdict.lines) == 4 and all(line.startswith("✓") for line in verdict.lines)


def test_a_correct_pattern_with_the_wrong_collective_fails_on_the_count_alone():
    namespace = _notebook_namespace("gather_instead_of_reduce")
    objects = {"RowParallelLinear": namespace["RowParallelLinear"]}
    verdict = engine.run_test(LAB, "test_row_parallel", list(objects), client.dumps(objects), {},
                              rank_timeout_s=60, seed=2)
    assert not verdict.passed
    assert all("forward on rank 0 made 1 all_gather, expected 1 all_reduce" in line for line in verdict.lines)


def test_student_code_runs_on_the_ranks_and_its_errors_quote_only_its_own_lines():
    namespace = _notebook_namespace()
    source = textwrap.dedent('''
        class ColumnParallelLinear(nn.Module):
            def __init__(self, in_features, out_features, group, bias=True, gather_output=False):
                super().__init__()
                raise RuntimeError("my layer is not finished")
    ''')
    filename = "/tmp/ipykernel_0/0123.py"  # what a kernel calls a cell
    exec(compile(source, filename, "exec"), namespace)
    objects = {"ColumnParallelLinear": namespace["ColumnParallelLinear"]}
    verdict = engine.run_test(LAB, "test_column_parallel", list(objects), client.dumps(objects),
                              {filename: source}, rank_timeout_s=60, seed=3)
    assert not verdict.passed and len(verdict.lines) == 1
    assert verdict.lines[0].endswith("RuntimeError: my layer is not finished (in __init__, line 5 of your cell: "
                                     "`raise RuntimeError(\"my layer is not finished\")`)")
    assert "grading" not in verdict.lines[0]


def test_a_rank_killed_by_the_submission_fails_only_its_test(solution):
    namespace = dict(solution)
    exec("import os, signal\n"
         "def reduce_from_tp_region(x, group):\n"
         "    os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does\n", namespace)
    objects = {"reduce_from_tp_region": namespace["reduce_from_tp_region"]}
    verdict = engine.run_test(LAB, "test_g", list(objects), client.dumps(objects), {}, rank_timeout_s=60)
    assert not verdict.passed
    assert verdict.lines[0].startswith("✗ a rank died while running your code: rank 0 died") and "SIGKILL" in verdict.lines[0]


def test_a_submission_that_borrows_the_reference_is_refused():
    namespace = {"__name__": "__main__"}
    exec("import grading.reference.tensor_parallel as ref\n"
         "def reduce_from_tp_region(x, group):\n    return ref.reduce_from_tp_region(x, group)\n", namespace)
    objects = {"reduce_from_tp_region": namespace["reduce_from_tp_region"]}
    verdict = engine.run_test(LAB, "test_g", list(objects), client.dumps(objects), {}, rank_timeout_s=60)
    assert not verdict.passed
    refused = ("uses the grader's own implementation: ref (grading.reference.tensor_parallel)",  # grader readable
               "your code could not be loaded on the ranks: PermissionError")  # the rank cannot read the grader
    assert any(reason in verdict.lines[0] for reason in refused), verdict.lines


def _judge_source(test: str, source: str, seed: int = 6):
    """The verdict of the judge on the solution with ``source`` run after it (a student's replacement)."""
    namespace = _notebook_namespace()
    exec(textwrap.dedent(source), namespace)
    spec = engine.load_lab(LAB).TESTS[test]
    objects = {name: namespace[name] for name in spec.objects}
    return engine.run_test(LAB, test, list(objects), client.dumps(objects), {}, rank_timeout_s=60, seed=seed)


def test_a_submission_that_copies_the_references_results_from_the_judges_frames_finds_none():
    # It computes nothing: on the ranks it walks up to the judge's frames, looking for the reference's
    # results of the current case, and makes the judge's CaseRun return them. The reference runs in
    # ranks of its own, so there is nothing to find, and its zeros are compared with dense maths.
    verdict = _judge_source("test_column_parallel", '''
        import sys

        class ColumnParallelLinear(nn.Module):
            def __init__(self, in_features, out_features, group, bias=True, gather_output=False):
                super().__init__()
                tp = dist.get_world_size(group)
                self.weight = nn.Parameter(torch.zeros(out_features // tp, in_features))
                self.bias = nn.Parameter(torch.zeros(out_features // tp)) if bias else None
                self.width = out_features if gather_output else out_features // tp
                frame, holder, run = sys._getframe(1), None, None
                while frame is not None:
                    if run is None and hasattr(frame.f_locals.get("run"), "result"):
                        run = frame.f_locals["run"]
                    if "reference" in frame.f_locals and "case" in frame.f_locals:
                        holder = frame.f_locals
                    frame = frame.f_back
                if holder is not None and run is not None:
                    index = next(i for i, c in enumerate(holder["cases"]) if c is holder["case"])
                    answer = holder["reference"][index]
                    run.result = lambda out, dx: answer

            def forward(self, x):
                return torch.zeros(*x.shape[:-1], self.width) + 0 * (x.sum() + self.weight.sum())
    ''')
    assert not verdict.passed and not verdict.judge_error
    assert all("output on rank 0 differs" in line for line in verdict.lines), verdict.lines


#: Row-parallel layers that look up the grader at run time (nothing in their pickled namespace names it).
_LOOKUPS = {
    "RowParallelLinear": '''
        class RowParallelLinear(nn.Module):
            def __new__(cls, *args, **kwargs):   # an instance of any other module's RowParallelLinear
                import sys
                for name, module in list(sys.modules.items()):
                    other = getattr(module, "RowParallelLinear", None)
                    if name != "__main__" and isinstance(other, type) and other is not cls:
                        return other(*args, **kwargs)
                return super().__new__(cls)
    ''',
    "expected results of test_row_parallel": '''
        class RowParallelLinear(nn.Module):
            def __init__(self, *args, **kwargs):  # the judge's own dense maths, found on the rank
                super().__init__()
                import sys
                sys.modules["grading.judge.lab01_tensor_parallel"].TESTS["test_row_parallel"].expected(None, {})
    ''',
}


@pytest.mark.parametrize("target", list(_LOOKUPS))
def test_a_submission_that_looks_up_the_grader_at_run_time_finds_nothing_of_it(target):
    # the submission's ranks never imported the grader: its own class, or a KeyError, is all there is
    verdict = _judge_source("test_row_parallel", _LOOKUPS[target])
    assert not verdict.passed and not verdict.judge_error
    assert verdict.lines[0].startswith("✗ rank 0: ") and "grader" not in verdict.lines[0], verdict.lines
    if target == "expected results of test_row_parallel":
        assert "KeyError: 'grading.judge.lab01_tensor_parallel'" in verdict.lines[0], verdict.lines


#: Ways for code on a rank to hand the judge's process a pickle that runs code when unpickled (labutils
#: pickles what ranks send back): as the result, as an exception (both by rewriting the harness the
#: judge shipped, found with gc), as a frame of labutils' wire protocol.
_PICKLE_BOMBS = {
    "result": '''
import gc
harness = next(f for f in gc.get_objects() if type(f).__name__ == "function" and f.__name__ == "run_submission")
harness.__globals__["_as_bytes"] = lambda payload: _Bomb()
''',
    "exception": '''
import gc
class _Raised(Exception):
    def __reduce__(self):
        return _Bomb.__reduce__(self)

def explode(payload):
    raise _Raised("boom")

harness = next(f for f in gc.get_objects() if type(f).__name__ == "function" and f.__name__ == "run_submission")
harness.__globals__["_as_bytes"] = explode
''',
    "wire frame": '''
frame = sys._getframe()
while frame is not None and "ctrl" not in frame.f_locals:
    frame = frame.f_back
sys.modules["labutils.ranks._wire"].send(frame.f_locals["ctrl"], _Bomb())
''',
}


@pytest.mark.parametrize("how", list(_PICKLE_BOMBS))
def test_what_the_ranks_send_back_cannot_run_code_in_the_judge(how, tmp_path):
    marker = tmp_path / "ran-in-the-judge"
    source = (f"import sys\n\n"
              f"class _Bomb:\n"
              f"    def __reduce__(self):\n"
              f"        return (exec, (\"open({str(marker)!r}, 'w').write('pwned')\",))\n\n"
              f"def reduce_from_tp_region(x, group):\n"
              + textwrap.indent(_PICKLE_BOMBS[how].strip("\n"), "    ") + "\n    return x\n")
    verdict = _judge_source("test_g", source)
    assert not marker.exists()
    assert not verdict.passed and not verdict.judge_error, verdict.lines
    assert ("refuses to unpickle" if how != "exception" else "raised") in verdict.lines[0], verdict.lines


def test_the_kernel_side_client_prints_the_verdict_and_fails_in_one_line(capsys, monkeypatch):
    monkeypatch.delenv("LAB_JUDGE_SOCKET", raising=False)
    scratch = Path(tempfile.mkdtemp(prefix="kernel-tmp-", dir="/tmp"))  # short: the ranks' sockets go beneath
    monkeypatch.setenv("TMPDIR", str(scratch))  # the judge's; it leaves nothing there when it ends
    namespace = _notebook_namespace("f_backward_without_all_reduce")
    try:
        with pytest.raises(client.HiddenTestsFailed) as failure:
            client.judge(LAB, "test_f", copy_to_tp_region=namespace["copy_to_tp_region"])
        client.judge(LAB, "test_g", reduce_from_tp_region=namespace["reduce_from_tp_region"])
    finally:
        client._stdio_judge.stdin.close()
        client._stdio_judge.wait(timeout=30)
    printed = capsys.readouterr()
    assert printed.err == ""
    assert printed.out.count("✗ f = copy_to_tp_region") == 4 and printed.out.count("✓ g = reduce_from_tp_region") == 4
    assert "input gradient dX on rank 0 differs" in str(failure.value)
    assert failure.value._render_traceback_() == [f"HiddenTestsFailed: {failure.value}"]
    assert list(scratch.iterdir()) == []  # no folder of the judge's, nor one of each of its ranks
    scratch.rmdir()


@pytest.mark.multigpu
def test_the_judge_runs_the_hidden_tests_on_nccl_with_one_gpu_per_rank(solution):
    from labutils.devices.backend import visible_gpu_count

    if visible_gpu_count() < 4:
        pytest.skip(f"needs 4 CUDA GPUs for NCCL with one GPU per rank ({visible_gpu_count()} visible)")
    for test, spec in engine.load_lab(LAB).TESTS.items():
        objects = {name: solution[name] for name in spec.objects}
        verdict = engine.run_test(LAB, test, list(objects), client.dumps(objects), {},
                                  rank_timeout_s=120, backend="nccl", seed=4)
        assert verdict.passed, verdict.lines


def test_equivalent_collectives_count_alike_and_a_different_one_does_not():
    reference = [{"comm": {"forward": {"all_gather": 1}, "backward": {}}}]
    same = [{"comm": {"forward": {"all_gather_into_tensor": 1}, "backward": {}}}]
    other = [{"comm": {"forward": {"all_reduce": 1}, "backward": {}}}]
    nothing_expected = [{"grads": {}}]
    assert comparisons.canonical_calls({"all_gather_into_tensor": 1, "all_gather": 1, "send": 0}) == {"all_gather": 2}
    assert comparisons.case_problem(nothing_expected, same, reference) is None
    assert comparisons.case_problem(nothing_expected, other, reference) == (
        "forward on rank 0 made 1 all_reduce, expected 1 all_gather")


# ----- each rank holds only its own inputs ----------------------------------------------------------

def _storages(value) -> list:
    """(tensor, bytes of its storage) of every tensor in a rank's data."""
    return [(t, t.untyped_storage().nbytes()) for t in value.values() if isinstance(t, torch.Tensor)]


def test_each_rank_receives_its_own_shards_in_storage_of_their_own_and_no_other_ranks_data():
    spec = engine.load_lab(LAB).TESTS["test_row_parallel"]
    cases = spec.make_cases(torch.Generator().manual_seed(1))
    per_rank = engine.split_by_rank(spec, cases)
    for index, case in enumerate(cases):
        for rank, (seen, data) in enumerate(per_rank):
            assert seen[index].groups == [] and seen[index].params == case.params
            dense = case.groups[rank // case.group_size]
            own = data[index]
            assert own["weight"].shape[1] * case.group_size == dense["weight"].shape[1], case.name
            for tensor, storage_bytes in _storages(own):  # a view would carry its whole base
                assert storage_bytes == tensor.numel() * tensor.element_size(), case.name
            others = [d[index]["weight"] for r, (_, d) in enumerate(per_rank) if r != rank]
            assert not any(torch.equal(own["weight"], other) for other in others), case.name


# ----- communication recorded at the process group ----------------------------------------------------

def test_the_same_operations_with_other_bytes_fail_with_the_bytes_named():
    reference = [{"comm": {"forward": {"all_reduce": 1}}, "comm_bytes": {"forward": {"all_reduce": 96}}}]
    dummy = [{"comm": {"forward": {"all_reduce": 1}}, "comm_bytes": {"forward": {"all_reduce": 4}}}]
    assert comparisons.case_problem([{"grads": {}}], dummy, reference) == (
        "forward on rank 0 moved 4 bytes in all_reduce, expected 96 bytes in all_reduce "
        "(the same operations, other sizes)")
    same = [{"comm": {"forward": {"all_reduce": 1}}, "comm_bytes": {"forward": {"all_reduce": 96}}}]
    assert comparisons.case_problem([{"grads": {}}], same, reference) is None


# ----- the red team's submissions (tests/fixtures/labNN/red_team) ---------------------------------------

#: (lab, fixture) -> the hidden tests it is held to: those its `# loses:` line names lose, the others pass.
RED_TEAM = {
    ("lab01_tensor_parallel", "peeks_at_the_other_ranks_data"): ("test_row_parallel",),
    ("lab01_tensor_parallel", "gathers_through_distributed_c10d"): ("test_row_parallel",),
    ("lab01_tensor_parallel", "dummy_all_reduce_beside_an_imported_all_gather"): ("test_row_parallel",),
    ("lab01_tensor_parallel", "g_through_distributed_c10d_and_the_group"): ("test_g",),
    ("lab02_collectives", "library_all_reduce_behind_dummy_sends"): ("test_ring_all_reduce",),
    ("lab02_collectives", "peeks_at_the_other_ranks_buffers"): ("test_ring_all_reduce",),
    ("lab02_collectives", "all_gather_sends_whole_buffers"): ("test_ring_all_gather",),
    ("lab03_data_parallel", "peeks_at_the_other_ranks_batch"): ("test_average_gradients",),
    ("lab04_zero", "peeks_at_the_other_ranks_gradients"): ("test_zero_stage2",),
    ("lab05_pipeline_parallel", "gpipe_behind_a_replayed_1f1b_order"): ("test_1f1b",),
    ("lab05_pipeline_parallel", "peeks_at_the_whole_model"): ("test_1f1b",),
    ("lab06_expert_parallel", "all_to_all_through_distributed_c10d"): ("test_all_to_all",),
    ("lab06_expert_parallel", "counts_gathered_through_distributed_c10d"): ("test_all_to_all",),
    ("lab06_expert_parallel", "peeks_at_the_other_ranks_counts"): ("test_all_to_all",),
}


#: What a failure read off the process group's record says: other operations, other bytes, or
#: (lab 5) a peak measured from the order of the messages.
RECORDED = (" made ", " moved ", "measured from the order")


def _red_team_lab(lab: str):
    from graded_lab import GradedLab

    graded = GradedLab(lab, rank_timeout_s=30.0, given_cells=("setup", "check_helpers", "given_mappings"))
    graded.fixtures_dir = os.path.join(graded.fixtures_dir, "red_team")
    return graded


def test_every_red_team_fixture_is_held_to_its_tests():
    for lab in {lab for lab, _ in RED_TEAM}:
        graded = _red_team_lab(lab)
        assert {(lab, name) for name in graded.fixture_names()} <= set(RED_TEAM), lab
        for name in graded.fixture_names():
            assert graded.fixture(name).loses <= set(RED_TEAM[lab, name]), name


@pytest.mark.parametrize("lab, fixture", sorted(RED_TEAM))
def test_a_red_team_submission_scores_what_an_empty_part_scores_and_a_correct_one_full_marks(lab, fixture):
    graded = _red_team_lab(lab)
    loses = graded.fixture(fixture).loses
    namespace = graded.solution_namespace(fixture)
    for test in RED_TEAM[lab, fixture]:
        objects = {name: namespace[name] for name in graded.tests()[test].objects}
        verdict = engine.run_test(lab, test, list(objects), client.dumps(objects), {}, rank_timeout_s=30,
                                  backend="gloo", seed=3)
        assert not verdict.judge_error, verdict.lines
        assert verdict.passed == (test not in loses), (test, verdict.lines)
        if "peeks" in fixture:  # nothing to find: the part is as good as empty
            assert all("NotImplementedError" in line for line in verdict.lines), verdict.lines
        elif test in loses:  # right results: only what the process group recorded gives it away
            failures = [line for line in verdict.lines if line.startswith("✗") and "more failing" not in line]
            assert all(any(clue in line for clue in RECORDED) for line in failures), verdict.lines


def test_a_submission_may_take_the_labs_timeout_or_ten_times_the_references_time_if_that_is_more():
    assert engine.submission_timeout_s(60.0, reference_s=1.5) == 60.0
    assert engine.submission_timeout_s(10.0, reference_s=4.01) == 41.0  # a busy machine slowed the reference


def test_only_a_service_keeps_reference_runs_for_a_lab_a_kernels_judge_is_refused_the_option(capsys):
    from grading.judge import server

    with pytest.raises(SystemExit) as exited:
        server.main(["--stdio", "--lab", LAB])
    assert exited.value.code == 2
    assert "--lab goes with --service" in capsys.readouterr().err


def test_a_services_later_templates_import_for_optimizers_only_where_the_labs_ranks_build_them(monkeypatch):
    from grading.judge import server
    from labutils.ranks._template import EAGER_IMPORTS_ENV

    # setenv records the value from before the test, so monkeypatch puts it back after the test (delenv
    # of an absent variable records nothing, and what the service then sets would outlive the test)
    monkeypatch.setenv(EAGER_IMPORTS_ENV, "")
    for lab in engine.available_labs():
        builds = engine.load_lab(lab).RANKS_BUILD_OPTIMIZERS
        assert type(builds) is bool, lab
        monkeypatch.delenv(EAGER_IMPORTS_ENV)
        server._later_templates_import_for(lab)
        assert os.environ[EAGER_IMPORTS_ENV] == ("1" if builds else "0"), lab
    assert engine.load_lab("lab04_zero").RANKS_BUILD_OPTIMIZERS  # its stages build AdamW on every rank
    assert not engine.load_lab("lab02_collectives").RANKS_BUILD_OPTIMIZERS


def test_a_services_begin_asks_the_kernels_for_the_same_import_plan_and_only_labutils_variables_pass(
        monkeypatch, tmp_path):
    """Each submission's kernel gets the plan the service's own templates follow (its template serves
    the notebook's launches); a reply naming any other variable stops the grading of that submission."""
    import io
    from types import SimpleNamespace

    from grading.autograder import judge_service
    from grading.judge import server
    from grading.judge.protocol import read_message
    from labutils.ranks._template import EAGER_IMPORTS_ENV

    monkeypatch.setattr(server, "_start_fresh_template", lambda: None)  # no template: only the reply is read
    for value in ("0", "1", None):
        if value is None:
            monkeypatch.delenv(EAGER_IMPORTS_ENV, raising=False)
        else:
            monkeypatch.setenv(EAGER_IMPORTS_ENV, value)
        reply = io.BytesIO()
        service = server._Service(reply, None, SimpleNamespace(start=lambda title: None), {})
        service.control({"cmd": "begin", "submission": "alice", "socket": str(tmp_path / "judge.sock")})
        service._close_listener()
        answer, _ = read_message(io.BytesIO(reply.getvalue()))
        assert answer == {"ok": True, "kernel_env": {} if value is None else {EAGER_IMPORTS_ENV: value}}
        assert judge_service._kernel_variables(answer["kernel_env"]) == answer["kernel_env"]
    for bad in ({"LD_PRELOAD": "/tmp/x.so"}, {EAGER_IMPORTS_ENV: 1}, ["LABUTILS_X"]):
        with pytest.raises(judge_service.JudgeServiceFailed, match="kernel variables"):
            judge_service._kernel_variables(bad)
