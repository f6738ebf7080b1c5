"""labutils.machine.hardware: GPU inventory (NVML), CPUs and NUMA, live topology, peer access.

On this CPU machine the NVML paths run against a fake pynvml module and sysfs/procfs
against fake trees under tmp_path; the real-GPU checks are marked ``gpu``.
"""
from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path

import pytest

from labutils.machine import hardware
from labutils.devices.backend import visible_gpu_count
from labutils.machine.topology import Topology

SHIPPED_TOPO = Path(__file__).resolve().parents[1] / "labutils" / "data" / "topo"  # real outputs, as captured


# ----------------------------------------------------------------------------- a fake NVML


class FakeNVMLError(Exception):
    pass


class FakeLibraryNotFound(FakeNVMLError):
    pass


class FakeDriverNotLoaded(FakeNVMLError):
    pass


def fake_pynvml(gpus, init_error=None, nvlink_states=None, cpu_mask=None):
    """A stand-in for pynvml: ``gpus`` is a list of dicts (name, total, cc, bus, pcie, links)."""
    calls = {"init": 0, "shutdown": 0}

    def unsupported(*args):
        raise FakeNVMLError("Not Supported")

    def init():
        calls["init"] += 1
        if init_error is not None:
            raise init_error

    def nvlink_state(handle, link):
        states = gpus[handle].get("links")
        if states is None or link >= len(states):
            raise FakeNVMLError("Not Supported" if states is None else "Invalid Argument")
        return states[link]

    module = types.SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVMLError_LibraryNotFound=FakeLibraryNotFound,
        NVMLError_DriverNotLoaded=FakeDriverNotLoaded,
        NVML_NVLINK_MAX_LINKS=36,
        NVML_FEATURE_ENABLED=1,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda h: gpus[h]["name"],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=gpus[h]["total"]),
        nvmlDeviceGetCudaComputeCapability=lambda h: gpus[h]["cc"],
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=gpus[h]["bus"]),
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: gpus[h]["pcie"][0],
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: gpus[h]["pcie"][1],
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: gpus[h]["pcie"][2],
        nvmlDeviceGetCurrPcieLinkWidth=unsupported,
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetCpuAffinity=(lambda h, words: cpu_mask) if cpu_mask is not None else unsupported,
    )
    return module, calls


H100 = dict(name="NVIDIA H100 80GB HBM3", total=85_899_345_920, cc=(9, 0), bus=b"00000000:18:00.0",
            pcie=(5, 16, 1), links=[1] * 18)
RTX = dict(name="NVIDIA GeForce RTX 3090", total=25_769_803_776, cc=(8, 6), bus="00000000:AF:00.0",
           pcie=(4, 16, 4), links=None)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_sysfs(tmp_path):
    write(tmp_path / "sys/bus/pci/devices/0000:18:00.0/numa_node", "1\n")
    write(tmp_path / "sys/bus/pci/devices/0000:18:00.0/local_cpulist", "32-63,96-127\n")
    write(tmp_path / "sys/bus/pci/devices/0000:af:00.0/numa_node", "-1\n")
    return tmp_path


def test_gpu_report_from_nvml_and_sysfs(monkeypatch, fake_sysfs):
    module, calls = fake_pynvml([H100, RTX], cpu_mask=[0b1011, 1])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # only the RTX: it is cuda:0 here
    report = hardware.gpu_report(sys_root=fake_sysfs)
    assert report.reason is None and report.visible_gpus == 1
    assert (report.driver_version, report.cuda_driver_version) == ("580.159.04", "13.0")
    h100, rtx = report.gpus
    assert h100 == hardware.GpuInfo(
        index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=85_899_345_920, compute_capability=(9, 0),
        pci_bus_id="0000:18:00.0", pcie_generation_max=5, pcie_width_max=16, pcie_generation_current=1,
        pcie_width_current=None, nvlinks_up=18, numa_node=1,
        cpus=tuple(range(32, 64)) + tuple(range(96, 128)), cuda_ordinal=None,
    )
    assert rtx.cuda_ordinal == 0
    # no NVLink, numa_node -1 (single node), no local_cpulist: CPUs from NVML's affinity mask
    assert rtx.nvlinks_up is None and rtx.numa_node is None and rtx.pci_bus_id == "0000:af:00.0"
    assert rtx.cpus == (0, 1, 3, 64)
    assert calls == {"init": 1, "shutdown": 1}
    text = report.summary()
    assert "2 GPUs (driver 580.159.04, supports CUDA 13.0, 1 visible to CUDA here)" in text
    assert "GPU0 [not visible] NVIDIA H100 80GB HBM3, 85.9 GB (80.0 GiB), compute capability 9.0, PCIe Gen5 x16, 18 NVLinks up" in text
    assert "NUMA node 1, CPUs 32-63,96-127" in text and "GPU1 [cuda:0] NVIDIA GeForce RTX 3090" in text
    assert "no NVLink" in text


def test_nvlinks_counted_only_when_active(monkeypatch, fake_sysfs):
    module, _ = fake_pynvml([dict(H100, links=[1, 0, 1, 0])])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert hardware.gpu_report(sys_root=fake_sysfs).gpus[0].nvlinks_up == 2


@pytest.mark.parametrize(
    "error, reason",
    [
        (FakeLibraryNotFound(), "no GPU: the NVML library was not found"),
        (FakeDriverNotLoaded(), "no GPU: the NVIDIA driver is not loaded"),
        (FakeNVMLError("Unknown Error"), "no GPU: NVML could not start (Unknown Error)"),
    ],
)
def test_no_driver_gives_a_reason_not_an_exception(monkeypatch, error, reason):
    module, calls = fake_pynvml([H100], init_error=error)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    report = hardware.gpu_report()
    assert report.gpus == () and report.reason.startswith(reason)
    assert str(report) == report.reason and calls["shutdown"] == 0
    assert hardware.list_gpus() == []


def test_no_gpu_and_no_pynvml(monkeypatch):
    module, _ = fake_pynvml([])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert hardware.gpu_report().reason == "no GPU: NVML found no NVIDIA GPU"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert hardware.gpu_report().reason == "no GPU: nvidia-ml-py (pynvml) is not installed"


# ----------------------------------------------------------------------------- sysfs and procfs


def test_sysfs_pci_address():
    assert hardware.sysfs_pci_address(b"00000000:18:00.0") == "0000:18:00.0"
    assert hardware.sysfs_pci_address("00000001:AF:00.0") == "0001:af:00.0"
    assert hardware.sysfs_pci_address("0000:3b:00.0") == "0000:3b:00.0"
    with pytest.raises(ValueError, match="not a PCI bus id"):
        hardware.sysfs_pci_address("GPU-1234")


def test_pci_numa_node_and_local_cpus(fake_sysfs):
    assert hardware.pci_numa_node("0000:18:00.0", fake_sysfs) == 1
    assert hardware.pci_numa_node("0000:af:00.0", fake_sysfs) is None  # -1: single node
    assert hardware.pci_numa_node("0000:00:00.0", fake_sysfs) is None  # no such device
    assert hardware.pci_local_cpus("0000:18:00.0", fake_sysfs)[:2] == (32, 33)
    assert hardware.pci_local_cpus("0000:af:00.0", fake_sysfs) == ()


def test_cpus_from_mask_words():
    assert hardware.cpus_from_mask_words([0b1011, 1]) == (0, 1, 3, 64)
    assert hardware.cpus_from_mask_words([0, 0]) == ()


def cpuinfo_block(processor, socket, core):
    return (
        f"processor\t: {processor}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
        f"physical id\t: {socket}\ncore id\t\t: {core}\n"
    )


def test_cpu_info_from_a_fake_tree(tmp_path):
    # 2 sockets x 2 cores x 2 hardware threads = 8 logical CPUs
    blocks = [cpuinfo_block(cpu, cpu // 2 % 2, cpu % 2) for cpu in range(8)]
    write(tmp_path / "proc/cpuinfo", "\n".join(blocks) + "\n")
    write(tmp_path / "sys/devices/system/node/node0/cpulist", "0-1,4-5\n")
    write(tmp_path / "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       1000000 kB\nNode 0 MemFree: 5 kB\n")
    write(tmp_path / "sys/devices/system/node/node1/cpulist", "2-3,6-7\n")
    write(tmp_path / "sys/devices/system/node/node10/cpulist", "\n")  # a memory-only node
    write(tmp_path / "sys/devices/system/node/possible", "0-1,10\n")
    info = hardware.cpu_info(tmp_path)
    assert info.model == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    assert (info.logical_cpus, info.physical_cores, info.sockets) == (8, 4, 2)
    assert info.numa_nodes == (
        hardware.NumaNode(0, (0, 1, 4, 5), 1_024_000_000),
        hardware.NumaNode(1, (2, 3, 6, 7), None),
        hardware.NumaNode(10, (), None),
    )
    text = info.summary()
    assert "8 logical CPUs, 4 physical cores, 2 sockets" in text
    assert "NUMA node 0: CPUs 0-1,4-5, 1.0 GB" in text and "NUMA node 10: CPUs none" in text


def test_cpu_info_without_proc_or_sys(tmp_path):
    info = hardware.cpu_info(tmp_path)
    assert info.logical_cpus == os.cpu_count()
    assert info.physical_cores is None and info.sockets is None and info.numa_nodes == ()
    assert len(info.usable_cpus) >= 1


# ----------------------------------------------------------------------------- topology, P2P


def fake_nvidia_smi(tmp_path, monkeypatch, script: str) -> None:
    path = tmp_path / "bin" / "nvidia-smi"
    write(path, "#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")


def test_live_topology_from_nvidia_smi(tmp_path, monkeypatch):
    fixture = SHIPPED_TOPO / "07_pcie_8x_rtx3090_pix_phb_sys_issue.txt"
    fake_nvidia_smi(tmp_path, monkeypatch, f'[ "$1 $2" = "topo -m" ] && exec cat "{fixture}"')
    topology = hardware.live_topology()
    assert isinstance(topology, Topology) and topology.link("GPU0", "GPU1") == "PIX"
    inventory = hardware.inventory()
    assert inventory.topology == topology and inventory.topology_reason is None
    assert "{GPU0..GPU3} and {GPU4..GPU7} only over SYS: cross-socket" in str(inventory)


@pytest.mark.parametrize(
    "script, reason",
    [
        ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
         "nvidia-smi topo -m exited 9 (NVIDIA-SMI has failed"),
        ("echo 'nothing useful'", "could not read nvidia-smi topo -m (no `nvidia-smi topo -m` matrix found"),
        ("exec sleep 5", "nvidia-smi topo -m failed"),
    ],
)
def test_live_topology_failures_are_reasons(tmp_path, monkeypatch, script, reason):
    fake_nvidia_smi(tmp_path, monkeypatch, script)
    topology, why = hardware.live_topology_and_reason(timeout_s=3.0)  # an echo has time even when busy; sleep 5 has not
    assert topology is None and reason in why


def test_no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    assert hardware.live_topology() is None
    assert "nvidia-smi not found" in hardware.live_topology_and_reason()[1]


def test_peer_access_without_gpus(monkeypatch):
    monkeypatch.setattr(hardware, "visible_gpu_count", lambda: 0)
    access = hardware.peer_access()
    assert access.can_access == () and access.reason == "no GPU: no CUDA GPU visible"


def test_peer_access_with_a_cpu_build_of_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch can use CUDA")
    monkeypatch.setattr(hardware, "visible_gpu_count", lambda: 1)  # NVML sees a GPU, torch cannot
    assert hardware.peer_access().reason.startswith("no GPU: this torch cannot use CUDA")


def test_peer_access_summary():
    assert hardware.PeerAccess(((True, True), (True, True))).summary() == (
        "every pair of the 2 GPUs has peer-to-peer access"
    )
    assert "cuda:1->cuda:0" in hardware.PeerAccess(((True, True), (False, True))).summary()
    assert hardware.PeerAccess(((True,),)).summary() == "1 GPU: no peer to access"


@pytest.mark.skipif(visible_gpu_count() > 0, reason="this machine has a GPU")
def test_everything_answers_cleanly_on_this_cpu_machine():
    inventory = hardware.inventory()
    assert inventory.gpus.gpus == () and inventory.gpus.reason.startswith("no GPU:")
    assert inventory.peer_access.reason.startswith("no GPU:")
    assert hardware.list_gpus() == [] and hardware.peer_access().can_access == ()
    text = str(inventory)
    for title in ("GPUs:", "CPU:", "Topology (nvidia-smi topo -m):", "Peer-to-peer access:"):
        assert title in text
    assert "no GPU:" in text and inventory._repr_html_().startswith("<pre>")
    assert hardware.cpu_info().logical_cpus >= 1


def test_import_does_not_load_torch_or_pynvml():
    import subprocess

    code = "import sys, labutils.machine.hardware; print('torch' in sys.modules, 'pynvml' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------------------- real GPUs


def _needs_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: torch.cuda.is_available() is False")
    return torch


@pytest.mark.gpu
def test_real_gpus_are_listed():
    torch = _needs_cuda()
    gpus = hardware.list_gpus()
    assert len(gpus) >= torch.cuda.device_count()
    for gpu in gpus:
        assert gpu.name and gpu.memory_total_bytes > 0 and gpu.compute_capability[0] >= 3
        assert gpu.pcie_width_max is None or gpu.pcie_width_max in (1, 2, 4, 8, 16, 32)


@pytest.mark.gpu
def test_real_peer_access_and_topology():
    torch = _needs_cuda()
    count = torch.cuda.device_count()
    access = hardware.peer_access()
    assert access.reason is None and len(access.can_access) == count
    assert all(access.can_access[i][i] for i in range(count))
    topology = hardware.live_topology()
    assert topology is not None and len(topology.gpus) == len(hardware.list_gpus())
