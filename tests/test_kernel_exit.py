"""A kernel that imported labutils freezes its objects at exit (``labutils.command.kernel_exit``):
after every exit handler registered later, and only in IPython."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _exit_report(code: str) -> list[str]:
    """stdout lines of a fresh interpreter running ``code``, which registers exit handlers first."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, LABUTILS_PRESTART="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_a_kernel_freezes_its_objects_at_exit_after_the_handlers_registered_later():
    lines = _exit_report("""
        import atexit, gc
        atexit.register(lambda: print("last handler sees frozen objects:", gc.get_freeze_count() > 0))
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance()
        import labutils
        atexit.register(lambda: print("later handler sees frozen objects:", gc.get_freeze_count() > 0))
        atexit.register(lambda: print("a later handler runs:", True))
    """)
    assert lines == ["a later handler runs: True", "later handler sees frozen objects: False",
                     "last handler sees frozen objects: True"]


def test_outside_ipython_importing_labutils_changes_nothing_at_exit():
    lines = _exit_report("""
        import atexit, gc
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
        import labutils
    """)
    assert lines == ["frozen at exit: False"]
