"""A notebook kernel's exit without a last walk through every object it imported (importing
labutils in IPython asks for it; the course's judge process, which imports torch too, as well).

At exit an interpreter runs a full garbage collection, then clears its modules and collects what
they held in reference cycles (functions, classes, modules): in a kernel that imported torch, a few
hundred thousand objects, measured at 0.3-0.45 s of CPU per exit on a 2-core machine (``python -c
"import torch"`` against the same with ``gc.freeze()`` last), which a kernel restart waits for.
``freeze_at_exit`` moves every object to the collector's permanent generation at exit, which
neither collection walks: the process ends without freeing them. What it changes: an object kept
alive only by a reference cycle at that moment is not finalised (its ``__del__`` does not run), as
Python already allows at exit; files are flushed when their last reference goes, pools are shut
down by their own exit handler first (``labutils.ranks.pool``), and the standard streams are
flushed by Python.
"""
from __future__ import annotations

import atexit
import gc

_registered = False


def freeze_at_exit() -> None:
    """Have this process freeze its objects (``gc.freeze``) at exit, after every exit handler
    registered later (atexit runs them last-registered first). Once per process."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
