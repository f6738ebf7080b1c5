"""What a submission's ranks send back, unpickled in the judge.

labutils pickles every message between a rank and its caller (results, exceptions, its wire
frames): unpickled with pickle's full powers, bytes crafted by code on a rank would run code here,
in the judge. While a submission's ranks run, the judge unpickles their messages with an
unpickler that can rebuild builtin values and the judge's own exception, nothing else.
"""
from __future__ import annotations

import io
import pickle
from contextlib import contextmanager

#: (module, name) of the only classes a message from a submission's ranks may rebuild: none (their
#: harness returns bytes, and says what went wrong in them).
SAFE_GLOBALS = frozenset()


class _RankMessageUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} may not be rebuilt from what a submission's ranks send")


def _restricted_loads(data, /, *, fix_imports=True, encoding="ASCII", errors="strict", buffers=()):
    return _RankMessageUnpickler(io.BytesIO(data), fix_imports=fix_imports, encoding=encoding, errors=errors,
                                 buffers=buffers).load()


@contextmanager
def restricted_unpickling():
    """Within the block, ``pickle.loads`` (and cloudpickle's, the same function, which labutils
    calls through the module) rebuilds builtin values and ``SAFE_GLOBALS`` only. An exception it
    refuses reaches the caller as labutils' ``RankError``, with the rank's message as text."""
    import cloudpickle

    owners = [(pickle, "loads"), (cloudpickle, "loads"), (getattr(cloudpickle, "cloudpickle", None), "loads")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in owners if hasattr(owner, name)]
    for owner, name, _ in saved:
        setattr(owner, name, _restricted_loads)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
