"""The memory cgroup that caps a grading worker's sandboxes where RLIMIT_AS cannot (a GPU node):
shared memory counts, the out-of-memory killer stops the hog inside and nothing outside, and
both the kernel's sandbox and the judge's ranks join it before bwrap starts."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.autograder.memory_cgroup import CgroupUnavailable, MemoryCgroup, join_command
from grading.autograder.sandbox import (SandboxSpec, find_bwrap, judge_rank_wrapper, sandbox_command,
                                        submission_spec)

#: Maps 1 GiB of anonymous shared memory (RLIMIT_DATA does not count it) and touches every page.
SHARED_HOG = ("import mmap\nregion = mmap.mmap(-1, 2**30, flags=mmap.MAP_SHARED)\n"
              "for offset in range(0, 2**30, 2**20):\n    region[offset:offset + 2**20] = bytes(2**20)\n"
              "print('survived')")
#: The same with 2 GiB: past a 1.5 GiB cgroup on its own, whatever the other ranks hold meanwhile.
RANK_HOG = SHARED_HOG.replace("2**30", "2 * 2**30")


@pytest.fixture
def cgroup():
    try:
        made = MemoryCgroup.create(f"course-grade-test-{os.getpid()}", 256 * 2**20)
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    yield made
    made.remove()
    assert not os.path.exists(made.folder)


def _bwrap() -> str:
    from grading.autograder.sandbox import SandboxUnavailable

    try:
        return find_bwrap()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))


def test_shared_memory_past_the_limit_is_killed_inside_the_sandbox_and_counted(cgroup, tmp_path):
    spec = SandboxSpec(workdir=str(tmp_path), scratch_dir=str(tmp_path), runtime_dir=str(tmp_path),
                       cgroup_procs=cgroup.procs)
    done = subprocess.run(sandbox_command(_bwrap(), spec, [sys.executable, "-c", SHARED_HOG], {}),
                          capture_output=True, text=True, timeout=60)
    assert "survived" not in done.stdout and done.returncode != 0
    assert cgroup.out_of_memory_kills() >= 1
    small = subprocess.run(sandbox_command(_bwrap(), spec, [sys.executable, "-c", "print(sum(range(10)))"], {}),
                           capture_output=True, text=True, timeout=60)
    assert small.stdout.strip() == "45"  # the cap stops the hog, not the next process


def test_a_process_left_inside_is_killed_when_the_cgroup_is_removed():
    try:
        made = MemoryCgroup.create(f"course-grade-left-{os.getpid()}", 2**30)
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    left = subprocess.Popen(join_command(made.procs, [sys.executable, "-c", "import time; time.sleep(60)"]))
    for _ in range(100):
        if left.pid in made.pids():
            break
        time.sleep(0.02)
    assert left.pid in made.pids()
    made.remove()
    assert left.wait(timeout=10) == -9 and not os.path.exists(made.folder)


def test_a_cgroup_is_found_again_from_its_procs_file():
    try:
        made = MemoryCgroup.create(f"course-grade-again-{os.getpid()}", 3 * 2**30)
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    try:
        again = MemoryCgroup.of_procs(made.procs)
        assert (again.folder, again.version, again.limit_bytes) == (made.folder, made.version, 3 * 2**30)
    finally:
        made.remove()


def test_with_a_cgroup_no_address_space_cap_is_set_and_every_sandbox_joins_it(tmp_path):
    procs = "/sys/fs/cgroup/memory/x/cgroup.procs"
    spec = submission_spec(str(tmp_path), "alice", REPO, "", memory_limit_gib=4, on_gpu=False, cgroup_procs=procs)
    assert spec.memory_limit_bytes == 0 and spec.cgroup_procs == procs
    assert sandbox_command("/usr/bin/bwrap", spec, ["python"], {})[:4] == ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                                                                          procs]
    capped = submission_spec(str(tmp_path), "bob", REPO, "", memory_limit_gib=4, on_gpu=False)
    assert capped.memory_limit_bytes == 4 * 2**30 and "prlimit" in sandbox_command("/usr/bin/bwrap", capped, ["python"], {})
    wrapper = judge_rank_wrapper("/usr/bin/bwrap", REPO, str(tmp_path), 4, on_gpu=False, cgroup_procs=procs)
    assert procs in wrapper and "prlimit" not in wrapper
    assert "prlimit" in judge_rank_wrapper("/usr/bin/bwrap", REPO, str(tmp_path), 4, on_gpu=False)


def _cgroup_state(made: MemoryCgroup) -> str:
    """The cgroup's counters of limits met and kills, for a failure's message."""
    found = []
    for name in ("memory.events", "memory.oom_control", "memory.failcnt", "memory.max_usage_in_bytes"):
        try:
            with open(os.path.join(made.folder, name)) as f:
                found.append(f"{name}: {' '.join(f.read().split())}")
        except OSError:
            pass
    return "\n" + "\n".join(found)


def test_the_judges_ranks_run_in_the_cgroup_and_a_hog_among_them_is_killed(tmp_path):
    """Ranks started through the judge's sandboxed rank template, in a 1.5 GiB cgroup without any
    RLIMIT_AS: an ordinary call runs; a rank that fills shared memory dies of the cap, and the
    judge's launch says so (not only "SIGKILL")."""
    _bwrap()
    try:
        made = MemoryCgroup.create(f"course-grade-ranks-{os.getpid()}", 3 * 2**29)
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})
        from grading.judge.server import sandbox_ranks
        sandbox_ranks({str(tmp_path)!r}, "gloo", 0, {made.procs!r})
        import labutils
        from labutils.ranks.errors import RankDiedError

        def in_cgroup():
            return open("/proc/self/cgroup").read()

        def hog():
            exec({RANK_HOG!r})

        print(all({os.path.basename(made.folder)!r} in text for text in labutils.launch(in_cgroup, 2, backend="gloo")))
        from grading.judge.perrank import launch_each
        try:
            launch_each(hog, [(), ()], backend="gloo", timeout=150)
            print("no rank died")
        except RankDiedError as exc:
            print("died:", exc)
        except Exception as exc:
            print("other:", type(exc).__name__, exc)
    """)
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
        lines = done.stdout.splitlines()
        assert lines[:1] == ["True"] and len(lines) > 1, done.stdout + done.stderr[-2000:]
        # the kernel's out-of-memory killer picks a hog rank or, now and then, their rank template:
        # either way the launch says the memory cap stopped the ranks
        assert lines[1].startswith("died: ") and "stopped at the memory cap (1.5 GiB" in lines[1], \
            done.stdout + done.stderr[-2000:] + _cgroup_state(made)
        assert made.out_of_memory_kills() >= 1
    finally:
        made.remove()
