"""The attention report's scan of a submission's code (grading.autograder.suspicious): every
lab's solution is clean, each red-team fixture is named, and nothing here changes a score."""
from __future__ import annotations

import os

import nbformat
import pytest

from grading.autograder.fixtures import apply_fixture, parse_fixture, student_solution
from grading.autograder.suspicious import CONSTRUCTS, scan_source, suspicious_constructs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABS = sorted(name for name in os.listdir(os.path.join(REPO, "solutions")) if name.startswith("lab"))


def _release_and_solution(lab: str):
    source = nbformat.read(os.path.join(REPO, "solutions", lab, f"{lab}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(REPO, "labs", lab, f"{lab}.ipynb"), as_version=4)
    return release, student_solution(source, release)


def _fixture(lab: str, folder: str, name: str):
    release, solution = _release_and_solution(lab)
    with open(os.path.join(REPO, "tests", "fixtures", folder, f"{name}.py")) as f:
        return release, apply_fixture(solution, parse_fixture(name, f.read()))


@pytest.mark.parametrize("lab", LABS)
def test_a_solution_and_an_untouched_release_need_no_look(lab):
    release, solution = _release_and_solution(lab)
    assert suspicious_constructs(release, solution) == []
    assert suspicious_constructs(release, release) == []


@pytest.mark.parametrize("name, expected", [
    ("reads_the_reference", ["importlib", "grading"]),
    ("attacks_the_grader", ["setsid", "subprocess", "outside the notebook"]),
    ("cheat", ["input_transformers"]),
])
def test_each_attack_is_named_with_its_cell_and_line(name, expected):
    release, submitted = _fixture("lab01_tensor_parallel", "lab01", name)
    lines = suspicious_constructs(release, submitted)
    for text in expected:
        assert any(text in line for line in lines), (text, lines)
    assert all(line.startswith("look at cell ") for line in lines if not line.startswith("..."))


@pytest.mark.parametrize("source, what", [
    ("from torch.distributed import distributed_c10d", "torch.distributed's internals"),
    ("objs = gc.get_objects()", "walks the interpreter's objects"),
    ("frame = sys._getframe(1).f_back", "walks stack frames"),
    ("importlib.reload(module)", "reloads or loads modules by path"),
    ("lib = ctypes.CDLL(None)", "calls C directly"),
    ("pid = os.fork()", "starts or signals processes"),
    ("if os.environ.get('LAB_JUDGE_SOCKET'):", "reads the environment"),
    ("text = open('/etc/passwd').read()", "reads paths outside"),
    ("block = multiprocessing.shared_memory.SharedMemory(name='x')", "shares memory or queues between processes"),
    ("store = dist.TCPStore('127.0.0.1', 29500, 2, False)", "opens a channel of its own"),
    ("conn = socket.create_connection(('127.0.0.1', 9999))", "opens a channel of its own"),
])
def test_each_kind_of_construct_is_recognised(source, what):
    assert any(what in found for _, _, found in scan_source(source))


def test_plain_code_is_not_flagged():
    assert scan_source("out = torch.matmul(x, w.t())\ndist.all_reduce(out, group=group)\n") == []


def test_a_helper_file_beside_the_notebook_is_named_in_the_report(tmp_path):
    from grading.autograder.runner import handed_in_beside, helper_files

    from grading.autograder.suspicious import suspicious_helper_files

    for name in ("lab01_tensor_parallel.ipynb", "timestamp.txt", "submission_secret.txt", "weights.pt"):
        (tmp_path / name).write_text("")
    (tmp_path / "my_layers.py").write_text("import torch\n\nobjects = gc.get_objects()\n")
    lines = helper_files(str(tmp_path), ["lab01_tensor_parallel.ipynb"])
    assert [line.split(":")[0] for line in lines] == ["handed in my_layers.py beside the notebook",
                                                      "handed in weights.pt beside the notebook"]
    assert "graded with the notebook's own" in lines[0] and "do not see this file" in lines[1]
    assert helper_files(str(tmp_path / "missing"), []) == []
    found = suspicious_helper_files(str(tmp_path), handed_in_beside(str(tmp_path), ["lab01_tensor_parallel.ipynb"]))
    assert found == ["look at my_layers.py, line 3: gc.get_objects (walks the interpreter's objects)"]
    assert suspicious_helper_files(str(tmp_path / "missing"), handed_in_beside(str(tmp_path / "missing"), [])) == []


ATTACKS = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "tests", "fixtures", "attacks")) if name.endswith(".py"))
WHATS = tuple(what for _, what in CONSTRUCTS)


@pytest.mark.parametrize("name", ATTACKS)
def test_every_red_team_fixture_is_named_by_the_scan_where_it_says_so(name):
    release, submitted = _fixture("lab01_tensor_parallel", "attacks", name)
    with open(os.path.join(REPO, "tests", "fixtures", "attacks", f"{name}.py")) as f:
        expected = [text for text in parse_fixture(name, f.read()).attention
                    if text.startswith("look at cell") or text in WHATS]
    lines = suspicious_constructs(release, submitted)
    for text in expected:
        assert any(text in line for line in lines), (text, lines)
