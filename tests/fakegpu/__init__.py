"""A GPU node faked at its boundary, for tests on a CPU machine.

Only what the course reads from the outside world is replaced: the functions of the real
``pynvml`` module (NVML), ``torch.cuda``'s entry points and ``torch.version.cuda``,
``torch.distributed.is_nccl_available``, and the processes the course starts (``nvidia-smi
topo -m`` and the CUDA probe's throwaway Python). The course's own logic runs unchanged.

    node = FakeGpuNode(monkeypatch, h100s(8))                 # 8 H100s, driver CUDA 12.8, torch cu128
    node = FakeGpuNode(monkeypatch, h100s(8), driver_cuda=11080)          # driver too old
    node = FakeGpuNode(monkeypatch, h100s(8), cuda_init_error=FABRIC_MANAGER_DOWN)
    node = FakeGpuNode(monkeypatch, [h100(0, mig=[mig_1g(0, 0), mig_1g(0, 1)])])  # MIG on
    node = FakeGpuNode(monkeypatch, [], nvml="missing")                   # no driver
    node = FakeGpuNode(monkeypatch, [h100(0, compute_mode=3, processes=[os.getpid()])])  # exclusive, held

The figures are those of NVIDIA's H100 SXM (80 GiB HBM3, compute capability 9.0, PCIe Gen5
x16, 18 NVLinks; NVIDIA H100 Tensor Core GPU datasheet); UUIDs are made up.
"""
from __future__ import annotations

import os
import subprocess
import types
from dataclasses import dataclass, field

import pynvml
import torch
import torch.cuda.nccl
import torch.distributed as dist

H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 80 * 2**30  # bytes
#: what torch prints when the fabric manager of an NVSwitch machine is down
FABRIC_MANAGER_DOWN = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). ... Error 802: "
                       "system not yet initialized")


@dataclass
class FakeMig:
    """A MIG device: UUID, its own memory in bytes (``None``: NVML does not say), its name."""

    uuid: str
    memory: int | None = 10 * 2**30
    name: str = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


@dataclass
class FakeGpu:
    """A physical GPU. ``mig``: ``None`` = MIG mode off, a list = MIG mode on with these devices."""

    uuid: str
    name: str = H100_NAME
    memory: int | None = H100_MEMORY
    bus: str = "00000000:18:00.0"
    nvlinks: int = 18
    mig: list[FakeMig] | None = None
    compute_mode: int = 0  # NVML: 0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS
    processes: list[int] = field(default_factory=list)  # pids holding a CUDA context on it
    clocks: dict = field(default_factory=lambda: {"sm": 1980, "sm_max": 1980, "mem": 2619, "power_mw": 312_000,
                                                  "limit_mw": 700_000, "temp": 41, "throttle": 0})


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-1111-2222-3333-{index:012x}"


def h100(index: int, mig: list[FakeMig] | None = None, **fields) -> FakeGpu:
    return FakeGpu(uuid=gpu_uuid(index), bus=f"00000000:{0x18 + 0x10 * index:02x}:00.0", mig=mig, **fields)


def h100s(count: int) -> list[FakeGpu]:
    return [h100(index) for index in range(count)]


def mig_1g(gpu: int, slot: int, memory: int | None = 10 * 2**30) -> FakeMig:
    return FakeMig(uuid=f"MIG-{gpu:04x}{slot:04x}-aaaa-bbbb-cccc-{slot:012x}", memory=memory)


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeGpuNode:
    """Installs the fake with ``monkeypatch`` (undone after the test); see the module docstring.

    ``driver_cuda``: NVML's CUDA driver version (12080 = 12.8). ``torch_cuda``: the wheel's CUDA
    ("12.8"; ``None`` = CPU build). ``nvml``: "ok", "missing" (no library) or "no-driver".
    ``cuda_init_error``: the probe process fails with this message. ``topo``: text that
    ``nvidia-smi topo -m`` prints (``None``: no nvidia-smi).
    """

    def __init__(self, monkeypatch, gpus, driver_cuda=12080, torch_cuda="12.8", nvml="ok",
                 cuda_init_error=None, topo=None, nccl=True):
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # the suite hides real GPUs; a faked node has no mask
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        self.gpus, self.driver_cuda, self.nvml = list(gpus), driver_cuda, nvml
        self.cuda_init_error, self.topo = cuda_init_error, topo
        self.probe_runs = 0
        self._patch_nvml(monkeypatch)
        self._patch_torch(monkeypatch, torch_cuda, nccl)
        self._patch_processes(monkeypatch)
        # a cache of CUDA probes of its own, dropped after the test with the rest of the fake
        import functools

        from labutils.devices import cuda_probe

        monkeypatch.setattr(cuda_probe, "_health_for", functools.lru_cache(maxsize=None)(
            cuda_probe._health_for.__wrapped__))

    # ------------------------------------------------------------------ NVML
    def _handle(self, handle):
        kind, *where = handle
        if kind == "gpu":
            return self.gpus[where[0]]
        return self.gpus[where[0]].mig[where[1]]

    def _init(self):
        if self.nvml == "missing":
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if self.nvml == "no-driver":
            raise _error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def _by_index(self, index):
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", index)

    def _memory(self, handle):
        device = self._handle(handle)
        if device.memory is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(total=device.memory, used=0, free=device.memory)

    def _mig_mode(self, handle):
        gpu = self._handle(handle)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig is not None else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def _mig_handle(self, handle, slot):
        gpu = self._handle(handle)
        if gpu.mig is None or slot >= len(gpu.mig):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], slot)

    def _nvlink(self, handle, link):
        device = self._handle(handle)
        if handle[0] == "mig" or device.mig is not None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # NVLink belongs to the whole GPU
        return pynvml.NVML_FEATURE_ENABLED if link < device.nvlinks else pynvml.NVML_FEATURE_DISABLED

    def _clock(self, key):
        def read(handle, clock):
            clocks = self._handle(handle).clocks
            return clocks[key if clock == pynvml.NVML_CLOCK_SM else "mem"]
        return read

    def _patch_nvml(self, monkeypatch):
        def gpu_field(name):
            return lambda handle: getattr(self._handle(handle), name)

        def clock_field(name):
            return lambda handle, *rest: self._handle(handle).clocks[name]

        functions = {
            "nvmlInit": self._init, "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlSystemGetDriverVersion": lambda: "570.124.06",
            "nvmlSystemGetCudaDriverVersion": lambda: self.driver_cuda,
            "nvmlDeviceGetHandleByIndex": self._by_index,
            "nvmlDeviceGetName": gpu_field("name"), "nvmlDeviceGetUUID": gpu_field("uuid"),
            "nvmlDeviceGetMemoryInfo": self._memory,
            "nvmlDeviceGetCudaComputeCapability": lambda handle: (9, 0),
            "nvmlDeviceGetPciInfo": lambda handle: types.SimpleNamespace(busId=self._handle(handle).bus),
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda handle: 5,
            "nvmlDeviceGetMaxPcieLinkWidth": lambda handle: 16,
            "nvmlDeviceGetCurrPcieLinkGeneration": lambda handle: 5,
            "nvmlDeviceGetCurrPcieLinkWidth": lambda handle: 16,
            "nvmlDeviceGetNvLinkState": self._nvlink,
            "nvmlDeviceGetCpuAffinity": lambda handle, words: [0xFF] + [0] * (words - 1),
            "nvmlDeviceGetMigMode": self._mig_mode,
            "nvmlDeviceGetMaxMigDeviceCount": lambda handle: 7,
            "nvmlDeviceGetMigDeviceHandleByIndex": self._mig_handle,
            "nvmlDeviceGetClockInfo": self._clock("sm"), "nvmlDeviceGetMaxClockInfo": self._clock("sm_max"),
            "nvmlDeviceGetPowerUsage": clock_field("power_mw"),
            "nvmlDeviceGetEnforcedPowerLimit": clock_field("limit_mw"),
            "nvmlDeviceGetTemperature": clock_field("temp"),
            "nvmlDeviceGetCurrentClocksEventReasons": clock_field("throttle"),
            "nvmlDeviceGetComputeMode": gpu_field("compute_mode"),
            "nvmlDeviceGetComputeRunningProcesses": lambda handle: [
                types.SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self._handle(handle).processes],
            "nvmlDeviceGetCurrentClocksThrottleReasons": clock_field("throttle"),
        }
        for name, function in functions.items():
            monkeypatch.setattr(pynvml, name, function)

    # ------------------------------------------------------------------ torch
    def _patch_torch(self, monkeypatch, torch_cuda, nccl):
        works = torch_cuda is not None and self.cuda_init_error is None and self.nvml == "ok" and bool(self.gpus)
        monkeypatch.setattr(torch.version, "cuda", torch_cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: works)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.gpus) if works else 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: H100_NAME)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: types.SimpleNamespace(
            name=H100_NAME, total_memory=H100_MEMORY, major=9, minor=0, multi_processor_count=132,
            L2_cache_size=50 * 2**20))
        monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: True)
        monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl and torch_cuda is not None)
        monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))

    # ------------------------------------------------------------------ processes
    def _patch_processes(self, monkeypatch):
        from labutils.devices.cuda_probe import PROBE_CODE

        real_run, real_which = subprocess.run, __import__("shutil").which

        def run(args, *positional, **options):
            if isinstance(args, (list, tuple)) and PROBE_CODE in args:
                return self._probe(args)
            if isinstance(args, (list, tuple)) and args and str(args[0]).endswith("nvidia-smi"):
                return subprocess.CompletedProcess(args, 0, self.topo or "", "")
            return real_run(args, *positional, **options)

        def which(name, *rest, **options):
            if name == "nvidia-smi":
                return "/usr/bin/nvidia-smi" if self.topo is not None else None
            return real_which(name, *rest, **options)

        monkeypatch.setattr(subprocess, "run", run)
        monkeypatch.setattr("shutil.which", which)

    def _probe(self, args):
        """What ``python -c PROBE_CODE`` prints on this node."""
        self.probe_runs += 1
        if self.cuda_init_error is not None:
            return subprocess.CompletedProcess(args, 1, "", f"Traceback (most recent call last):\n{self.cuda_init_error}\n")
        return subprocess.CompletedProcess(args, 0, f"{len(self.gpus)}\n", "")
