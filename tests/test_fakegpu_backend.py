"""What backend="auto" picks on faked GPU nodes, and how CUDA_VISIBLE_DEVICES is read."""
from __future__ import annotations

import pytest
from fakegpu import FABRIC_MANAGER_DOWN, FakeGpuNode, gpu_uuid, h100, h100s, mig_1g

from labutils.devices import backend
from labutils.devices.backend import BackendUnavailableError, choose_backend, visible_cuda_devices, visible_gpu_count

pytestmark = pytest.mark.fakegpu


def physical(devices):
    return [(device.cuda_ordinal, device.gpu_index, device.mig_uuid) for device in devices]


@pytest.mark.parametrize("count", [1, 4, 8])
def test_every_h100_is_visible_without_a_mask(monkeypatch, count):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeGpuNode(monkeypatch, h100s(count))
    assert visible_gpu_count() == count
    choice = choose_backend("auto", count)
    assert (choice.backend, choice.device_type) == ("nccl", "cuda")
    assert choice.reason == f"NCCL, one GPU per rank ({count} visible)"


def test_one_h100_and_two_ranks_fall_back_to_gloo(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeGpuNode(monkeypatch, h100s(1))
    choice = choose_backend("auto", 2)
    assert choice.backend == "gloo" and "2 ranks asked but only 1 GPU(s) visible" in choice.reason
    with pytest.raises(BackendUnavailableError, match="2 ranks asked, 1 GPU visible"):
        choose_backend("nccl", 2)


@pytest.mark.parametrize("mask, expected", [
    ("4,5,6,7", [(0, 4, None), (1, 5, None), (2, 6, None), (3, 7, None)]),
    ("2,1", [(0, 2, None), (1, 1, None)]),               # CUDA numbers them in the order listed
    ("0,2,-1,1", [(0, 0, None), (1, 2, None)]),          # a negative entry ends the list
    ("0,9,1", [(0, 0, None)]),                           # so does an ordinal past the last GPU
    ("0,,1", [(0, 0, None)]),                            # and an empty entry
    ("1gpu,3", [(0, 1, None), (1, 3, None)]),            # read like strtoul: "1gpu" is 1
    ("0,0", []),                                         # a repeated ordinal empties the list
    ("1,2,1", []),
    ("", []),                                            # empty: no GPU
    ("-1", []),
])
def test_ordinal_masks_as_cuda_reads_them(monkeypatch, mask, expected):
    FakeGpuNode(monkeypatch, h100s(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    assert physical(visible_cuda_devices()) == expected


def test_uuid_masks_full_prefix_unknown_and_ambiguous(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu_uuid(6)},{gpu_uuid(3)[:12]}")
    assert physical(visible_cuda_devices()) == [(0, 6, None), (1, 3, None)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu_uuid(2)},GPU-ffffffff,{gpu_uuid(5)}")
    assert physical(visible_cuda_devices()) == [(0, 2, None)]          # unknown UUID ends the list
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu_uuid(2)},GPU-0000000")
    assert physical(visible_cuda_devices()) == [(0, 2, None)]          # a prefix of several GPUs: ambiguous
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu_uuid(2)},{gpu_uuid(2)}")
    assert visible_cuda_devices() == []                                # repeated
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu_uuid(2)},3")
    assert physical(visible_cuda_devices()) == [(0, 2, None)]          # kinds do not mix


def test_mig_uuids_give_one_device_per_process(monkeypatch):
    migs = [mig_1g(0, slot) for slot in range(3)]
    FakeGpuNode(monkeypatch, [h100(0, mig=migs), h100(1)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(mig.uuid for mig in migs))
    assert physical(visible_cuda_devices()) == [(0, 0, migs[0].uuid)]
    choice = choose_backend("auto", 2)
    assert choice.backend == "gloo" and "only 1 GPU(s) visible" in choice.reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{migs[1].uuid},{migs[1].uuid}")
    assert visible_cuda_devices() == []


def test_mig_mode_without_a_mask(monkeypatch):
    """A GPU in MIG mode is not a CUDA device itself; its first MIG device is, and only one per process."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    first, second = [mig_1g(0, 0), mig_1g(0, 1)], [mig_1g(1, 0)]
    FakeGpuNode(monkeypatch, [h100(0, mig=first), h100(1, mig=second), h100(2), h100(3)])
    assert physical(visible_cuda_devices()) == [(0, 0, first[0].uuid), (1, 2, None), (2, 3, None)]
    assert visible_gpu_count() == 3  # not 4 GPUs, not 3 MIG devices + 2 GPUs


def test_driver_too_old_for_the_wheel(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    node = FakeGpuNode(monkeypatch, h100s(8), driver_cuda=11080, torch_cuda="12.8")
    choice = choose_backend("auto", 8)
    assert choice.backend == "gloo"
    assert "built for CUDA 12.8 but the NVIDIA driver supports only CUDA 11.8" in choice.reason
    assert "--index-url https://download.pytorch.org/whl/cu118" in choice.reason  # the fix
    with pytest.raises(BackendUnavailableError, match="supports only CUDA 11.8"):
        choose_backend("nccl", 8)
    assert node.probe_runs == 0  # NVML's answer was enough


def test_fabric_manager_down_is_probed_once(monkeypatch):
    """NVML lists 8 GPUs but CUDA cannot initialise (error 802): gloo, with CUDA's message."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    node = FakeGpuNode(monkeypatch, h100s(8), cuda_init_error=FABRIC_MANAGER_DOWN)
    for world_size in (2, 4, 8):
        choice = choose_backend("auto", world_size)
        assert choice.backend == "gloo" and "Error 802: system not yet initialized" in choice.reason
    assert node.probe_runs == 1


def test_same_major_older_minor_is_left_to_the_probe(monkeypatch):
    """CUDA minor-version compatibility: a 12.4 driver may run a 12.8 wheel; the probe decides."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    node = FakeGpuNode(monkeypatch, h100s(2), driver_cuda=12040)
    assert choose_backend("auto", 2).backend == "nccl" and node.probe_runs == 1


def test_cpu_build_of_torch_on_a_gpu_node(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeGpuNode(monkeypatch, h100s(8), torch_cuda=None)
    choice = choose_backend("auto", 8)
    assert choice.backend == "gloo" and "CPU build" in choice.reason


@pytest.mark.parametrize("nvml", ["missing", "no-driver"])
def test_nvml_missing_means_no_gpu(monkeypatch, nvml):
    FakeGpuNode(monkeypatch, h100s(8), nvml=nvml)
    assert backend.visible_gpu_count() == 0
    assert choose_backend("auto", 2).reason == "gloo on CPU: no CUDA GPU visible"


def test_pynvml_not_installed(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert visible_gpu_count() == 0 and choose_backend("auto", 2).backend == "gloo"
