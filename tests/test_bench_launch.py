"""bench/launch.py: one short run prints the floor, the first launch's breakdown and every row."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_launch_bench_prints_where_the_first_launch_spends_its_time():
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "launch.py"), "--ranks", "2", "--repeats", "1",
         "--calls", "5", "--no-anchors"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"floor \(fresh process to import torch, torch.distributed\) \d+\.\d+ s", out)
    lines = [line for line in out.splitlines() if re.match(r"#\s+\d+\.\d+ s  \(\+", line)]
    events = [line.split(")", 1)[1].split(":")[0].strip() for line in lines]
    # every step is measured; the ones that follow from one another appear in that order
    assert sorted(events) == sorted(["process up", "labutils imported", "template up", "template imported torch",
                                     "ranks forked", "ranks connected", "process group ready", "call done",
                                     "launch returned"])
    caller_side = [e for e in events if not e.startswith("template")]
    assert caller_side == ["process up", "labutils imported", "ranks forked", "ranks connected",
                           "process group ready", "call done", "launch returned"]
    assert events.index("template up") < events.index("template imported torch") < events.index("ranks forked")
    for measure in ("floor: fresh process", "first launch (fresh process", "later launch",
                    "Pool.run no-op + barrier", "%%distributed dist.barrier()"):
        assert measure in out
