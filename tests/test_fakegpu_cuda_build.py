"""torch's CUDA build against the driver (faked NVML), and GPUs in EXCLUSIVE_PROCESS mode."""
from __future__ import annotations

import os

import pytest
from fakegpu import FakeGpuNode, h100, h100s

from labutils.command import doctor
from labutils.devices import cuda_build, gpu_exclusive
from labutils.devices.backend import BackendUnavailableError, choose_backend

pytestmark = pytest.mark.fakegpu


def test_a_cuda_13_wheel_on_a_12_driver_is_named_in_the_backend_choice_not_a_silent_gloo(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8), driver_cuda=12080, torch_cuda="13.0")
    reason = choose_backend("auto", 8).reason
    assert "built for CUDA 13.0 but the NVIDIA driver supports only CUDA 12.8" in reason
    assert "pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" in reason


def test_asking_nccl_with_the_wrong_cuda_build_fails_with_the_fix(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(2), driver_cuda=12040, torch_cuda="13.0")
    with pytest.raises(BackendUnavailableError, match="whl/cu118"):  # 12.4: cu118 is the newest it runs
        choose_backend("nccl", 2)


def test_a_cpu_wheel_on_a_gpu_node_says_the_gpus_cannot_be_used_and_how_to_install_cuda(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(4), driver_cuda=13000, torch_cuda=None)
    reason = choose_backend("auto", 4).reason
    assert "CPU build but the NVIDIA driver here supports CUDA 13.0" in reason and "whl/cu130" in reason


def test_a_cpu_wheel_on_a_cpu_machine_stays_quiet_about_cuda(monkeypatch):
    FakeGpuNode(monkeypatch, [], nvml="missing", torch_cuda=None)
    assert "pip install" not in choose_backend("auto", 2).reason
    assert cuda_build.mismatch(None, None) is None


@pytest.mark.parametrize("driver, tag", [("12.8", "cu128"), ("12.9", "cu129"), ("13.1", "cu130"), ("12.6", "cu126"),
                                         ("12.4", "cu118"), ("11.4", None), (None, None)])
def test_the_wheel_index_is_the_newest_the_driver_runs_so_install_never_picks_a_cuda_it_cannot_use(driver, tag):
    assert cuda_build.wheel_tag_for(driver) == tag


@pytest.mark.parametrize("torch_cuda, driver", [("12.8", "12.4"), ("12.6", "13.0"), ("13.0", "13.0")])
def test_a_wheel_within_the_drivers_major_version_is_not_called_a_mismatch(torch_cuda, driver):
    assert cuda_build.mismatch(torch_cuda, driver) is None


def test_install_reads_the_drivers_cuda_from_nvidia_smi(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(1), topo="| NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8 |")
    assert cuda_build.driver_cuda_from_smi() == "12.8"


def test_install_on_a_machine_without_nvidia_smi_keeps_the_plain_pin(monkeypatch, capsys):
    FakeGpuNode(monkeypatch, [], nvml="missing", topo=None)
    assert cuda_build.main(["--index-url"]) == 0 and capsys.readouterr().out == ""


def test_doctor_says_loudly_when_the_cuda_build_cannot_use_the_driver(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(2), driver_cuda=12080, torch_cuda="13.0")
    text = doctor.environment_text()
    assert "CUDA build  WRONG FOR THIS DRIVER: this torch was built for CUDA 13.0" in text and "whl/cu128" in text


def test_doctor_names_gpus_in_exclusive_process_mode(monkeypatch):
    FakeGpuNode(monkeypatch, [h100(0, compute_mode=3), h100(1)])
    assert gpu_exclusive.compute_modes() == {0: "EXCLUSIVE_PROCESS", 1: "DEFAULT"}
    assert "GPU mode    GPU0 EXCLUSIVE_PROCESS: one process per GPU" in doctor.environment_text()


def test_a_kernel_holding_an_exclusive_gpu_fails_the_launch_before_rank_0_does(monkeypatch):
    import labutils

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeGpuNode(monkeypatch, [h100(0, compute_mode=3, processes=[os.getpid()]), h100(1, compute_mode=3)])
    pool = labutils.Pool(2, backend="nccl")
    with pytest.raises(gpu_exclusive.GpuTakenByThisProcess, match="GPU0 is in EXCLUSIVE_PROCESS .* rank 0 could not"):
        pool.start()
    assert not pool.started


def test_an_exclusive_gpu_held_by_another_process_is_not_blamed_on_the_kernel(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeGpuNode(monkeypatch, [h100(0, compute_mode=3, processes=[os.getpid() + 1]), h100(1)])
    gpu_exclusive.check_ranks_can_own(2)


def test_a_kernel_context_on_a_gpu_the_ranks_do_not_use_is_allowed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    FakeGpuNode(monkeypatch, [h100(0, compute_mode=3, processes=[os.getpid()]), h100(1), h100(2)])
    gpu_exclusive.check_ranks_can_own(2)


def test_labutils_asks_nvml_not_cuda_so_choosing_a_backend_creates_no_context_in_the_kernel(monkeypatch):
    import torch

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA was initialised in the kernel")

    FakeGpuNode(monkeypatch, h100s(8))
    for name in ("init", "_lazy_init", "set_device", "current_device", "device_count", "is_available"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    assert choose_backend("auto", 8).backend == "nccl"
    gpu_exclusive.check_ranks_can_own(8)
    import labutils

    assert labutils.Pool(8).backend == "nccl"  # a pool decided, nothing started, still no CUDA here
