"""Checking what a caller passes to ``launch`` / ``Pool``, before any rank starts.

    from labutils.ranks.call_args import pickle_call, validate_timeout, validate_world_size
    validate_world_size(4)            # 4; TypeError / ValueError with the reason otherwise
    validate_timeout(None)            # DEFAULT_TIMEOUT_S seconds
    payload = pickle_call(fn, (x,), {})   # bytes for the ranks; names the argument that cannot travel
"""
from __future__ import annotations

import functools
import io
import os
import pickle
import types

#: Default seconds a call may run before its ranks are stopped (env LABUTILS_TIMEOUT).
DEFAULT_TIMEOUT_S = float(os.environ.get("LABUTILS_TIMEOUT", "120"))


def validate_world_size(world_size) -> int:
    """``world_size`` if it is an int >= 1; TypeError (not an int) or ValueError otherwise."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, not {type(world_size).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return world_size


def validate_timeout(timeout) -> float:
    """Seconds as a float: ``DEFAULT_TIMEOUT_S`` for None; ValueError unless a positive number."""
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def pickle_call(fn, args: tuple, kwargs: dict) -> bytes:
    """cloudpickle ``(fn, args, kwargs)`` here, so that a bad argument fails before any rank starts.

    TypeError if ``fn`` is not callable, or naming the first argument (by position or
    keyword) that cannot be pickled.
    """
    import cloudpickle

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}: {fn!r}")
    try:
        return _dumps_keeping_filenames((fn, args, kwargs))
    except Exception as exc:
        for i, arg in enumerate(args):
            try:
                cloudpickle.dumps(arg)
            except Exception as arg_exc:
                raise TypeError(f"argument {i} ({type(arg).__name__}) cannot be sent to the ranks: {arg_exc}") from None
        for key, value in kwargs.items():
            try:
                cloudpickle.dumps(value)
            except Exception as arg_exc:
                raise TypeError(f"keyword argument {key!r} ({type(value).__name__}) cannot be sent to the ranks: {arg_exc}") from None
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} cannot be sent to the ranks: {exc}") from None


@functools.cache
def _filename_keeping_pickler():
    import cloudpickle

    class FilenameKeepingPickler(cloudpickle.Pickler):
        """cloudpickle, but code objects keep their file name.

        cloudpickle 3.1 writes every function's file name as "<dynamic-code>"; a rank's
        traceback would then show neither the notebook cell nor the source line. Here the
        real name travels, and the rank's linecache finds the source (cells are sent along).
        """

        def reducer_override(self, obj):
            reduce_code = self.dispatch_table.get(types.CodeType) if type(obj) is types.CodeType else None
            if reduce_code is not None:
                constructor, fields = reduce_code(obj)
                return constructor, tuple(obj.co_filename if isinstance(f, str) and f == "<dynamic-code>" else f
                                          for f in fields)
            return super().reducer_override(obj)

    return FilenameKeepingPickler


def _dumps_keeping_filenames(obj) -> bytes:
    buffer = io.BytesIO()
    _filename_keeping_pickler()(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()
