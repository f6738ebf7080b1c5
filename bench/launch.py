"""How fast does code reach N ranks? labutils against its anchors, side by side in one run.

    python bench/launch.py                    # 2, 4 and 8 ranks, anchors included
    python bench/launch.py --ranks 4 --calls 200 --no-anchors

Measured (seconds or milliseconds, wall clock, on this machine, gloo on CPU):
- first launch: a fresh Python process imports labutils, then ``launch`` of an all-reduce
  until it returns (the template imports torch once, not once per rank);
- later launch: ``launch`` again in the same process (ranks forked from the warm template);
- warm call: ``Pool.run`` of a no-op plus ``dist.barrier()``, and the same through the
  ``%%distributed`` magic, p50 and p99 over ``--calls`` calls.
Anchors: torch.multiprocessing.spawn (fresh interpreters), accelerate's notebook_launcher
(forks the caller; run in a subprocess so this process is never forked) and ipyparallel
(warm engines with a gloo group). Targets (issue 2, 4 ranks): first launch <= 2.5 s,
later launch <= 0.2 s, warm call p50 <= 3 ms and p99 <= 20 ms.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run_python(code: str) -> float:
    """Run code in a fresh interpreter; it prints one float (seconds) as its last line."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         cwd=HERE, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


# ----- labutils ---------------------------------------------------------------------------

def ours_first_launch(n: int) -> float:
    return run_python(f"""
        import time
        start = time.perf_counter()
        import labutils
        def first():
            import torch, torch.distributed as dist
            dist.all_reduce(torch.ones(1))
        labutils.launch(first, {n})
        print(time.perf_counter() - start)
    """)


def ours_later_launch(n: int, repeats: int) -> float:
    import labutils

    def later():
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))

    labutils.launch(later, n)  # warm the template
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        labutils.launch(later, n)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ours_pool_calls(n: int, calls: int) -> list[float]:
    import torch.distributed as dist

    import labutils

    with labutils.Pool(n) as pool:
        for _ in range(20):
            pool.run(dist.barrier)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            pool.run(dist.barrier)
            times.append(time.perf_counter() - start)
    return times


def ours_magic_calls(n: int, calls: int) -> list[float]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "labutils")
    for _ in range(20):
        shell.run_cell_magic("distributed", f"-n {n}", "dist.barrier()")
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        shell.run_cell_magic("distributed", f"-n {n}", "dist.barrier()")
        times.append(time.perf_counter() - start)
    shell.run_line_magic("distributed_shutdown", "")
    return times


# ----- anchors ----------------------------------------------------------------------------

def anchor_spawn(n: int, repeats: int) -> float:
    import torch.multiprocessing as mp

    import _anchor_fns

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mp.spawn(_anchor_fns.spawn_worker, args=(n, free_port()), nprocs=n, join=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
        for _ in range(20):
            view.apply_sync(_anchor_fns.ipp_barrier)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            view.apply_sync(_anchor_fns.ipp_barrier)
            times.append(time.perf_counter() - start)
        return times
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
    parser.add_argument("--repeats", type=int, default=5, help="launches timed per measurement")
    parser.add_argument("--no-anchors", action="store_true")
    args = parser.parse_args()
    print(f"# bench/launch.py on {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"load average {os.getloadavg()[0]:.2f}")
    rows = []
    for n in args.ranks:
        first = ours_first_launch(n)
        later = ours_later_launch(n, args.repeats)
        pool = ours_pool_calls(n, args.calls)
        magic = ours_magic_calls(n, args.calls)
        if args.no_anchors:
            spawn = nbl = ipp = "skipped"
        else:
            spawn = try_anchor(anchor_spawn, n, 2)
            nbl = try_anchor(anchor_notebook_launcher, n, args.repeats)
            ipp = try_anchor(anchor_ipyparallel, n, args.calls)
        p50 = percentile(pool, 0.5)
        rows += [
            (n, "first launch (fresh process, to end of all-reduce)", fmt_s(first), "spawn " + fmt_s(spawn),
             ratio(spawn, first), "<= 2.5 s" if n == 4 else ""),
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
