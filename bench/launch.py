"""How fast does code reach N ranks? labutils against its anchors, side by side in one run.

    python bench/launch.py                    # 2, 4 and 8 ranks, anchors included
    python bench/launch.py --ranks 4 --calls 200 --no-anchors

Measured (seconds or milliseconds, wall clock, on this machine, gloo on CPU):
- floor: from starting a fresh interpreter to the end of ``import torch, torch.distributed``,
  what any launcher pays at least once before a rank can run;
- first launch: from starting a fresh interpreter that imports labutils and ``launch``-es an
  all-reduce until ``launch`` returns (the template imports torch once, not once per rank),
  with its breakdown: when the process ran its first line, imported labutils, when the template
  started and had imported torch, when the ranks were forked, connected, had their process
  group, had answered the call, and when ``launch`` returned (results read, ranks stopped).
  Floor, first launch and torch.multiprocessing.spawn (fresh interpreters, from a process that
  has imported torch) are interleaved ``--repeats`` times; the medians are printed;
- later launch: ``launch`` again in the same process (ranks forked from the warm template);
- warm call: ``Pool.run`` of a no-op plus ``dist.barrier()``, and the same through the
  ``%%distributed`` magic, p50 and p99 over ``--calls`` calls.
Anchors: torch.multiprocessing.spawn, accelerate's notebook_launcher (forks the caller; run in
a subprocess so this process is never forked) and ipyparallel (warm engines with a gloo group).
Targets: first launch <= floor + 0.5 s at every rank count, never slower than spawn at 2
ranks and >= 1.5x ahead of it at 4 and 8; at 4 ranks later launch <= 0.2 s, warm call
p50 <= 3 ms and p99 <= 20 ms.

Measured 2026-11-27 with ``python bench/launch.py --repeats 3 --calls 100`` on 2 cores (load
average 4.4), medians of 3, interleaved:

    ranks  floor    labutils first launch     spawn     spawn/labutils
    2      1.23 s   1.29 s (floor + 0.06 s)   1.96 s    1.5x
    4      1.11 s   1.30 s (floor + 0.20 s)   3.76 s    2.9x
    8      1.23 s   1.32 s (floor + 0.09 s)   7.30 s    5.5x

Earlier the same day under heavy load (load average 25-39: only the side-by-side ratios mean
anything there):

    ranks  floor    labutils first launch     spawn     spawn/labutils
    2      9.86 s   9.67 s (floor - 0.19 s)   26.34 s   2.7x
    4      6.91 s   7.73 s (floor + 0.82 s)   41.45 s   5.4x
    8      9.00 s   6.12 s (floor - 2.88 s)   62.09 s   10.1x

Where the time goes (4 ranks, same run): process up 0.13 s, labutils imported +0.35 s, template
up +0.59 s, template imported torch +6.10 s, ranks forked +0.22 s, connected +0.05 s, process
group ready +0.04 s, call done +0.02 s, launch returned (results read, ranks stopped) +0.24 s:
all but the template's own start and torch import is under 0.6 s even under this load.
Same run, later launch 0.32 / 0.54 / 0.33 s (notebook_launcher 0.31 / 1.23 / 0.61 s) and
Pool.run p50 1.54 / 0.91 / 1.51 ms, p99 11.9 / 4.6 / 8.5 ms (ipyparallel p50 21 / 37 / 60 ms)
at 2 / 4 / 8 ranks.
Before, the template's hello carried ``torch.__version__`` (torch's own version type), so
unpickling it made the caller import torch too, after the template had: the ranks were forked
one whole torch import late (2 ranks, interleaved, load average 17: floor 5.77 s, first launch
8.90 s before and 3.97 s after; ``make bench`` before it, on a quieter machine that day, had the
first launch 1.4-1.7 s above the floor at 2, 4 and 8 ranks and half as fast as spawn at 2).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def free_port() -> int:
    """A port free on 127.0.0.1 now, for an anchor's rendezvous, from below the kernel's ephemeral
    range, as ``grading.hub.server_ports`` picks one (this script's folder holds a ``grading.py``
    that hides that package): a port from ``bind(("127.0.0.1", 0))`` is in that range, and in
    the second before the anchor's ranks bind it any ``connect`` or ``bind`` to port 0 on the
    machine may take it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    for port in random.sample(range(20000, first_ephemeral), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port between 20000 and {first_ephemeral}")


def percentile(values, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def timed_calls(call, calls: int, warmup: int = 20) -> list[float]:
    """Seconds of each of ``calls`` calls of ``call()``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def run_python(code: str) -> float:
    """Run code in a fresh interpreter; it prints one float (seconds) as its last line."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         cwd=HERE, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def fresh_process_marks(code: str) -> dict:
    """Start a fresh interpreter running ``code``, which prints a JSON object of event -> its
    ``time.monotonic()`` as its last line (the machine's clock, shared by every process);
    return event -> seconds since just before the interpreter was started."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         cwd=HERE, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return {event: at - t0 for event, at in json.loads(out.stdout.strip().splitlines()[-1]).items()}


# ----- the floor and the first launch ---------------------------------------------------------

def floor_import() -> float:
    """Seconds from starting a fresh interpreter to the end of ``import torch, torch.distributed``:
    what any launcher pays at least once before a rank can run."""
    return fresh_process_marks("""
        import time
        import torch, torch.distributed
        import json; print(json.dumps({"imported": time.monotonic()}))
    """)["imported"]


#: The first launch's events, in the order they happen (the template's two come from its hello).
FIRST_LAUNCH_EVENTS = (
    ("process up", "the fresh interpreter runs its first line"),
    ("labutils imported", "import labutils"),
    ("template up", "the template interpreter runs its first line"),
    ("template imported torch", "torch, torch.distributed, cloudpickle in the template"),
    ("ranks forked", "the template forks the ranks (Spawn -> Spawned)"),
    ("ranks connected", "each rank's 3 channels accepted"),
    ("process group ready", "TCPStore and init_process_group on every rank"),
    ("call done", "the all-reduce ran and every rank answered"),
    ("launch returned", "results unpickled, ranks stopped"),
)


def ours_first_launch(n: int) -> dict:
    """A fresh process imports labutils and launches an all-reduce on ``n`` ranks: event -> seconds
    since the process was started (FIRST_LAUNCH_EVENTS). The caller-side events are marked by
    wrapping the launcher's steps in that process; the template's by the times in its hello."""
    return fresh_process_marks(f"""
        import time
        marks = {{"process up": time.monotonic()}}
        import labutils
        marks["labutils imported"] = time.monotonic()
        import json
        from labutils.ranks import _ranklinks, _starters, pool

        def marking(fn, event):
            def wrapped(*args, **kwargs):
                result = fn(*args, **kwargs)
                marks.setdefault(event, time.monotonic())
                return result
            return wrapped

        _starters.TemplateStarter.spawn = marking(_starters.TemplateStarter.spawn, "ranks forked")
        _ranklinks.RankLinks.connect = marking(_ranklinks.RankLinks.connect, "ranks connected")
        collect = pool.collect
        def collect_marking(links, kinds, *args, **kwargs):
            replies = collect(links, kinds, *args, **kwargs)
            event = {{"Ready": "process group ready", "Done": "call done"}}.get(kinds[0].__name__)
            if event:
                marks.setdefault(event, time.monotonic())
            return replies
        pool.collect = collect_marking

        def first():
            import torch, torch.distributed as dist
            dist.all_reduce(torch.ones(1))
        labutils.launch(first, {n})
        marks["launch returned"] = time.monotonic()
        hello = getattr(_starters.current_starter(), "hello", None)
        if hello is not None:
            marks["template up"], marks["template imported torch"] = hello.started_at, hello.imported_at
        print(json.dumps(marks))
    """)


def spawn_launch(n: int) -> float:
    """torch.multiprocessing.spawn of an all-reduce on ``n`` fresh interpreters, from a process that
    has already imported torch (seconds, call to return)."""
    import torch.multiprocessing as mp

    import _anchor_fns

    start = time.perf_counter()
    mp.spawn(_anchor_fns.spawn_worker, args=(n, free_port()), nprocs=n, join=True)
    return time.perf_counter() - start


def first_launch_side_by_side(n: int, repeats: int, anchors: bool) -> dict:
    """Floor, labutils' first launch and mp.spawn, interleaved ``repeats`` times; medians (s)."""
    floors, firsts, spawns = [], [], []
    for _ in range(repeats):
        floors.append(floor_import())
        firsts.append(ours_first_launch(n))
        if anchors:
            spawns.append(try_anchor(spawn_launch, n))
    events = [e for e, _ in FIRST_LAUNCH_EVENTS if all(e in marks for marks in firsts)]
    spawn_times = [t for t in spawns if isinstance(t, float)]
    return {
        "floor": statistics.median(floors),
        "events": {e: statistics.median(m[e] for m in firsts) for e in events},
        "first": statistics.median(m["launch returned"] for m in firsts),
        "spawn": statistics.median(spawn_times) if spawn_times else (spawns[-1] if spawns else "skipped"),
    }


def print_breakdown(n: int, result: dict) -> None:
    """Where the first launch's time goes: each event's median time since the process started,
    and the step from the event before it."""
    print(f"# first launch on {n} ranks, medians: floor (fresh process to import torch, "
          f"torch.distributed) {result['floor']:.3f} s; labutils {result['first']:.3f} s "
          f"(floor {result['first'] - result['floor']:+.3f} s); spawn {fmt_s(result['spawn'])} "
          f"(spawn/labutils {ratio(result['spawn'], result['first'])})")
    previous = 0.0
    described = dict(FIRST_LAUNCH_EVENTS)
    for event, at in sorted(result["events"].items(), key=lambda item: item[1]):
        print(f"#   {at:7.3f} s  (+{at - previous:6.3f} s)  {event}: {described[event]}")
        previous = at


def ours_later_launch(n: int, repeats: int) -> float:
    import labutils

    def later():
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))

    # the first launch warms the template
    return statistics.median(timed_calls(lambda: labutils.launch(later, n), repeats, warmup=1))


def ours_pool_calls(n: int, calls: int) -> list[float]:
    import torch.distributed as dist

    import labutils

    with labutils.Pool(n) as pool:
        return timed_calls(lambda: pool.run(dist.barrier), calls)


def ours_magic_calls(n: int, calls: int) -> list[float]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "labutils")
    times = timed_calls(lambda: shell.run_cell_magic("distributed", f"-n {n}", "dist.barrier()"), calls)
    shell.run_line_magic("distributed_shutdown", "")
    return times


# ----- anchors ----------------------------------------------------------------------------

def anchor_notebook_launcher(n: int, repeats: int) -> float:
    """Per-launch time after the first, in a subprocess (notebook_launcher forks its caller)."""
    return run_python(f"""
        import statistics, time
        from accelerate import notebook_launcher
        import _anchor_fns
        notebook_launcher(_anchor_fns.env_worker, num_processes={n}, use_port="{free_port()}")
        times = []
        for _ in range({repeats}):
            start = time.perf_counter()
            notebook_launcher(_anchor_fns.env_worker, num_processes={n}, use_port="{free_port()}")
            times.append(time.perf_counter() - start)
        print(statistics.median(times))
    """)


def anchor_ipyparallel(n: int, calls: int) -> list[float]:
    import ipyparallel as ipp

    import _anchor_fns

    cluster = ipp.Cluster(n=n, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(n, timeout=120)
        view = client[:]
        view.apply_sync(lambda p: __import__("sys").path.insert(0, p), HERE)
        port = free_port()
        view.map_sync(_anchor_fns.ipp_init, range(n), [n] * n, [port] * n)
        return timed_calls(lambda: view.apply_sync(_anchor_fns.ipp_barrier), calls)
    finally:
        cluster.stop_cluster_sync()


def try_anchor(fn, *args):
    try:
        return fn(*args)
    except ImportError as exc:
        return f"not installed ({exc.name}); pip install -e '.[bench]'"
    except Exception as exc:  # report and go on: one anchor must not hide the others
        return f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:120]}"


def fmt_s(x) -> str:
    return f"{x:.3f} s" if isinstance(x, float) else str(x)


def fmt_ms(times) -> str:
    if isinstance(times, str):
        return times
    return f"p50 {percentile(times, 0.5) * 1e3:.2f} ms, p99 {percentile(times, 0.99) * 1e3:.2f} ms"


def ratio(anchor, ours) -> str:
    if isinstance(anchor, str) or isinstance(ours, str):
        return "-"
    return f"{anchor / ours:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--calls", type=int, default=300, help="warm calls timed per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="launches timed per measurement (first launches: floor, labutils and spawn interleaved this many times)")
    parser.add_argument("--no-anchors", action="store_true")
    args = parser.parse_args()
    print(f"# bench/launch.py on {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"load average {os.getloadavg()[0]:.2f}")
    rows = []
    for n in args.ranks:
        first = first_launch_side_by_side(n, args.repeats, not args.no_anchors)
        print_breakdown(n, first)
        later = ours_later_launch(n, args.repeats)
        pool = ours_pool_calls(n, args.calls)
        magic = ours_magic_calls(n, args.calls)
        if args.no_anchors:
            nbl = ipp = "skipped"
        else:
            nbl = try_anchor(anchor_notebook_launcher, n, args.repeats)
            ipp = try_anchor(anchor_ipyparallel, n, args.calls)
        p50 = percentile(pool, 0.5)
        rows += [
            (n, "floor: fresh process to import torch, torch.distributed", fmt_s(first["floor"]), "", "", ""),
            (n, "first launch (fresh process, to end of all-reduce)", fmt_s(first["first"]),
             "spawn " + fmt_s(first["spawn"]), ratio(first["spawn"], first["first"]),
             f"<= floor + 0.5 s = {first['floor'] + 0.5:.2f} s, " + ("spawn/labutils >= 1.0x" if n <= 2 else
                                                                   "spawn/labutils >= 1.5x")),
            (n, "later launch", fmt_s(later), "notebook_launcher " + fmt_s(nbl), ratio(nbl, later),
             "<= 0.2 s" if n == 4 else ""),
            (n, "Pool.run no-op + barrier", fmt_ms(pool), "ipyparallel " + fmt_ms(ipp),
             ratio(percentile(ipp, 0.5), p50) if not isinstance(ipp, str) else "-",
             "p50 <= 3 ms, p99 <= 20 ms" if n == 4 else ""),
            (n, "%%distributed dist.barrier()", fmt_ms(magic), "", "", ""),
        ]
        print(f"# {n} ranks done", flush=True)
    header = ("ranks", "measure", "labutils", "anchor", "anchor/labutils", "target")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
