"""Install, before the suite, what its tests would otherwise install in their own setup.

    .venv/bin/python tests/prepare_environments.py      # `make test` runs it before pytest

Each is made once per machine and kept (the tests make it again only when the course's
requirements changed), so the suite's time is the tests' own:

- Debian's headless Chromium, for the browser and hub tests (``tests/browser/install_chromium.sh``);
- the course hub's own environment (``make hub-env`` under /var/tmp, as ``tests/hub`` makes it);
- the students' environment the hub makes at its start (``grading.hub.shared.prepare``, under
  /var/tmp, from Debian's Python: torch, JupyterLab, nbgrader and labutils from the students' copy);
- the ordinary account that grades in ``tests/test_sandbox_user.py``, and a Python it can run
  (``tests/grading_account.py``: this interpreter, or a venv under /var/tmp).

What this machine cannot make is one line saying why; those tests skip with the same reason. Prints
one line per environment with the seconds it took; exits non-zero only when an install failed.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(TESTS), str(TESTS / "hub")]

import course_hub  # noqa: E402  (tests/hub, put on the path above)
import grading_account  # noqa: E402
import headless_chromium  # noqa: E402
from grading_account import Unavailable  # noqa: E402  (what this machine cannot have; its tests skip)


def chromium() -> str:
    reason = headless_chromium.why_missing()
    if reason:
        raise Unavailable(reason)
    return headless_chromium.CHROMIUM


def _hub_possible() -> None:
    reason = course_hub.why_no_hub()
    if reason:
        raise Unavailable(reason)


def hub_environment() -> str:
    _hub_possible()
    course_hub.make_hub_environment()
    return str(course_hub.HUB_VENV)


def students_environment() -> str:
    _hub_possible()
    from grading.hub import shared

    shared.prepare(course_hub.SHARED, course_hub.SYSTEM_PYTHON)
    return str(shared.python(course_hub.SHARED))


def grading_python() -> str:
    account = grading_account.account()
    return f"{grading_account.shared_python(account)}, run by {account.pw_name}"


STEPS = (("Chromium", chromium), ("the hub's environment", hub_environment),
         ("the students' environment", students_environment), ("the grading account's Python", grading_python))


def main() -> int:
    failed = 0
    for name, make in STEPS:
        started = time.monotonic()
        try:
            where = make()
        except Unavailable as reason:
            print(f"prepare: {name}: not on this machine ({reason}); its tests skip", flush=True)
            continue
        except (RuntimeError, AssertionError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            print(f"prepare: {name}: failed: {error}", file=sys.stderr, flush=True)
            failed += 1
            continue
        print(f"prepare: {name}: {where} ({time.monotonic() - started:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
