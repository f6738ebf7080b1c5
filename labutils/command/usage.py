"""The error a command-line user can fix, shared by every ``labutils`` subcommand.

A subcommand raises ``UsageError("--world-size must be at least 1, got 0")``; the
``labutils`` command prints it as one line on stderr and exits with status 2.
"""


class UsageError(Exception):
    """A mistake in the command line the user can fix; printed as one line."""
