"""How much does the judge's count of the ranks' network traffic vary for honest code?

    python bench/judge_traffic.py                       # every lab's solution on every hidden test
    python bench/judge_traffic.py --labs lab01_tensor_parallel --repeats 3

Runs each hidden test as ``course grade`` runs it: the reference's ranks, then the solution's,
both in the judge's bubblewrap sandbox, whose network namespace has only loopback; the judge
reads from outside how many bytes each launch sent over it (``grading.judge.loopback``). Prints,
per test, the two counts, their difference and the slack ``traffic_problem`` allows, then the
largest difference as a fraction of the slack: the tolerance's margin on honest code (below 1:
no honest solution fails on traffic), and how much an extra channel moves must exceed.
Needs bwrap (``course grade`` does too). Wall clock about a minute per lab on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and not __package__:  # run as the module, from the course root (see bench/grading.py)
    os.chdir(REPO)
    os.execv(sys.executable, [sys.executable, "-m", "bench.judge_traffic", *sys.argv[1:]])
#: The read-only cells besides ``parameters`` whose code the solutions' parts use, per lab.
GIVEN_CELLS = ("setup", "check_helpers", "given_slots", "given_mappings")


def measure(lab: str, repeats: int) -> list:
    """[(test, reference bytes, solution bytes)] of ``repeats`` runs of every hidden test of ``lab``."""
    import torch

    from grading.judge import client, engine

    sys.path.insert(0, os.path.join(REPO, "tests"))  # the tests' helpers import one another by name
    from graded_lab import GradedLab

    graded = GradedLab(lab, rank_timeout_s=60.0, given_cells=GIVEN_CELLS)
    namespace = graded.solution_namespace()
    rows = []
    for test, spec in graded.tests().items():
        objects = {name: namespace[name] for name in spec.objects}
        for seed in range(repeats):
            cases = spec.make_cases(torch.Generator().manual_seed(seed))
            reference = engine.launch_reference(lab, test, cases, rank_timeout_s=60, backend="gloo")
            solution = engine.launch_submission(lab, test, cases, client.dumps(objects), {}, rank_timeout_s=60,
                                                backend="gloo")
            verdict = engine.compare(test, spec, cases, engine.merge(reference, solution))
            if not verdict.passed:
                raise SystemExit(f"{lab} {test}: the solution failed: {verdict.lines}")
            rows.append((test, reference.loopback_bytes, solution.loopback_bytes))
    return rows


def main(argv=None) -> int:
    from grading.judge import engine
    from grading.judge.server import sandbox_ranks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="*", default=engine.available_labs())
    parser.add_argument("--repeats", type=int, default=2, help="runs of each test, with other cases (default 2)")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="judge-traffic-") as scratch:
        # the ranks' folder inside scratch, so that the staged copies of grading/ beside it go with it
        sandbox_ranks(os.path.join(scratch, "ranks"), "gloo", 0)
        worst = report(options.labs, options.repeats)
    print(f"largest difference: {worst:.3f} of the slack")
    return 0 if worst < 1 else 1


def report(labs: list, repeats: int) -> float:
    """Print each test's loopback bytes, the reference's and the solution's, against the slack;
    returns the largest difference as a fraction of the slack."""
    from grading.judge.loopback import TRAFFIC_ATOL_BYTES, TRAFFIC_RTOL

    worst = 0.0
    print(f"slack = {TRAFFIC_ATOL_BYTES:,} B + {TRAFFIC_RTOL:.0%} of the reference's bytes")
    print(f"{'lab':26} {'test':34} {'reference B':>12} {'solution B':>12} {'diff B':>8} {'of slack':>8}")
    for lab in labs:
        for test, reference, solution in measure(lab, repeats):
            if reference is None or solution is None:
                raise SystemExit("the loopback count was not measured: are the ranks in a sandbox?")
            fraction = abs(solution - reference) / (TRAFFIC_ATOL_BYTES + TRAFFIC_RTOL * reference)
            worst = max(worst, fraction)
            print(f"{lab:26} {test:34} {reference:12,} {solution:12,} {solution - reference:8,} {fraction:8.3f}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
