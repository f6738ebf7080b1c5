"""The state of the visible GPUs while a benchmark runs: clocks, power, temperature, throttle reasons.

A figure measured on a GPU means little without them: a GPU capped by power or heat runs
its SM clock below the maximum, and a benchmark then reads low. ``gpu_state()`` reads them
through NVML for every GPU this process's CUDA may use (``CUDA_VISIBLE_DEVICES`` applied);
``[]`` without NVML or without GPUs. Units: MHz for clocks, W for power, degrees C.
"""
from __future__ import annotations

import os

from labutils.devices.cuda_visible import ENV, visible_devices
from labutils.machine._nvml_devices import NoGpu, ask, open_nvml, read_gpu

#: NVML's clock throttle (clock event) reason bits, nvml.h nvmlClocksThrottleReason*
THROTTLE_REASONS = {
    0x1: "idle", 0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
    0x80: "hardware power brake", 0x100: "display clock setting",
}
_CLOCK_SM, _CLOCK_MEM = 1, 2  # NVML_CLOCK_SM, NVML_CLOCK_MEM
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU


def throttle_reasons(mask: int | None) -> list[str] | None:
    """The names of the bits set in NVML's throttle-reason mask ("none" when 0); ``None`` when unknown."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    return names or ["none"]


def _milliwatts_to_watts(value) -> float | None:
    return value / 1000.0 if value is not None else None


def _one_gpu(pynvml, index: int, cuda_ordinal: int) -> dict:
    handle = ask(pynvml, "nvmlDeviceGetHandleByIndex", index)
    reasons = ask(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = ask(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    name = ask(pynvml, "nvmlDeviceGetName", handle)
    return {
        "gpu": index,
        "cuda_ordinal": cuda_ordinal,
        "name": name.decode() if isinstance(name, bytes) else name,
        "sm_clock_mhz": ask(pynvml, "nvmlDeviceGetClockInfo", handle, _CLOCK_SM),
        "sm_clock_max_mhz": ask(pynvml, "nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM),
        "memory_clock_mhz": ask(pynvml, "nvmlDeviceGetClockInfo", handle, _CLOCK_MEM),
        "power_w": _milliwatts_to_watts(ask(pynvml, "nvmlDeviceGetPowerUsage", handle)),
        "power_limit_w": _milliwatts_to_watts(ask(pynvml, "nvmlDeviceGetEnforcedPowerLimit", handle)),
        "temperature_c": ask(pynvml, "nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
        "throttle_reasons": throttle_reasons(reasons),
    }


def gpu_state() -> list[dict]:
    """Clocks, power, temperature and throttle reasons of each GPU CUDA may use here, in CUDA order."""
    try:
        with open_nvml() as pynvml:
            count = ask(pynvml, "nvmlDeviceGetCount") or 0
            gpus = [read_gpu(pynvml, index, ask(pynvml, "nvmlDeviceGetHandleByIndex", index))
                    for index in range(count)]
            visible = visible_devices(
                os.environ.get(ENV), [gpu.uuid or "" for gpu in gpus], [bool(gpu.mig_enabled) for gpu in gpus],
                {mig.uuid: gpu.index for gpu in gpus for mig in gpu.mig_devices},
            )
            return [_one_gpu(pynvml, device.gpu_index, device.cuda_ordinal) for device in visible]
    except NoGpu:
        return []


def state_text(entry: dict) -> str:
    """One line: "GPU4 (cuda:0) NVIDIA H100 80GB HBM3: SM 1980/1980 MHz, memory 2619 MHz, 312/700 W, 41 C,
    throttle: none"."""
    def value(key, unit=""):
        number = entry.get(key)
        return "?" if number is None else f"{number:.0f}{unit}"

    reasons = entry.get("throttle_reasons")
    return (f"GPU{entry['gpu']} (cuda:{entry['cuda_ordinal']}) {entry.get('name') or 'GPU'}: "
            f"SM {value('sm_clock_mhz')}/{value('sm_clock_max_mhz')} MHz, memory {value('memory_clock_mhz')} MHz, "
            f"{value('power_w')}/{value('power_limit_w')} W, {value('temperature_c')} C, "
            f"throttle: {', '.join(reasons) if reasons else '?'}")
