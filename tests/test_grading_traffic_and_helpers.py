"""Two pieces of the judge: the network traffic of its ranks counted from outside their sandbox
(``grading.judge.loopback``), and a helper module handed in beside the notebook sent to the
ranks by value (``grading.judge.client.helper_modules``)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from grading.judge.loopback import (TRAFFIC_ATOL_BYTES, TRAFFIC_RTOL, LoopbackMeter, loopback_bytes,
                                    process_in_other_namespace, traffic_problem)


def test_traffic_within_the_slack_passes_and_beyond_it_either_way_is_named():
    reference = 200_000
    slack = TRAFFIC_ATOL_BYTES + TRAFFIC_RTOL * reference
    assert traffic_problem(reference, reference) is None
    assert traffic_problem(reference, int(reference + slack)) is None
    assert traffic_problem(reference, int(reference - slack)) is None
    more = traffic_problem(reference, int(reference + slack) + 1)
    assert "traffic outside the collectives" in more and "200,000" in more
    assert "is missing" in traffic_problem(reference, int(reference - slack) - 1)
    assert traffic_problem(None, 10**9) is None and traffic_problem(10**9, None) is None


def test_ranks_sharing_this_processs_network_are_not_measured():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_in_other_namespace(child.pid) is None
        assert LoopbackMeter.around(child.pid) is None and LoopbackMeter.around(None) is None
    finally:
        child.kill()
        child.wait()


def _bwrap_or_skip() -> str:
    from grading.autograder.sandbox import SandboxUnavailable, find_bwrap, probe

    try:
        bwrap = find_bwrap()
        probe(bwrap)
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    return bwrap


def test_bytes_sent_inside_a_network_namespace_are_counted_from_outside_and_nothing_else():
    """A process in a sandbox of its own sends 1 MiB to itself over TCP on loopback, told when to
    start; the count read from outside, through its wrapper's pid, grows by the payload plus the
    TCP/IP headers and nothing of the host's own loopback traffic."""
    bwrap = _bwrap_or_skip()
    sender = textwrap.dedent("""
        import socket, sys
        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        print("ready", flush=True); sys.stdin.readline()
        client.sendall(bytes(2**20)); client.close()
        got = 0
        while chunk := peer.recv(1 << 16):
            got += len(chunk)
        print(got, flush=True); sys.stdin.readline()
    """)
    from grading.autograder.sandbox import _namespace_args

    wrapped = subprocess.Popen([bwrap, *_namespace_args([]), "--", sys.executable, "-c", sender],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert wrapped.stdout.readline().strip() == "ready"
        meter = LoopbackMeter.around(wrapped.pid)
        assert meter is not None and meter.pid != wrapped.pid
        before = meter.read()
        with socket_pair_on_host_loopback():  # traffic outside the sandbox is not counted
            wrapped.stdin.write("\n")
            wrapped.stdin.flush()
            assert int(wrapped.stdout.readline()) == 2**20
        moved = meter.read() - before
        assert 2**20 <= moved < 2**20 * 1.1, moved
        assert loopback_bytes(meter.pid) == meter.read()
    finally:
        wrapped.kill()
        wrapped.wait()


class socket_pair_on_host_loopback:
    """Sends 4 MiB over this process's own loopback as the block starts."""

    def __enter__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.client = socket.create_connection(self.server.getsockname())
        self.peer, _ = self.server.accept()
        sender = threading.Thread(target=self.client.sendall, args=(bytes(4 * 2**20),))
        sender.start()
        received = 0
        while received < 4 * 2**20:
            received += len(self.peer.recv(1 << 16))
        sender.join()
        return self

    def __exit__(self, *exc):
        for end in (self.client, self.peer, self.server):
            end.close()


def test_a_helper_module_beside_the_notebook_travels_by_value_and_nothing_else_does(tmp_path):
    """In a kernel whose working folder holds my_layers.py, the functions and classes imported from
    it reach a process that has no such file; the course's packages and the environment's stay by
    reference, and the registry of cloudpickle is left as it was."""
    (tmp_path / "my_layers.py").write_text("import math\n\ndef area(r):\n    return math.pi * r * r\n\n"
                                           "class Disc:\n    def __init__(self, r):\n        self.r = r\n\n"
                                           "    def area(self):\n        return area(self.r)\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{REPO!r}, ""]
        import cloudpickle, labutils, my_layers
        from grading.judge import client
        print(sorted(m.__name__ for m in client.helper_modules(".")))
        blob = client.dumps({{"area": my_layers.area, "Disc": my_layers.Disc, "launch": labutils.launch}})
        print(sorted(cloudpickle.list_registry_pickle_by_value()))
        sys.stdout.buffer.write(blob)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, check=True)
    names, registry, blob = done.stdout.split(b"\n", 2)
    assert names == b"['my_layers']" and registry == b"[]"
    check = ("import sys, cloudpickle; d = cloudpickle.loads(sys.stdin.buffer.read()); "
             "print(round(d['area'](1), 4), round(d['Disc'](2).area(), 4), d['launch'].__module__, "
             "d['area'].__code__.co_filename)")
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", check], input=blob, capture_output=True, check=True, cwd="/",
                         env=env).stdout.decode().split()
    assert out == ["3.1416", "12.5664", "labutils.ranks.launch", str(tmp_path / "my_layers.py")]


def test_the_calibration_bench_measures_an_honest_solution_within_the_slack():
    """``bench/judge_traffic.py`` on one lab: every hidden test measured in the sandbox, within the slack;
    nothing of it is left in the temporary directory (one of its own, short enough for the ranks' socket)."""
    _bwrap_or_skip()
    with tempfile.TemporaryDirectory(prefix="bench-tmp-") as scratch:
        done = subprocess.run([sys.executable, os.path.join(REPO, "bench", "judge_traffic.py"), "--labs",
                               "lab06_expert_parallel", "--repeats", "1"], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, TMPDIR=scratch))
        left = os.listdir(scratch)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("lab06_expert_parallel")]
    assert [row[1] for row in rows] == ["test_route", "test_all_to_all", "test_moe"]
    assert all(int(row[2].replace(",", "")) > 0 and float(row[5]) < 1 for row in rows)
    assert done.stdout.splitlines()[-1].startswith("largest difference: ")
    assert left == []
