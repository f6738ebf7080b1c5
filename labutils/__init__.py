"""labutils: the helper package of the multi-GPU programming course.

Run code on N ranks from a notebook cell::

    import labutils
    results = labutils.launch(fn, 4)            # one-shot: fn() on 4 ranks, results in rank order
    with labutils.Pool(4) as pool:              # warm ranks, process group kept between calls
        pool.run(fn)
    %load_ext labutils                          # then a cell starting with %%distributed -n 4

Importing labutils is cheap: torch is imported by the ranks, and by the kernel only when
a module that needs it (bench, costmodel, ...) is imported. In IPython (a notebook's kernel)
importing labutils also starts the rank template in the background: it imports torch while
the notebook goes on, so the first launch finds it ready (``LABUTILS_PRESTART=0``: it does not);
and the kernel's exit skips freeing torch's objects one by one (``labutils.command.kernel_exit``).
"""
import sys as _sys

from labutils.command import kernel_exit as _kernel_exit
from labutils.ranks import _starters


def _in_ipython() -> bool:
    """Whether this process is an IPython shell or kernel (where launches come from cells)."""
    ipython = _sys.modules.get("IPython")
    return ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None


if _in_ipython():
    _starters.prestart()
    _kernel_exit.freeze_at_exit()

from labutils.ranks import rank  # labutils.rank.device(): this rank's device ("cpu" outside a rank)
from labutils.ranks.errors import (
    LaunchError,
    RankDiedError,
    RankError,
    RankTimeoutError,
)
from labutils.ranks.launch import launch
from labutils.ranks.pool import Pool, shutdown

__all__ = [
    "launch",
    "Pool",
    "shutdown",
    "rank",
    "LaunchError",
    "RankError",
    "RankDiedError",
    "RankTimeoutError",
    "load_ipython_extension",
]
__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """`%load_ext labutils`: registers the `%%distributed` cell magic."""
    from labutils.ranks.magic import register

    register(ipython)
