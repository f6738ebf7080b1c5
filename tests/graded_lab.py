"""What the end-to-end tests of the labs share: one lab's notebooks, its wrong-implementation
fixtures (tests/fixtures/labNN) and the attacks on its own cells (tests/fixtures/attacks/LAB), the
solution's code run in a namespace, and the two ways a fixture is held to the parts it must lose
(the judge alone, or real nbgrader through ``autograder.runner.grade_class``, which is what
``course grade`` runs)."""
from __future__ import annotations

import os

import nbformat
import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution
from grading.autograder.report import attention_items
from grading.autograder.runner import GradeOptions, grade_class
from grading.judge import client, engine
from judge_scratch import new_scratch, ranks_write_in


class GradedLab:
    """Lab ``name`` (``labNN_topic``) with its fixtures in ``tests/fixtures/labNN``.

    ``given_cells``: grade_ids of the read-only cells the solution's code needs besides the
    ``parameters`` cell; ``rank_timeout_s``: seconds a call on ranks may run while grading
    (a deadlocking fixture waits this long)."""

    def __init__(self, name: str, *, rank_timeout_s: float, given_cells=("setup", "check_helpers")):
        self.name = name
        self.fixtures_dir = os.path.join(REPO, "tests", "fixtures", name[:5])
        self.attacks_dir = os.path.join(REPO, "tests", "fixtures", "attacks", name)
        self.rank_timeout_s = rank_timeout_s
        self.given_cells = tuple(given_cells)
        self._references: dict = {}
        self._scratch: str | None = None  # TMPDIR of the judge's ranks started here (``_judging``)

    # ----- what the lab is made of

    def notebooks(self):
        """(nbgrader source notebook, released notebook)."""
        source = nbformat.read(os.path.join(REPO, "solutions", self.name, f"{self.name}.ipynb"), as_version=4)
        release = nbformat.read(os.path.join(REPO, "labs", self.name, f"{self.name}.ipynb"), as_version=4)
        return source, release

    def tests(self) -> dict:
        """The judge's test specs: {test cell id: engine.TestSpec}."""
        return engine.load_lab(self.name).TESTS

    def fixture_names(self) -> list:
        return sorted(name[:-3] for name in os.listdir(self.fixtures_dir) if name.endswith(".py"))

    def attack_names(self) -> list:
        """The attacks on this lab's own cells (none when it has no folder of them)."""
        if not os.path.isdir(self.attacks_dir):
            return []
        return sorted(name[:-3] for name in os.listdir(self.attacks_dir) if name.endswith(".py"))

    def fixture(self, name: str):
        """The fixture (or attack) ``name``, parsed."""
        folder = self.fixtures_dir if os.path.exists(os.path.join(self.fixtures_dir, f"{name}.py")) else self.attacks_dir
        with open(os.path.join(folder, f"{name}.py")) as f:
            return parse_fixture(name, f.read())

    def solution_namespace(self, fixture: str | None = None) -> dict:
        """The solution's code cells (or a fixture's), without checks and hidden tests, run in a
        ``__main__`` namespace (so cloudpickle sends its functions by value)."""
        notebook = student_solution(*self.notebooks())
        if fixture:
            notebook = apply_fixture(notebook, self.fixture(fixture))
        namespace = {"__name__": "__main__"}
        for cell in notebook.cells:
            nbgrader = cell.metadata.get("nbgrader", {})
            given = cell.id == "parameters" or nbgrader.get("grade_id") in self.given_cells
            if cell.cell_type == "code" and (given or nbgrader.get("solution")):
                exec(compile(cell.source, f"<cell {cell.id}>", "exec"), namespace)
        return namespace

    # ----- checks every lab's test file makes

    def judge_the_solution(self, test: str):
        """Run hidden test ``test`` on the solution's code on ranks, as the judge does, and assert
        it passes. Returns (cases, per-rank results): each result's ``reference`` holds what the
        reference kernel did on every case (its ``comm`` counts and ``values``)."""
        spec = self.tests()[test]
        cases = spec.make_cases(torch.Generator().manual_seed(0))
        namespace = self.solution_namespace()
        objects = {name: namespace[name] for name in spec.objects}
        with self._judging():
            results = engine.merge(
                engine.launch_reference(self.name, test, cases, rank_timeout_s=60, backend="gloo"),
                engine.launch_submission(self.name, test, cases, client.dumps(objects), {}, rank_timeout_s=60,
                                         backend="gloo"))
        verdict = engine.compare(test, spec, cases, results)
        assert verdict.passed and not verdict.judge_error, verdict.lines
        return cases, results

    def _judging(self):
        """While the judge's ranks run from this process: their TMPDIR is this lab's scratch folder,
        kept while the process lives (its reference runs may be judged against later), then removed."""
        if self._scratch is None:
            self._scratch = new_scratch(removed_at_exit=True)
        return ranks_write_in(self._scratch)

    def check_fixtures_apply_and_name_real_test_cells(self) -> None:
        """Every fixture still applies to today's solution and loses only cells that exist."""
        source, release = self.notebooks()
        test_cells = _graded_cells(release)
        assert test_cells == set(self.tests())
        for name in self.fixture_names():
            fixture = self.fixture(name)
            assert fixture.description and fixture.loses and fixture.loses <= test_cells, name
            apply_fixture(student_solution(source, release), fixture)

    def losses_through_the_judge(self, fixture: str, tests=None, rank_timeout_s: float | None = None) -> set:
        """Test cells the fixture fails when the judge runs each test (or only ``tests``, names of
        hidden tests) on its code (no kernel), each call on ranks stopped after ``rank_timeout_s``
        (default: the lab's)."""
        namespace = self.solution_namespace(fixture)
        lost = set()
        for test in self.tests():
            if tests is not None and test not in tests:
                continue
            verdict = self.verdict(namespace, test, rank_timeout_s)
            assert not verdict.judge_error, verdict.lines
            if not verdict.passed:
                lost.add(test)
        return lost

    def verdict(self, namespace: dict, test: str, rank_timeout_s: float | None = None) -> engine.Verdict:
        """The judge's verdict on ``namespace``'s objects for hidden test ``test`` (no kernel), against
        the lab's one reference run of that test, on ranks stopped after ``rank_timeout_s`` (default:
        the lab's)."""
        objects = {name: namespace[name] for name in self.tests()[test].objects}
        reference = self.reference(test, seed=5)
        with self._judging():
            return engine.judge_against(reference, self.name, test, list(objects), client.dumps(objects), {},
                                        backend="gloo", rank_timeout_s=rank_timeout_s or self.rank_timeout_s)

    def reference(self, test: str, seed: int) -> engine.ReferenceRun:
        """What the reference did on hidden test ``test``'s cases from ``seed`` (``engine.run_reference``),
        launched once per test process: its results depend on the cases alone, so every fixture of the
        lab is judged against the same run, as ``engine.run_test`` would judge it against a new one."""
        if (test, seed) not in self._references:
            with self._judging():
                reference = engine.run_reference(self.name, test, rank_timeout_s=self.rank_timeout_s,
                                                 backend="gloo", seed=seed)
            assert not isinstance(reference, engine.Verdict), reference.lines
            self._references[(test, seed)] = reference
        return self._references[(test, seed)]

    def grade_through_nbgrader(self, tmp_path, fixtures, max_points: int):
        """Grade the solution, the release and ``fixtures`` (attacks too) with real nbgrader, in
        bubblewrap sandboxes, as ``course grade`` does; assert that each loses exactly its parts (the
        release all of them), that nothing is forged or tampered with, and that each fixture's
        ``attention`` lines are in its report. Returns the class report. One worker: every submission
        one after the other through one judge and one autograde worker, as each worker of a large class
        takes its students (a second worker would start a second judge, which runs every reference
        again: lab 7's test took 93 CPU-s at two workers, 57 at one). Parallel workers:
        test_grading_e2e and test_sandbox_user."""
        source, release = self.notebooks()
        submissions = tmp_path / "submitted"
        expected_losses = {"solution": set(), "release": _graded_cells(release)}
        notebooks = {"solution": student_solution(source, release), "release": release}
        for name in fixtures:
            fixture = self.fixture(name)
            notebooks[name] = apply_fixture(notebooks["solution"], fixture)
            expected_losses[name] = fixture.loses
        for student, notebook in notebooks.items():
            (submissions / student).mkdir(parents=True)
            nbformat.write(notebook, str(submissions / student / f"{self.name}.ipynb"))

        report = grade_class(GradeOptions(self.name, str(submissions), str(tmp_path / "course"), workers=1,
                                          rank_timeout_s=self.rank_timeout_s, backend="gloo"))

        assert report.max_points == max_points
        for outcome in report.outcomes:
            assert not outcome.failure, (outcome.student, outcome.failure)
            lost = {part.cell for part in outcome.parts if part.points != part.max_points}
            assert lost == expected_losses[outcome.student], (outcome.student, [(p.cell, p.lines[:2])
                                                                                for p in outcome.parts])
            assert outcome.points == max_points - sum(p.max_points for p in outcome.parts if p.cell in lost)
            assert not outcome.forged and not outcome.tampering, outcome.student
            if outcome.student in fixtures:
                attention = attention_items(outcome)
                for text in self.fixture(outcome.student).attention:
                    assert any(text in item for item in attention), (outcome.student, text, attention)
        return report


def judge_only_fixture_test(lab: GradedLab, nbgrader_fixtures: tuple):
    """The test that each fixture of ``lab`` not graded through nbgrader (not in ``nbgrader_fixtures``)
    loses exactly its parts through the judge alone."""
    @pytest.mark.parametrize("name", [n for n in lab.fixture_names() if n not in nbgrader_fixtures])
    def test(name):
        assert lab.losses_through_the_judge(name) == lab.fixture(name).loses
    return test


def part(report, student: str, cell: str):
    """The graded part ``cell`` of ``student``'s outcome in a class report."""
    outcome = next(o for o in report.outcomes if o.student == student)
    return next(p for p in outcome.parts if p.cell == cell)


def _graded_cells(notebook) -> set:
    return {c.metadata.nbgrader["grade_id"] for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")}
