"""labutils.launch and labutils.Pool on gloo/CPU: results, environment, and every failure mode."""
from __future__ import annotations

import ast
import linecache
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist
from free_ports import free_port

import labutils
from labutils import RankDiedError, RankError, RankTimeoutError
from labutils.devices.backend import BackendUnavailableError, visible_gpu_count
from labutils.ranks._launch_folder import sweep_abandoned

from proctree import describe, descendants, labutils_processes_under, rank_processes, wait_until_gone

pytestmark = pytest.mark.usefixtures("no_leftover_processes")


_cells = iter(range(1, 10_000))


def _notebook_style(source: str, name: str):
    """Define code as IPython does for a cell: in ``__main__`` (so pickled by value), its
    source kept only in linecache under a name with no file behind it."""
    source = textwrap.dedent(source)
    filename = f"<ipython-input-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def assert_no_rank_left():
    """After a failure the pool has killed its ranks: none may linger until the next call."""
    left = wait_until_gone(rank_processes(labutils_processes_under(os.getpid())), timeout_s=5.0)
    assert not left, f"ranks left after the failure:\n{describe(left)}"


# ----- results and environment --------------------------------------------------------

def test_launch_returns_per_rank_results_in_rank_order():
    def work(offset):
        t = torch.tensor([float(dist.get_rank() + offset)])
        dist.all_reduce(t)
        return dist.get_rank(), t

    results = labutils.launch(work, 4, 10)
    assert [r for r, _ in results] == [0, 1, 2, 3]
    for _, t in results:
        assert t.device.type == "cpu"
        assert t.item() == 0 + 1 + 2 + 3 + 4 * 10


def _listeners_on_the_store_port() -> list:
    """(table, local address in /proc/net's hex) of every listening socket on the process group's store port."""
    port, found = int(os.environ["MASTER_PORT"]), []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as f:
            for line in list(f)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:
                    found.append((table, address))
    return found


def test_the_ranks_store_listens_on_the_loopback_interface_alone():
    """Not on every interface (another machine could join the group), nor on IPv6, whose peers its
    server would name by a reverse DNS query (a slow name server held a launch for its 5 s timeout)."""
    assert labutils.launch(_listeners_on_the_store_port, 2, backend="gloo")[0] == [("tcp", "0100007F")]


def test_run_each_gives_every_rank_its_own_arguments_only():
    def work(mine):
        t = torch.tensor([float(mine)])
        dist.all_reduce(t)
        return dist.get_rank(), mine, t.item()

    with labutils.Pool(2, backend="gloo") as pool:
        assert pool.run_each(work, [(3,), (4,)]) == [(0, 3, 7.0), (1, 4, 7.0)]
        with pytest.raises(ValueError, match="one argument tuple per rank"):
            pool.run_each(work, [(3,)])


def test_cell_defined_functions_and_classes_travel_by_value():
    make = _notebook_style(
        """
        import torch
        import torch.distributed as dist

        class Accumulator:
            def __init__(self, start):
                self.value = torch.tensor([start])
            def add_everyones(self):
                dist.all_reduce(self.value)
                return self

        def use_class(start):
            return Accumulator(start).add_everyones().value.item()
        """,
        "use_class",
    )
    assert labutils.launch(make, 2, 3.0) == [6.0, 6.0]


def test_each_rank_gets_its_environment_and_a_fair_thread_count():
    def env():
        return {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}, \
            torch.get_num_threads(), str(labutils.rank.device())

    results = labutils.launch(env, 2)
    cores = len(os.sched_getaffinity(0))
    for r, (variables, threads, device) in enumerate(results):
        assert variables["RANK"] == str(r) and variables["LOCAL_RANK"] == str(r)
        assert variables["WORLD_SIZE"] == "2" and variables["MASTER_ADDR"] == "127.0.0.1"
        assert 1024 <= int(variables["MASTER_PORT"]) < 65536
        assert threads == max(1, cores // 2)
        assert device == "cpu"
    assert results[0][0]["MASTER_PORT"] == results[1][0]["MASTER_PORT"]


def test_ranks_see_the_environment_as_it_is_at_launch(monkeypatch):
    def read(name):
        return os.environ.get(name)

    assert labutils.launch(read, 2, "LABUTILS_TEST_SETTING") == [None, None]  # the template is up now
    monkeypatch.setenv("LABUTILS_TEST_SETTING", "set in a cell")  # as a student sets NCCL_DEBUG
    assert labutils.launch(read, 2, "LABUTILS_TEST_SETTING") == ["set in a cell"] * 2


def test_torch_distributed_debug_set_at_launch_takes_effect(monkeypatch):
    def debug_level():
        import torch.distributed as dist
        return str(dist.get_debug_level())

    assert labutils.launch(debug_level, 2) == ["DebugLevel.OFF"] * 2  # the template is up now
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")  # read by torch at import: long past in the template
    assert labutils.launch(debug_level, 2) == ["DebugLevel.DETAIL"] * 2


def test_tmpdir_set_after_the_template_imported_torchs_compiler_reaches_the_ranks(tmp_path):
    """torch._dynamo's import (an eager template's) fixes ``tempfile``'s folder in the template; each rank
    reads TMPDIR again, as the caller has it at launch."""
    out = _run_fresh("""
        import os, labutils
        def folder():
            import tempfile
            return tempfile.gettempdir()
        before = labutils.launch(folder, 2)
        os.environ["TMPDIR"] = os.environ["FOLDER_FOR_THE_RANKS"]
        print(repr((before, labutils.launch(folder, 2))))
    """, LABUTILS_EAGER_IMPORTS="1", FOLDER_FOR_THE_RANKS=str(tmp_path))
    before, after = ast.literal_eval(out.strip().splitlines()[-1])
    assert after == [str(tmp_path)] * 2 and before[0] != str(tmp_path)


def test_results_come_back_detached_in_any_container():
    make = _notebook_style(
        """
        import collections, dataclasses
        import torch

        @dataclasses.dataclass
        class Step:
            loss: torch.Tensor

        def results():
            layer = torch.nn.Linear(2, 2)
            loss = layer(torch.ones(2)).sum()  # not a leaf: needs detaching to travel
            return Step(loss), collections.OrderedDict(loss=loss), layer.state_dict(), layer
        """,
        "results",
    )
    step, ordered, state, layer = labutils.launch(make, 1)[0]
    assert not step.loss.requires_grad and step.loss.grad_fn is None
    assert not ordered["loss"].requires_grad and type(ordered).__name__ == "OrderedDict"
    assert set(state) == {"weight", "bias"}
    assert isinstance(layer.weight, torch.nn.Parameter) and layer.weight.requires_grad
    assert all(t.device.type == "cpu" for t in (step.loss, ordered["loss"], *state.values(), layer.weight))


def test_launch_after_a_parallel_torch_op_in_the_caller():
    # A fork of a process that ran a parallel op hangs on its own first parallel op: the
    # caller is never forked (ranks are forks of the template, or fresh interpreters).
    a = torch.randn(1024, 1024)
    (a @ a).sum()

    def parallel_op_and_origin():
        b = torch.randn(512, 512)
        (b @ b).sum()  # with every core of the machine, as the only rank
        with open("/proc/self/cmdline", "rb") as f:
            return torch.get_num_threads(), f.read().replace(b"\0", b" ").decode()

    [(threads, command)] = labutils.launch(parallel_op_and_origin, 1, timeout=30)
    assert threads == len(os.sched_getaffinity(0))
    assert "labutils.ranks._template" in command or "labutils.ranks._worker" in command


def test_pool_keeps_ranks_and_state_between_calls():
    def remember(value):
        import builtins

        builtins._labutils_test_value = value
        return os.getpid()

    def recall():
        import builtins

        return builtins._labutils_test_value, os.getpid()

    with labutils.Pool(2) as pool:
        pids = pool.run(remember, "kept")
        assert pool.run(recall) == [("kept", pids[0]), ("kept", pids[1])]
        assert pool.pids() == pids


def test_rank_output_is_prefixed_and_separated(capsys):
    def speak():
        print(f"hello from {dist.get_rank()}")
        print("careful", file=sys.stderr)
        os.write(1, b"from C level\n")

    labutils.launch(speak, 2)
    out, err = capsys.readouterr()
    for r in (0, 1):
        assert f"[rank {r}] hello from {r}" in out
        assert f"[rank {r}] from C level" in out
        assert f"[rank {r}] careful" in err
    assert "careful" not in out


def test_exec_cell_keeps_a_namespace_per_rank(capsys):
    with labutils.Pool(2) as pool:
        pool.exec_cell("x = torch.ones(1) * rank\ndist.all_reduce(x)")
        pool.exec_cell("x.item() + rank")
    out = capsys.readouterr().out
    assert "[rank 0] 1.0" in out and "[rank 1] 2.0" in out


# ----- failures --------------------------------------------------------------------

def test_exception_on_one_rank_is_reraised_quickly_with_its_traceback():
    def fails_on_rank_1():
        if dist.get_rank() == 1:
            raise ValueError("bad shape on this rank", time.time())  # when it was raised, in args[1]
        dist.all_reduce(torch.ones(1))  # the others wait for rank 1 forever

    with labutils.Pool(4) as pool:
        pool.run(os.getpid)  # ranks up: what is timed is the failure, not the start
        with pytest.raises(ValueError, match="bad shape on this rank") as info:
            pool.run(fails_on_rank_1, timeout=60)
        assert time.time() - info.value.args[1] < 20  # long before the 60 s deadline, on a busy machine too
        assert info.value.rank == 1
        assert "fails_on_rank_1" in info.value.remote_traceback  # remote traceback, with source lines
        assert 'raise ValueError("bad shape on this rank", time.time())' in info.value.remote_traceback
        assert "on rank 1 of 4" in str(info.value.__cause__)
        assert any("rank 1 of 4" in note for note in info.value.__notes__)
        assert_no_rank_left()
        assert pool.run(dist.get_rank) == [0, 1, 2, 3]


def test_exception_that_cannot_be_rebuilt_becomes_rank_error():
    def raises_unpicklable():
        class Local(Exception):
            def __reduce__(self):
                raise TypeError("no pickling")

        raise Local("custom failure")

    with pytest.raises(RankError, match="custom failure") as info:
        labutils.launch(raises_unpicklable, 2)
    assert info.value.rank == 0


def test_magic_timeout_applies_to_its_own_cell_only():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "labutils")
    try:
        shell.run_cell_magic("distributed", "-n 2", "import time")  # ranks up: the deadline times the cell alone
        with pytest.raises(RankTimeoutError, match=r"time\.sleep\(30\)"):  # the stuck line of the cell
            shell.run_cell_magic("distributed", "-n 2 --timeout 3", "time.sleep(30)")
        shell.run_cell_magic("distributed", "-n 2", "import time\ntime.sleep(1.5)")  # the default deadline again
        with pytest.raises(ValueError, match="world_size must be at least 1"):
            shell.run_cell_magic("distributed", "-n 0", "pass")
        assert shell.magics_manager.registry["DistributedMagics"].pool.world_size == 2  # kept
    finally:
        shell.run_line_magic("distributed_shutdown", "")
        InteractiveShell.clear_instance()


def test_same_error_on_every_rank_keeps_the_pool(capsys):
    with labutils.Pool(2) as pool:
        pids = pool.pids() or pool.run(os.getpid)
        with pytest.raises(NameError) as info:
            pool.exec_cell("undefined_name + 1")
        assert any("rank 1 also raised this error" in n for n in info.value.__notes__)
        assert pool.run(os.getpid) == pids  # nothing was restarted


def test_the_first_error_is_raised_and_later_ones_are_listed():
    def cause_then_consequences():
        if dist.get_rank() == 2:
            raise KeyError("the cause")
        time.sleep(0.2)
        raise RuntimeError("a consequence")

    with labutils.Pool(3) as pool:
        with pytest.raises(KeyError, match="the cause") as info:
            pool.run(cause_then_consequences)
    assert info.value.rank == 2
    assert "[labutils] rank 0 then raised RuntimeError: a consequence" in info.value.__notes__
    assert "[labutils] rank 1 then raised RuntimeError: a consequence" in info.value.__notes__


def test_sys_exit_on_a_rank_does_not_end_the_caller():
    def leave():
        if dist.get_rank() == 1:
            sys.exit(3)

    with labutils.Pool(2) as pool:
        with pytest.raises(RankError, match="rank 1 raised SystemExit: 3") as info:
            pool.run(leave)
        assert not isinstance(info.value, SystemExit) and info.value.rank == 1
        assert pool.run(dist.get_rank) == [0, 1]


@pytest.mark.parametrize(
    "how, exitcode, sig",
    [
        ("os._exit(3)", 3, None),
        ("os.kill(os.getpid(), signal.SIGKILL)", None, signal.SIGKILL),
        ("ctypes.string_at(0)", None, signal.SIGSEGV),
    ],
)
def test_a_rank_that_dies_is_reported_with_its_exit_code_or_signal(how, exitcode, sig):
    fn = _notebook_style(
        f"""
        import ctypes, os, signal
        import torch, torch.distributed as dist
        def die():
            if dist.get_rank() == 1:
                {how}
            dist.all_reduce(torch.ones(1))
        """,
        "die",
    )
    with labutils.Pool(3) as pool:
        pool.run(os.getpid)
        start = time.monotonic()
        with pytest.raises(RankDiedError) as info:
            pool.run(fn, timeout=60)
        assert time.monotonic() - start < 30  # as soon as it died, long before the 60 s deadline
        assert info.value.rank == 1
        assert info.value.exitcode == exitcode and info.value.signal == sig
        assert "rank 1 died" in str(info.value)
        assert_no_rank_left()
        assert pool.run(dist.get_world_size) == [3, 3, 3]  # restarted by itself


def test_a_rank_killed_between_calls_is_replaced_before_the_next_call(capsys):
    with labutils.Pool(3) as pool:
        pids = pool.run(os.getpid)
        os.kill(pids[2], signal.SIGKILL)
        deadline = time.monotonic() + 3.0
        while os.path.exists(f"/proc/{pids[2]}") and time.monotonic() < deadline:
            time.sleep(0.02)  # until reaped: a zombie leader may still have threads holding its sockets
        assert pool.run(dist.get_rank) == [0, 1, 2]
        assert pool.restarts == 1 and not set(pool.pids()) & set(pids)
    assert "rank 2 had ended (killed by signal SIGKILL); starting 3 fresh ranks" in capsys.readouterr().out


def test_a_skipped_collective_times_out_naming_the_stuck_ranks():
    def skip_on_rank_0():
        if dist.get_rank() != 0:
            dist.all_reduce(torch.ones(1))

    with labutils.Pool(3) as pool:
        pool.run(os.getpid)
        start = time.monotonic()
        with pytest.raises(RankTimeoutError) as info:
            pool.run(skip_on_rank_0, timeout=2)
        elapsed = time.monotonic() - start
        assert_no_rank_left()
    assert isinstance(info.value, TimeoutError)
    assert 2.0 <= elapsed < 2.0 + 20  # the deadline, then reading stacks and the kill (slower on a busy machine)
    assert info.value.ranks == [1, 2]
    for r in (1, 2):
        assert "skip_on_rank_0" in info.value.stacks[r]
        assert "all_reduce" in info.value.stacks[r]
    assert "ranks 1, 2 did not finish" in str(info.value)


def test_a_rank_spinning_in_python_times_out_with_its_stack():
    spin = _notebook_style(
        """
        import torch.distributed as dist
        def spin():
            while dist.get_rank() == 1:
                pass
        """,
        "spin",
    )
    with labutils.Pool(2) as pool:
        pool.run(os.getpid)  # ranks up: rank 0's return must not race their start
        with pytest.raises(RankTimeoutError) as info:
            pool.run(spin, timeout=3)
        assert info.value.ranks == [1]
        assert "in spin" in info.value.stacks[1]
        assert "while dist.get_rank() == 1:" in info.value.stacks[1]
        assert_no_rank_left()
        assert pool.run(dist.get_rank) == [0, 1]


@pytest.fixture
def interrupt_raises():
    """Ctrl-C raises KeyboardInterrupt in this process, as in a notebook's kernel, also when the test
    run was started in the background by a script (``make test &``): such a shell starts its
    background jobs with SIGINT ignored, and Python keeps a SIGINT it inherits ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("interrupt_raises")
def test_interrupt_stops_every_rank_politely_then_by_force():
    """Ctrl-C: the ranks get 2 s to stop, then are killed; the bound allows a busy machine 8 s more."""
    with labutils.Pool(2) as pool:
        pids = pool.run(os.getpid)
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt, match="labutils stopped all 2 ranks"):
            pool.run(time.sleep, 30)
        assert not wait_until_gone(pids, timeout_s=10.0 - (time.monotonic() - start))
        assert len(pool.run(os.getpid)) == 2


@pytest.mark.usefixtures("interrupt_raises")
def test_interrupt_while_the_first_launch_starts_leaves_nothing_behind():
    labutils.shutdown()  # no template yet: the interrupt lands while it imports torch
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        labutils.launch(dist.get_rank, 2)
    timer.join()
    assert not wait_until_gone(descendants(), timeout_s=10.0)  # gone at once on an idle machine
    assert labutils.launch(dist.get_rank, 2) == [0, 1]


@pytest.mark.parametrize("start_method", ["template", pytest.param("spawn", marks=pytest.mark.slow)])
def test_ranks_exit_when_their_caller_is_killed(tmp_path, start_method):
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(
        """
        import os, sys, time, labutils
        pool = labutils.Pool(2)
        print(*pool.run(os.getpid), flush=True)
        time.sleep(600)
        """
    ))
    scratch = tmp_path / "tmp"   # the caller's TMPDIR, where it makes the launch's folder
    scratch.mkdir()
    env = dict(os.environ, LABUTILS_START_METHOD=start_method, TMPDIR=str(scratch))
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = caller.stdout.readline()
        while line.startswith("labutils:"):  # the backend announcement
            line = caller.stdout.readline()
        rank_pids = [int(p) for p in line.split()]
        family = descendants(caller.pid)
        assert set(rank_pids) <= family
        assert len(list(scratch.glob("labutils-*/ranks.sock"))) == 1
    finally:
        caller.kill()
        caller.wait()
    assert not wait_until_gone(family, timeout_s=5.0)
    # The ranks remove the launch's folder as they exit, unless the template's kill (it kills its ranks
    # when the caller goes) comes first: then the folder's lock is free and the next start sweeps it.
    sweep_abandoned(str(scratch), min_age_s=0)
    assert not list(scratch.glob("labutils-*")), "the launch's folder is left, and still locked"


def test_two_pools_at_once_never_collide():
    def port_and_sum():
        t = torch.ones(1)
        dist.all_reduce(t)
        return int(os.environ["MASTER_PORT"]), t.item()

    with labutils.Pool(2) as a, labutils.Pool(2) as b:
        ra, rb = a.run(port_and_sum), b.run(port_and_sum)
    assert [s for _, s in ra] == [2.0, 2.0] and [s for _, s in rb] == [2.0, 2.0]
    assert ra[0][0] != rb[0][0]


# ----- bad arguments: a clear error, and nothing started ---------------------------------

@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: labutils.launch(print, 0), ValueError, "world_size must be at least 1"),
        (lambda: labutils.launch(print, "2"), TypeError, "world_size must be an int"),
        (lambda: labutils.launch(print, 2, backend="mpi"), ValueError, "unknown backend 'mpi'"),
        (lambda: labutils.launch("print", 2), TypeError, "fn must be callable"),
        (lambda: labutils.launch(print, 2, threading.Lock()), TypeError, "argument 0 .* cannot be sent"),
        (lambda: labutils.launch(print, 2, file=threading.Lock()), TypeError, "keyword argument 'file' .* cannot be sent"),
        (lambda: labutils.Pool(2).run(print, threading.Lock()), TypeError, "argument 0 .* cannot be sent"),
        (lambda: labutils.launch(print, 2, timeout=-1), ValueError, "timeout must be a positive"),
        (lambda: labutils.launch(print, visible_gpu_count() + 1, backend="nccl"), BackendUnavailableError,
         "needs one GPU per rank"),
        (lambda: labutils.Pool(0), ValueError, "world_size must be at least 1"),
        (lambda: labutils.Pool(2, backend="MPI "), ValueError, "unknown backend"),
    ],
)
def test_bad_arguments_fail_before_anything_starts(call, error, message):
    before = descendants()
    with pytest.raises(error, match=message):
        call()
    assert descendants() - before == set()


# ----- other ways to start ranks ---------------------------------------------------------

@pytest.mark.slow
def test_spawn_start_method_works_without_fork(tmp_path):
    env = dict(os.environ, LABUTILS_START_METHOD="spawn")
    code = "import labutils, rankfns; print(labutils.launch(rankfns.rank_sum, 2, 5))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=os.path.dirname(__file__), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'sum': 5.0" in out.stdout


@pytest.mark.slow
def test_torchrun_two_nodes_on_localhost(tmp_path):
    port = free_port()
    output = tmp_path / "results.pt"
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "labutils-test",
              "--log-dir", str(tmp_path / "torchrun-logs"),  # else torchrun makes /tmp/torchelastic_* and leaves it
              "-m", "labutils", "run", "rankfns:rank_sum", "--args", "[3]", "--backend", "gloo"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    agents = [
        subprocess.Popen(torchrun + common + (["--output", str(output)] if i == 0 else []),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    try:
        logs = [a.communicate(timeout=180)[0] for a in agents]
    finally:
        for a in agents:
            a.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(logs)
    results = torch.load(output)
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["sum"] == 3.0 and r["world_size"] == 2 for r in results)


def test_pool_recovers_when_the_template_is_killed():
    from labutils.ranks import _starters

    with labutils.Pool(2) as pool:
        pool.run(os.getpid)
        template = _starters.current_starter()
        if not isinstance(template, _starters.TemplateStarter):
            pytest.skip("ranks are not forked from a template here")
        os.kill(template.pid, signal.SIGKILL)
        template._process.wait()
        assert pool.run(dist.get_world_size) == [2, 2]


def test_two_processes_launching_at_once_never_collide(tmp_path):
    code = ("import labutils, rankfns\n"
            "for _ in range(3):\n"
            "    assert [r['sum'] for r in labutils.launch(rankfns.rank_sum, 2, 1)] == [1.0, 1.0]\n"
            "print('ok')\n")
    notebooks = [subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(__file__),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in notebooks]
    assert [p.returncode for p in notebooks] == [0, 0], outputs
    assert all(out.strip().endswith("ok") for out in outputs)


def test_a_rank_that_dies_before_connecting_fails_the_start_by_name(monkeypatch):
    from labutils.ranks import _starters

    def spawn_ranks_that_exit_at_once(self, specs):
        pids = []
        for _ in specs:
            process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
            self._processes[process.pid] = process
            threading.Thread(target=self._watch, args=(process,), daemon=True).start()
            pids.append(process.pid)
        return pids

    monkeypatch.setenv("LABUTILS_START_METHOD", "spawn")
    monkeypatch.setattr(_starters.SpawnStarter, "spawn", spawn_ranks_that_exit_at_once)
    _starters.close_starter()
    try:
        pool = labutils.Pool(2, backend="gloo", timeout=30)
        start = time.monotonic()
        with pytest.raises(RankDiedError, match="died while starting: exited with code 3") as info:
            pool.start()
        assert time.monotonic() - start < 20 and info.value.exitcode == 3
        assert not pool.started
    finally:
        _starters.close_starter()


# ----- the template's start -----------------------------------------------------------------

def _run_fresh(code: str, **env) -> str:
    """Run ``code`` in a fresh interpreter (the launcher's process-wide state is per process); its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **env))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_templates_hello_never_makes_the_caller_import_torch():
    out = _run_fresh("""
        import sys
        from labutils.ranks import _starters
        hello = _starters.get_starter().hello
        assert type(hello.torch_version) is str and hello.torch_version.startswith("2.")
        assert hello.started_at <= hello.imported_at
        print("torch" in sys.modules)
    """)
    assert out.split() == ["False"]


def test_an_eager_template_forks_ranks_with_the_optimizers_imports_made_and_frozen():
    """``LABUTILS_EAGER_IMPORTS=1`` (the judge's): a launch made the moment the template says hello
    finds torch._dynamo imported and frozen, so no rank imports it or walks its objects."""
    out = _run_fresh("import labutils, rankfns; print(labutils.launch(rankfns.objects_after_a_first_optimizer, 2))",
                     LABUTILS_EAGER_IMPORTS="1", PYTHONPATH=os.path.dirname(__file__))
    for imported, listed in ast.literal_eval(out.strip().splitlines()[-1]):
        assert imported and listed < 20_000, (imported, listed)  # torch._dynamo alone makes about 120,000


def test_ranks_collect_their_garbage_though_the_template_imported_with_the_collector_off():
    """The template imports with garbage collection off (``_template._no_collections``) and freezes
    what it imported: each rank has the collector on, the template's objects frozen, and a cycle it
    makes and drops is collected."""
    def collector_state():
        import gc
        import weakref

        class Cycle:
            pass

        dropped = Cycle()
        dropped.me = dropped
        gone = weakref.ref(dropped)
        del dropped
        gc.collect()
        return gc.isenabled(), gc.get_freeze_count() > 100_000, gone() is None

    assert labutils.launch(collector_state, 2) == [(True, True, True)] * 2


def test_a_template_told_never_to_make_the_optimizers_imports_leaves_them_to_the_ranks_that_need_them():
    """``LABUTILS_EAGER_IMPORTS=0`` (the judge of a lab whose ranks build no optimizer): the template
    idles well past its idle moment and still has not imported torch._dynamo; a rank that builds an
    optimizer imports it itself, and works."""
    out = _run_fresh("""
        import time, labutils, rankfns
        from labutils.ranks import _starters, _template
        _starters.get_starter()
        time.sleep(5 * _template.IDLE_AFTER_S)
        print(labutils.launch(rankfns.objects_after_a_first_optimizer, 2))
    """, LABUTILS_EAGER_IMPORTS="0", PYTHONPATH=os.path.dirname(__file__))
    assert [imported for imported, listed in ast.literal_eval(out.strip().splitlines()[-1])] == [False, False]


def test_importing_labutils_in_ipython_starts_the_template_the_first_launch_uses():
    out = _run_fresh("""
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance()
        import labutils
        from labutils.ranks import _starters
        early = _starters.current_starter()
        import torch.distributed as dist
        print(type(early).__name__, labutils.launch(dist.get_world_size, 2) == [2, 2],
              _starters.current_starter() is early)
    """)
    assert out.split()[-3:] == ["TemplateStarter", "True", "True"]


def test_importing_labutils_outside_ipython_or_with_prestart_off_starts_nothing():
    out = _run_fresh("import labutils; from labutils.ranks import _starters; print(_starters.current_starter())")
    assert out.split() == ["None"]
    out = _run_fresh("""
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance()
        import labutils
        print(labutils.ranks._starters.current_starter())
    """, LABUTILS_PRESTART="0")
    assert out.split() == ["None"]


def test_an_early_template_gives_way_to_the_start_method_and_wrapper_asked_for_at_launch():
    out = _run_fresh("""
        import json, os
        import torch.distributed as dist
        import labutils
        from labutils.ranks import _starters
        _starters.prestart()
        early = _starters.current_starter()
        os.environ["LABUTILS_START_METHOD"] = "spawn"
        assert labutils.launch(dist.get_rank, 2) == [0, 1]
        print(type(_starters.current_starter()).__name__, early.alive())
        os.environ["LABUTILS_START_METHOD"] = "template"
        _starters.close_starter()
        _starters.prestart()
        early = _starters.current_starter()
        os.environ["LABUTILS_RANK_WRAPPER"] = json.dumps(["env"])
        assert early.stale()
        assert labutils.launch(dist.get_rank, 2) == [0, 1]
        print(_starters.current_starter() is not early, _starters.current_starter().wrapper)
    """)
    assert out.split()[-4:] == ["SpawnStarter", "False", "True", "['env']"]


def test_stopping_a_template_still_importing_torch_leaves_no_process():
    from labutils.ranks import _starters

    labutils.shutdown()
    _starters.prestart()
    starter = _starters.current_starter()
    assert starter.hello is None  # never waited for: closing it does not wait for torch either
    _starters.close_starter()
    assert not starter.alive()
    assert not wait_until_gone(descendants(), timeout_s=5.0)


def test_a_pid_the_system_reuses_for_a_new_rank_does_not_carry_the_old_ranks_exit():
    from labutils.ranks import _starters
    from labutils.ranks._messages import RankExited, Spawned

    starter = _starters.TemplateStarter.__new__(_starters.TemplateStarter)
    starter.statuses, starter._pending = {}, []
    starter._book([RankExited(5, 0, None), RankExited(6, 1, None), Spawned([5, 7])])
    assert starter.exit_status(5) is None and starter.exit_status(6) == (1, None)
    starter._book([Spawned([8]), RankExited(8, None, 9)])  # a new rank that died at once
    assert starter.exit_status(8) == (None, 9)
