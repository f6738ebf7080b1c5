"""Exceptions raised in the caller when something goes wrong on the ranks."""
from __future__ import annotations


class LaunchError(RuntimeError):
    """Base class: running code on the ranks failed."""


class RankError(LaunchError):
    """A rank raised an exception whose type could not be rebuilt in the caller.

    ``rank`` is the rank that raised, ``remote_traceback`` its formatted traceback.
    (When the original type can be rebuilt, that type is raised instead, with the same
    ``rank`` and ``remote_traceback`` attributes and a note naming the rank.)
    """

    def __init__(self, message: str, rank: int, remote_traceback: str):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


class RankDiedError(LaunchError):
    """A rank's process ended without answering (``os._exit``, a signal, a segfault).

    ``exitcode`` is its exit status, or ``None`` when a signal ended it (then ``signal``
    holds the signal number).
    """

    def __init__(self, message: str, rank: int, exitcode: int | None, signal: int | None):
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode
        self.signal = signal


class TemplateExitedError(LaunchError):
    """The rank template (the interpreter that forks the ranks) ended while ranks were starting or
    running; its ranks went with it."""


class RankTimeoutError(LaunchError, TimeoutError):
    """Some ranks did not finish before the deadline.

    ``ranks`` lists them; ``stacks`` maps each to the Python stack where it was stuck.
    """

    def __init__(self, message: str, ranks: list[int], stacks: dict[int, str]):
        super().__init__(message)
        self.ranks = ranks
        self.stacks = stacks


class RemoteTraceback(Exception):
    """Carries a rank's formatted traceback as the ``__cause__`` of a re-raised exception."""

    def __str__(self) -> str:
        return "\n" + self.args[0]
