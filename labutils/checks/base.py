"""What every check shares: the one-line failure a notebook shows."""


class CheckFailed(AssertionError):
    """A self-check or visible test failed; IPython shows it as one line, not a traceback."""

    def _render_traceback_(self):
        return [f"CheckFailed: {self}"]
