"""Checking what a caller passes to ``launch`` / ``Pool``, before any rank starts.

    from labutils.call_args import pickle_call, validate_timeout, validate_world_size
    validate_world_size(4)            # 4; TypeError / ValueError with the reason otherwise
    validate_timeout(None)            # DEFAULT_TIMEOUT_S seconds
    payload = pickle_call(fn, (x,), {})   # bytes for the ranks; names the argument that cannot travel
"""
from __future__ import annotations

import os

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
        return cloudpickle.dumps((fn, args, kwargs))
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
