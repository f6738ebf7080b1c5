"""held_outside: the tensors a process holds besides what a walk from an object reaches."""
from __future__ import annotations

import sys
import threading
import types

import pytest
import torch

from grading.judge.held_memory import (held_outside, held_storages, live_storages, note_frozen_objects, storage_key,
                                       storages_of)


@pytest.fixture(autouse=True)
def interpreters_gc_freeze(monkeypatch):
    """Put ``gc.freeze`` back after each test: a walk in this process replaces it (as on a rank), and
    a later judge launch of this worker could then not ship ``held_memory``, whose ``gc.freeze`` is
    pickled by reference."""
    import gc

    monkeypatch.setattr(gc, "freeze", gc.freeze)


def test_state_kept_in_a_module_global_counts_and_the_objects_own_and_gradients_do_not():
    before = set(live_storages())
    shard = torch.nn.Parameter(torch.zeros(16))
    shard.grad = torch.ones(16)  # a gradient of what the object holds: gradient memory, not state
    optimizer = types.SimpleNamespace(state={"m": torch.zeros(16)}, params=[shard])
    module = sys.modules.setdefault("held_outside_hidden", types.ModuleType("held_outside_hidden"))
    try:
        accounted = set(held_storages([optimizer], set())) | storages_of([shard])
        assert held_outside(before, accounted, allowed=0) == {}
        module.full = torch.zeros(64)  # 256 bytes nothing of the object reaches
        assert held_outside(before, accounted, allowed=0) == {storage_key(module.full): 256}
    finally:
        del sys.modules["held_outside_hidden"]


def test_a_buffer_another_thread_lets_go_of_a_moment_later_is_not_held():
    before = set(live_storages())
    kept = [torch.zeros(256)]
    release = threading.Timer(0.15, kept.clear)
    release.start()
    try:
        assert held_outside(before, set(), allowed=0) == {}
    finally:
        release.cancel()


def _state_hidden_by_a_freeze() -> tuple:
    """On a rank: (objects the template froze, what ``held_outside`` finds after the rank's code made a
    tensor and froze every object it had made)."""
    import gc

    frozen = gc.get_freeze_count()
    note_frozen_objects()  # as the judge's harness does before the submission's code runs
    before = set(live_storages())
    hidden = [torch.zeros(32)]
    gc.freeze()
    found = held_outside(before, set(), allowed=0)
    return frozen, found.get(storage_key(hidden[0]))


def test_a_rank_starts_with_the_templates_imports_frozen_and_a_freeze_of_its_own_hides_no_tensor():
    import labutils

    for frozen, hidden_bytes in labutils.launch(_state_hidden_by_a_freeze, 2, backend="gloo"):
        assert frozen > 10_000  # torch's modules: a rank's collections skip them
        assert hidden_bytes == 128


def test_a_walk_recounts_the_frozen_objects_only_after_something_froze(monkeypatch):
    """Counting the frozen objects walks their whole list (torch's imports: about 25 ms), so a walk
    takes the count again only once code has called ``gc.freeze`` since it was noted."""
    import gc

    counts = []
    count_frozen = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counts.append(1) or count_frozen())
    note_frozen_objects()
    assert len(counts) == 1
    before = set(live_storages())
    live_storages()
    assert len(counts) == 1
    hidden = [torch.zeros(8)]
    gc.freeze()
    try:
        found = held_outside(before, set(), allowed=0)
    finally:
        gc.unfreeze()
    assert len(counts) == 2 and found.get(storage_key(hidden[0])) == 32
