"""Shared fixtures: every test that starts ranks must leave no process behind."""
from __future__ import annotations

import pytest

from proctree import describe, descendants, wait_until_gone


@pytest.fixture
def no_leftover_processes():
    """After the test, stop labutils entirely and assert that no child process survives."""
    yield
    import labutils

    labutils.shutdown()
    left = wait_until_gone(descendants(), timeout_s=5.0)
    assert not left, f"processes left behind:\n{describe(left)}"
