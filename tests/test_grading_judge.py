"""The judge on real ranks (gloo, 4 ranks): the reference passes and communicates as Megatron
does, submissions are compared in the judge's process, borrowed grader code is refused."""
from __future__ import annotations

import os
import sys
import textwrap

import cloudpickle
import nbformat
import pytest
import torch

import labutils
from proctree import describe, descendants, wait_until_gone

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "grading"))

from autograder.fixtures import apply_fixture, parse_fixture, student_solution  # noqa: E402
from judge import client, engine, rankside  # noqa: E402

LAB = "lab01_tensor_parallel"


@pytest.fixture(scope="module", autouse=True)
def no_leftover_processes_after_the_module():
    """One rank template for the whole module; afterwards no process of ours may survive."""
    yield
    labutils.shutdown()
    left = wait_until_gone(descendants(), timeout_s=10.0)
    assert not left, f"processes left behind:\n{describe(left)}"


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


#: reference.md, "Tensor parallelism": the collectives of each mapping and layer, forward / backward.
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
    raw = labutils.launch(rankside.run_on_rank, 4, LAB, test, cases, cloudpickle.dumps(objects), {},
                          backend="gloo", timeout=60)
    results = [engine.decode(item) for item in raw]
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
    verdict = engine.run_test(LAB, "test_row_parallel", list(objects), cloudpickle.dumps(objects), {},
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
    verdict = engine.run_test(LAB, "test_column_parallel", list(objects), cloudpickle.dumps(objects),
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
    verdict = engine.run_test(LAB, "test_g", list(objects), cloudpickle.dumps(objects), {}, rank_timeout_s=60)
    assert not verdict.passed
    assert verdict.lines[0].startswith("✗ a rank died while running your code: rank 0 died") and "SIGKILL" in verdict.lines[0]


def test_a_submission_that_borrows_the_reference_is_refused():
    namespace = {"__name__": "__main__"}
    exec("import reference.tensor_parallel as ref\n"
         "def reduce_from_tp_region(x, group):\n    return ref.reduce_from_tp_region(x, group)\n", namespace)
    objects = {"reduce_from_tp_region": namespace["reduce_from_tp_region"]}
    verdict = engine.run_test(LAB, "test_g", list(objects), cloudpickle.dumps(objects), {}, rank_timeout_s=60)
    assert not verdict.passed
    assert "uses the grader's own implementation: ref (reference.tensor_parallel)" in verdict.lines[0]


def test_the_kernel_side_client_prints_the_verdict_and_fails_in_one_line(capsys, monkeypatch):
    monkeypatch.delenv("LAB_JUDGE_SOCKET", raising=False)
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


@pytest.mark.multigpu
def test_the_judge_runs_the_hidden_tests_on_nccl_with_one_gpu_per_rank(solution):
    from labutils.backend import visible_gpu_count

    if visible_gpu_count() < 4:
        pytest.skip(f"needs 4 CUDA GPUs for NCCL with one GPU per rank ({visible_gpu_count()} visible)")
    for test, spec in engine.load_lab(LAB).TESTS.items():
        objects = {name: solution[name] for name in spec.objects}
        verdict = engine.run_test(LAB, test, list(objects), cloudpickle.dumps(objects), {},
                                  rank_timeout_s=120, backend="nccl", seed=4)
        assert verdict.passed, verdict.lines
