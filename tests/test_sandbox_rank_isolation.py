"""Each judge's rank alone with its inputs (grading.autograder.rank_isolation, landlock): after
``isolate()`` a rank keeps its links and gloo, and loses every local channel to its siblings: new Unix
sockets (abstract ones too), files in a shared folder, /tmp, /dev/shm, signals to others. Each check
runs in a fresh process (isolation cannot be undone)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from grading.autograder import landlock, rank_isolation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine not in rank_isolation.ARCHES,
                                reason="rank isolation is for Linux on x86_64 and aarch64")

PROBE = textwrap.dedent("""
    import json, os, signal, socket, sys, tempfile
    work = sys.argv[1]
    os.chdir(work)
    os.environ["TMPDIR"] = work
    tempfile.tempdir = None
    with open(os.path.join(work, "stack1.txt"), "w") as f:
        f.write("a sibling's stack")
    ours, theirs = socket.socketpair()  # the rank's link to its parent, made before
    from grading.autograder import landlock, rank_isolation
    if sys.argv[2] == "without-landlock":
        rank_isolation.landlock_restrict = lambda *args, **kwargs: False
    private = rank_isolation.isolate()
    outcome = {}
    def attempt(what, action):
        try:
            action()
            outcome[what] = "allowed"
        except OSError:
            outcome[what] = "refused"
    attempt("read a sibling's stack file", lambda: open(os.path.join(work, "stack1.txt")).read())
    attempt("write the shared folder", lambda: open(os.path.join(work, "mine"), "w").close())
    attempt("abstract unix socket", lambda: socket.socket(socket.AF_UNIX).bind("\\0isolation-test"))
    attempt("socketpair", socket.socketpair)
    attempt("write /dev/shm", lambda: open("/dev/shm/isolation-test", "w").close())
    attempt("signal the parent", lambda: os.kill(os.getppid(), 0))
    attempt("signal itself", lambda: os.kill(os.getpid(), 0))
    attempt("write its own folder", lambda: open(os.path.join(private, "f"), "w").close())
    attempt("tcp on loopback", lambda: socket.create_server(("127.0.0.1", 0)).close())
    attempt("read the standard library", lambda: open(os.__file__).read())
    ours.sendall(b"ping")
    outcome["old link"] = theirs.recv(4).decode()
    outcome["private under scratch"] = os.path.dirname(private) == os.path.realpath(work)
    print(json.dumps(outcome))
""")


def _probe(tmp_path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), mode], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


COMMON = {"read a sibling's stack file": None, "abstract unix socket": "refused", "socketpair": "refused",
          "write /dev/shm": "refused", "signal the parent": "refused", "signal itself": "allowed",
          "tcp on loopback": "allowed", "read the standard library": "allowed", "old link": "ping",
          "write the shared folder": "refused"}


@pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")
def test_with_landlock_a_rank_sees_no_shared_folder_and_writes_only_its_own(tmp_path):
    outcome = _probe(tmp_path, "with-landlock")
    assert outcome == {**COMMON, "read a sibling's stack file": "refused", "write its own folder": "allowed",
                       "private under scratch": True}


def test_without_landlock_the_filter_refuses_every_file_write(tmp_path):
    outcome = _probe(tmp_path, "without-landlock")
    assert outcome == {**COMMON, "read a sibling's stack file": "allowed", "write its own folder": "refused",
                       "private under scratch": True}


def test_the_filter_refuses_foreign_abis_first_and_lets_nccl_keep_unix_sockets():
    machine = os.uname().machine
    program = rank_isolation.filter_program(machine, 1234, landlock=True)
    assert program[0] == (0x20, 0, 0, 4) and program[1][3] == rank_isolation.ARCHES[machine]["audit"]
    assert program[-1] == (0x06, 0, 0, 0x7FFF0000)
    socket_rule = (0x15, 0, 4, rank_isolation.ARCHES[machine]["socket"])
    assert socket_rule in program
    assert socket_rule not in rank_isolation.filter_program(machine, 1234, landlock=True, nccl=True)


LAUNCH = textwrap.dedent("""
    import os, socket, sys, time
    import torch, torch.distributed as dist
    import labutils

    def isolated_rank():
        from grading.autograder.rank_isolation import isolate
        shared = os.getcwd()
        isolate()
        total = torch.ones(3) * (dist.get_rank() + 1)
        dist.all_reduce(total)  # gloo over loopback: the counted channel
        try:
            socket.socket(socket.AF_UNIX).bind(f"\\0isolation-launch-{os.getppid()}")
            abstract = "allowed"
        except OSError:
            abstract = "refused"
        try:
            with open(os.path.join(shared, f"from-{dist.get_rank()}"), "w") as f:
                f.write("x")
            files = "allowed"
        except OSError:
            files = "refused"
        return total.tolist(), abstract, files

    print(labutils.launch(isolated_rank, 2, backend="gloo", timeout=60))
""")


def test_isolated_ranks_of_a_real_launch_still_all_reduce_over_gloo_and_nothing_else(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", LAUNCH], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env=dict(env, PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str([([3.0, 3.0, 3.0], "refused", "refused")] * 2)


def test_a_course_cloned_under_a_hidden_folder_stays_readable_to_the_ranks(tmp_path):
    hidden, kept = tmp_path / "tmp", tmp_path / "tmp" / "course" / ".venv"
    for folder in (kept, hidden / "course" / "grading", hidden / "scratch"):
        folder.mkdir(parents=True)
    roots = landlock.readable_roots([str(hidden)], str(tmp_path), [str(kept)])
    assert str(kept) in roots
    assert not any(root.startswith(str(hidden / "scratch")) or root.startswith(str(hidden / "course" / "grading"))
                   for root in roots), roots
