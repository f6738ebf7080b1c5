"""The bubblewrap sandbox of every submission's kernel (grading.autograder.sandbox): what it
shows, what it hides, and that nothing it started outlives it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grading.autograder import sandbox
from grading.autograder.sandbox import (
    SANDBOX_ENV,
    SandboxedKernelManager,
    SandboxSpec,
    SandboxUnavailable,
    find_bwrap,
    kernel_environment,
    sandbox_command,
    submission_spec,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap") and not sandbox.shutil.which("bwrap"),
                                reason="bubblewrap is not installed")


def _spec(tmp_path, memory_gib=1.0, judge_socket="") -> SandboxSpec:
    spec = submission_spec(str(tmp_path / "sandboxes"), "alice", REPO, judge_socket, memory_gib, on_gpu=False)
    workdir, scratch = tmp_path / "course" / "autograded" / "alice", tmp_path / "scratch"
    for folder in (workdir, scratch, tmp_path / "sandboxes" / "alice" / "runtime"):
        folder.mkdir(parents=True, exist_ok=True)
    return SandboxSpec(**{**spec.__dict__, "workdir": str(workdir), "scratch_dir": str(scratch)})


def _run_inside(spec: SandboxSpec, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = sandbox_command(find_bwrap(), spec, [sys.executable, "-c", code], kernel_environment(dict(os.environ)))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_the_grader_and_the_course_folder_are_out_of_sight(tmp_path):
    (tmp_path / "course" / "gradebook.db").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "course" / "gradebook.db").write_text("secret")
    spec = _spec(tmp_path)
    done = _run_inside(spec, f"""
import os
import shutil
print(sorted(os.listdir({REPO + '/grading'!r})))
print(os.path.exists({REPO + '/solutions'!r}), os.path.exists({str(tmp_path / 'course' / 'gradebook.db')!r}))
from grading.judge import judge
import labutils
open('answer.txt', 'w').write('scratch')
try:
    open({REPO + '/labutils/__init__.py'!r}, 'a')
except OSError as exc:
    print('read-only', type(exc).__name__)
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "['__init__.py', 'judge', 'paths.py']"
    assert lines[1] == "False False"
    assert lines[2].startswith("read-only")
    assert (tmp_path / "scratch" / "answer.txt").read_text() == "scratch"  # writes land in the scratch copy
    assert not (tmp_path / "course" / "autograded" / "alice" / "answer.txt").exists()


def test_only_loopback_and_ranks_still_run_on_it(tmp_path):
    done = _run_inside(_spec(tmp_path), """
import socket, labutils, torch, torch.distributed as dist
print(sorted(name for _, name in socket.if_nameindex()))
def total():
    t = torch.ones(2) * dist.get_rank()
    dist.all_reduce(t)
    return t
print(labutils.launch(total, 2, backend='gloo', timeout=60)[1].tolist())
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['lo']", "[1.0, 1.0]"]


def test_anonymous_shared_mmap_counts_against_the_cap(tmp_path):
    done = _run_inside(_spec(tmp_path, memory_gib=1.0), """
import mmap
try:
    mmap.mmap(-1, 16 * 2**30)
    print('mapped')
except OSError:
    print('refused')
""")
    assert done.stdout.strip() == "refused", done.stderr


def test_a_setsid_daemon_dies_with_the_sandbox(tmp_path):
    marker = f"sleep {int(time.time()) % 100000 + 100000}"
    done = _run_inside(_spec(tmp_path), f"import subprocess; subprocess.Popen(['setsid'] + {marker.split()!r})")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _processes_named(marker):
        time.sleep(0.1)
    assert _processes_named(marker) == []


def _processes_named(cmdline: str) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().replace(b"\0", b" ").strip().decode(errors="replace") == cmdline:
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_the_judge_socket_is_bound_read_only(tmp_path):
    socket_path = tmp_path / "judge" / "judge.sock"
    socket_path.parent.mkdir()
    import socket

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(socket_path))
        listener.listen(1)
        done = _run_inside(_spec(tmp_path, judge_socket=str(socket_path)), f"""
import os, socket
s = socket.socket(socket.AF_UNIX); s.connect({str(socket_path)!r}); print('connected')
try:
    os.unlink({str(socket_path)!r})
except OSError as exc:
    print('kept', type(exc).__name__)
""")
    lines = done.stdout.splitlines()
    assert lines[0] == "connected" and lines[1].startswith("kept "), done.stdout + done.stderr


@pytest.fixture
def short_tmp_path():
    """A folder with a short path: a kernel's IPC socket path must fit in 107 bytes, which pytest's
    own folders under parallel workers can exceed."""
    folder = tempfile.mkdtemp(prefix="sbx-", dir="/tmp")
    yield Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_kernel_runs_over_ipc_inside_and_a_timed_out_cell_is_interrupted(short_tmp_path, monkeypatch):
    from nbclient import NotebookClient

    tmp_path = short_tmp_path
    spec = _spec(tmp_path)
    monkeypatch.setenv(SANDBOX_ENV, spec.to_env())
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os; print(os.path.exists('/proc/1/cmdline'), os.getppid())"),
                nbformat.v4.new_code_cell("import time\nwhile True: time.sleep(0.1)"),
                nbformat.v4.new_code_cell("print('after')")]
    client = NotebookClient(nb, timeout=5, startup_timeout=60, interrupt_on_timeout=True, allow_errors=True,
                            kernel_manager_class=SandboxedKernelManager, kernel_name="python3",
                            resources={"metadata": {"path": spec.workdir}})
    client.execute()
    assert nb.cells[1].outputs[-1]["ename"] == "KeyboardInterrupt"
    assert nb.cells[2].outputs[0]["text"] == "after\n"


def test_no_sandbox_settings_no_kernel(monkeypatch):
    monkeypatch.delenv(SANDBOX_ENV, raising=False)
    with pytest.raises(SandboxUnavailable, match=SANDBOX_ENV):
        SandboxedKernelManager()


def test_course_grade_says_how_to_install_bwrap_when_it_is_missing(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on PATH
    done = subprocess.run([sys.executable, "-m", "grading", "grade", "lab01_tensor_parallel", str(tmp_path),
                           "--backend", "gloo"], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert done.returncode != 0
    assert "apt-get install bubblewrap" in done.stderr


def test_the_judges_ranks_see_only_labutils_and_no_grader_file_and_die_with_their_template(tmp_path):
    from grading.autograder.sandbox import judge_rank_wrapper, staging_folder

    work = tmp_path / "ranks"
    work.mkdir()
    (tmp_path / "gradebook.db").write_text("secret")
    (work / "planted.py").write_text("")  # left by an earlier submission's ranks: never imported
    wrapper = judge_rank_wrapper(find_bwrap(), REPO, str(work), 2.0, on_gpu=False)
    code = f"""
import importlib, os, labutils, torch.distributed as dist
def look():
    try:  # the ranks never import the grader: neither an import nor a reload finds it
        import grading.reference.tp_communications as reference
        importlib.reload(reference)
        reloaded = 'reloaded'
    except Exception as exc:
        reloaded = type(exc).__name__
    try:
        import planted
        reloaded += ' planted'
    except ImportError:
        pass
    return (sorted(n for n in os.listdir({REPO!r}) if not n.startswith('.')), os.listdir({REPO + '/grading'!r}),
            reloaded, os.path.exists({str(tmp_path / 'gradebook.db')!r}), dist.get_world_size(),
            open('/proc/self/status').read().split('CapEff:')[1].split()[0])
print(labutils.launch(look, 2, backend='gloo', timeout=60)[1])
"""
    env = dict(os.environ, LABUTILS_RANK_WRAPPER=__import__("json").dumps(wrapper), TMPDIR=str(work))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(['grading', 'labutils'], [], 'ModuleNotFoundError', False, 2, '0000000000000000')"
    assert [os.listdir(staging_folder(str(work)) + "/" + name) for name in os.listdir(staging_folder(str(work)))] == [[]]


def test_no_capability_inside_and_the_address_space_cap_cannot_be_raised(tmp_path):
    done = _run_inside(_spec(tmp_path), """
import resource
print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
try:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print('raised')
except (ValueError, OSError):
    print('kept')
""")
    assert done.stdout.split() == ["0000000000000000", "kept"], done.stderr


def test_a_course_under_a_bound_system_folder_is_covered(tmp_path, monkeypatch):
    environment = tmp_path / "env"
    (environment / "course" / "grading").mkdir(parents=True)
    (environment / "course" / "grading" / "secret.py").write_text("ANSWER = 42")
    (environment / "course" / "labutils").mkdir()
    python_paths = sandbox.python_paths
    monkeypatch.setattr(sandbox, "python_paths", lambda: [*python_paths(), str(environment)])
    spec = submission_spec(str(tmp_path / "sandboxes"), "alice", str(environment / "course"), "", 1.0, on_gpu=False)
    spec = SandboxSpec(**{**_spec(tmp_path).__dict__, "readonly": spec.readonly, "hidden": spec.hidden})
    done = _run_inside(spec, f"import os; print(os.listdir({str(environment)!r}), os.listdir({str(environment / 'course')!r}))")
    assert done.stdout.strip() == "['course'] ['labutils']", done.stderr


def test_the_judges_ranks_always_start_from_the_sandboxed_template():
    from grading.autograder.judge_service import judge_environment

    env = judge_environment({"LABUTILS_START_METHOD": "spawn", "PATH": "/usr/bin"})
    assert "LABUTILS_START_METHOD" not in env and env["PATH"] == "/usr/bin"


def _installed_course(site: Path) -> Path:
    """A full copy of the grader where ``pip install .`` would put it (a site-packages folder)."""
    shutil.copytree(Path(REPO) / "grading", site / "grading", ignore=shutil.ignore_patterns("__pycache__"))
    return site / "grading"


def test_the_judges_ranks_find_nothing_of_a_grader_installed_as_a_package(tmp_path, monkeypatch):
    from grading.autograder.sandbox import judge_rank_wrapper

    environment = tmp_path / "env"  # shown in the sandbox, as the interpreter's environment is
    installed = _installed_course(environment / "site")
    python_paths = sandbox.python_paths
    monkeypatch.setattr(sandbox, "python_paths", lambda: [*python_paths(), str(environment)])
    monkeypatch.syspath_prepend(str(environment / "site"))
    work = tmp_path / "ranks"
    work.mkdir()
    wrapper = judge_rank_wrapper(find_bwrap(), REPO, str(work), 2.0, on_gpu=False)
    code = f"""
import os, labutils
def look():
    try:
        import grading.reference.tp_communications
        found = 'imported'
    except ImportError as exc:
        found = type(exc).__name__
    return found, os.listdir({str(installed)!r})
print(labutils.launch(look, 2, backend='gloo', timeout=60)[1])
"""
    env = dict(os.environ, LABUTILS_RANK_WRAPPER=__import__("json").dumps(wrapper), TMPDIR=str(work),
               PYTHONPATH=str(environment / "site"))  # the installed copy first on the ranks' path
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('ModuleNotFoundError', [])"
    assert (installed / "reference").is_dir(), "the sandbox emptied a folder outside it"


def test_a_kernel_finds_nothing_of_a_grader_installed_as_a_package(tmp_path, monkeypatch):
    environment = tmp_path / "env"
    installed = _installed_course(environment / "site")
    python_paths = sandbox.python_paths
    monkeypatch.setattr(sandbox, "python_paths", lambda: [*python_paths(), str(environment)])
    monkeypatch.syspath_prepend(str(environment / "site"))
    spec = submission_spec(str(tmp_path / "sandboxes"), "alice", REPO, "", 1.0, on_gpu=False)
    spec = SandboxSpec(**{**_spec(tmp_path).__dict__, "hidden": spec.hidden})
    done = _run_inside(spec, f"""
import os, sys
sys.path.insert(0, {str(environment / 'site')!r})
try:
    import grading.reference.tp_communications
    print('imported', os.listdir({str(installed)!r}))
except ImportError as exc:
    print(type(exc).__name__, os.listdir({str(installed)!r}))
""")
    assert done.stdout.strip() == "ModuleNotFoundError []", done.stderr
