"""What a failed call leaves behind under NCCL (faked), and what a CPU tensor on NCCL says."""
from __future__ import annotations

import pickle

import pytest
from fakegpu import FakeGpuNode, h100s

from labutils.ranks import _replies, pool as pool_module
from labutils.ranks._messages import Failed

pytestmark = pytest.mark.fakegpu


class FakeLinks:
    """The ranks' links as ``fail_after_errors`` sees them: every rank replied and is alive."""

    def __init__(self, world_size):
        self.world_size, self.ranks, self.killed = world_size, [object()] * world_size, False

    def exit_status(self, rank):
        return None

    def kill(self):
        self.killed = True


def failed(message="boom", type_name="builtins.ValueError"):
    return Failed(3, pickle.dumps(ValueError(message)), "Traceback ...\nValueError: " + message, type_name, message)


def raised(links, errors, retire):
    with pytest.raises(Exception) as info:
        _replies.fail_after_errors(links, errors, set(), retire)
    return info.value


def test_a_failed_call_on_nccl_retires_every_rank_so_a_queued_collective_cannot_pair_with_the_next_call():
    links = FakeLinks(2)
    exc = raised(links, [(1, failed())], retire=True)
    assert links.killed
    assert any("fresh ranks" in note for note in exc.__notes__)


def test_a_failed_call_on_gloo_keeps_ranks_that_all_replied_so_the_next_call_stays_fast():
    links = FakeLinks(2)
    exc = raised(links, [(0, failed()), (1, failed())], retire=False)
    assert not links.killed and not any("fresh ranks" in note for note in getattr(exc, "__notes__", []))


@pytest.mark.parametrize("backend, retire", [("nccl", True), ("gloo", False)])
def test_the_pool_retires_ranks_after_any_failure_only_under_nccl(monkeypatch, backend, retire):
    FakeGpuNode(monkeypatch, h100s(2))
    seen = {}
    monkeypatch.setattr(pool_module, "collect", lambda *args, **kwargs: seen.update(kwargs) or {})
    pool = pool_module.Pool(2, backend=backend)
    pool._call([pool_module.RunCall(0, b"", {})], 1.0)
    assert seen["retire_on_error"] is retire


def test_a_cpu_tensor_on_nccl_error_says_to_create_it_on_the_rank_device():
    message = ("No backend type associated with device type cpu")
    exc = raised(FakeLinks(2), [(0, failed(message, "builtins.RuntimeError"))], retire=True)
    hint = " ".join(exc.__notes__)
    assert "labutils.rank.device()" in hint and "backend='gloo'" in hint


def test_an_unrelated_error_gets_no_device_hint():
    exc = raised(FakeLinks(2), [(0, failed("shape mismatch"))], retire=True)
    assert not any("rank.device()" in note for note in exc.__notes__)


def _examples():
    """The student examples: README's code blocks and the launch / %%distributed docstrings."""
    import re
    from pathlib import Path

    from labutils import launch
    from labutils.ranks import magic

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", readme, re.S) + [launch.__doc__, magic.__doc__]


def test_student_examples_create_tensors_on_the_rank_device_so_they_run_under_nccl():
    import re

    made = [call for text in _examples() for call in re.findall(r"torch\.(?:ones|zeros|randn|tensor|empty)\([^\n]*", text)]
    assert made, "the examples create no tensor any more: update this test"
    assert all("device" in call for call in made), made
