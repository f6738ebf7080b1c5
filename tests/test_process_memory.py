"""process_memory: what a process holds, however it holds it (NumPy, bare storages, mmap, files)."""
from __future__ import annotations

import mmap

import numpy
import pytest
import torch

from grading.judge.process_memory import ProcessMemory, measure, steady

MIB = 2**20


@pytest.fixture(scope="module", autouse=True)
def steady_allocator():
    steady()


def _grown(make, folder=None) -> int:
    """Bytes the process grows by while ``make()``'s result is kept."""
    before = measure(folder)
    kept = make()
    grown = measure(folder).growth_since(before)
    del kept
    return grown


@pytest.mark.parametrize("make", [
    lambda: numpy.ones(4 * MIB // 4, dtype=numpy.float32),
    lambda: torch.ones(MIB).untyped_storage(),  # a bare storage: no tensor object to find
    lambda: bytearray(b"x" * (4 * MIB)),
    lambda: [float(i) for i in range(200_000)],  # Python floats: the list's item array is on the heap
], ids=["numpy", "storage", "bytearray", "list"])
def test_state_kept_outside_tensors_shows(make):
    assert _grown(make) >= 1.5 * MIB


def test_anonymous_mapped_pages_show_once_touched():
    def touched():
        region = mmap.mmap(-1, 4 * MIB)
        region.write(b"x" * (4 * MIB))
        return region
    assert _grown(touched) >= 3.5 * MIB


def test_files_in_the_private_folder_count(tmp_path):
    def written():
        path = tmp_path / "state.bin"
        path.write_bytes(b"\0" * (2 * MIB))
        return path
    assert _grown(written, str(tmp_path)) >= 2 * MIB
    assert measure(None).files == 0


def test_memory_let_go_of_does_not_count():
    before = measure()
    for _ in range(5):
        scratch = torch.randn(2 * MIB)  # 8 MiB, freed at the next line
        del scratch
    assert measure().growth_since(before) < MIB


def test_growth_is_the_larger_of_heap_and_resident_plus_files():
    before = ProcessMemory(heap=100, resident=1000, files=0)
    assert ProcessMemory(heap=600, resident=1200, files=50).growth_since(before) == 500 + 50
    assert ProcessMemory(heap=50, resident=900, files=0).growth_since(before) == 0
