"""Scratch folders for judge ranks started from a test's own process (not through ``course grade``):
each judge rank makes its private folder in TMPDIR and can no longer remove it
(``rank_isolation.isolate``), so those folders go with a scratch folder that is removed afterwards,
as the judge process does for its ranks (``server._scratch_of_its_own``)."""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile

#: Where scratch folders are made: the temporary folder as the test process started.
BASE = tempfile.gettempdir()


def new_scratch(removed_at_exit: bool = False) -> str:
    """A fresh scratch folder in ``BASE``; with ``removed_at_exit``, removed when this process ends."""
    folder = tempfile.mkdtemp(prefix="judge-ranks-scratch-", dir=BASE)
    if removed_at_exit:
        atexit.register(shutil.rmtree, folder, True)
    return folder


@contextlib.contextmanager
def ranks_write_in(folder: str):
    """TMPDIR of every rank this process starts meanwhile is ``folder`` (each rank reads it at its
    start); this process's own temporary folder stays what it was, so nothing of this process (torch's
    compiler caches its folder once) lands in ``folder`` and outlives it."""
    previous = os.environ.get("TMPDIR")
    tempfile.tempdir = tempfile.gettempdir()  # pinned: read from TMPDIR no more while it names ``folder``
    os.environ["TMPDIR"] = folder
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
