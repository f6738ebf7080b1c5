"""Whether the installed torch's CUDA build suits this node's NVIDIA driver, and which to install.

A CUDA build of torch runs only on a driver that supports at least its CUDA major version
(within one major version, CUDA's minor-version compatibility lets an older driver run it).
A CUDA 13 wheel on a 12.x driver therefore cannot use the GPUs at all; a CPU wheel on a GPU
node cannot either. Both would silently fall back to gloo on CPU, so :func:`mismatch` says
which it is and how to fix it, for ``labutils doctor`` and the backend choice.

This file needs only the standard library, so the install can run it before anything else
is installed::

    python3 labutils/devices/cuda_build.py --index-url    # the wheel index matching the driver, or nothing

prints nothing on a machine without an NVIDIA driver (keep the plain pin there).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

#: the pinned torch
TORCH_PIN = "torch==2.13.0"
#: CUDA variants whose wheel indexes PyTorch's download server serves for recent releases
#: (https://download.pytorch.org/whl/<tag>); the install falls back to the plain pin if the
#: chosen index lacks the pin
WHEEL_TAGS = ("cu118", "cu126", "cu128", "cu129", "cu130")
INDEX = "https://download.pytorch.org/whl/"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """"12.8" -> (12, 8); "" or None -> ()."""
    return tuple(int(part) for part in (text or "").split(".") if part.isdigit())


def tag_version(tag: str) -> tuple[int, int]:
    """"cu128" -> (12, 8); "cu130" -> (13, 0)."""
    digits = tag.removeprefix("cu")
    return int(digits[:-1]), int(digits[-1])


def wheel_tag_for(driver_cuda: str | None) -> str | None:
    """The newest wheel CUDA variant the driver (its newest CUDA, "12.8") can run; None without a driver."""
    supported = version_tuple(driver_cuda)
    if not supported:
        return None
    fitting = [tag for tag in WHEEL_TAGS if tag_version(tag) <= supported[:2]]
    return fitting[-1] if fitting else None


def install_command(driver_cuda: str | None) -> str:
    """The pip command that installs the pinned torch built for this driver."""
    tag = wheel_tag_for(driver_cuda)
    index = f" --index-url {INDEX}{tag}" if tag else ""
    return f"pip install --force-reinstall {TORCH_PIN}{index}"


def mismatch(torch_cuda: str | None, driver_cuda: str | None) -> str | None:
    """Why this torch build cannot use this driver's GPUs, with the fix; None when it can (or no driver).

    ``torch_cuda``: ``torch.version.cuda`` ("12.8"; None for a CPU build). ``driver_cuda``: the
    newest CUDA the driver supports (NVML ``nvmlSystemGetCudaDriverVersion`` as "12.8").
    """
    if not version_tuple(driver_cuda):
        return None
    fix = f"fix: {install_command(driver_cuda)} (in the course's venv), or update the NVIDIA driver"
    if torch_cuda is None:
        return (f"this torch is a CPU build but the NVIDIA driver here supports CUDA {driver_cuda}: "
                f"the GPUs cannot be used; {fix.replace(', or update the NVIDIA driver', '')}")
    if version_tuple(torch_cuda)[:1] > version_tuple(driver_cuda)[:1]:
        return (f"this torch was built for CUDA {torch_cuda} but the NVIDIA driver supports only CUDA "
                f"{driver_cuda}: the GPUs cannot be used; {fix}")
    return None


def driver_cuda_from_smi() -> str | None:
    """The newest CUDA the driver supports, as ``nvidia-smi`` prints it ("CUDA Version: 12.8"); None without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", done.stdout or "")
    return found.group(1) if found else None


def main(argv: list[str]) -> int:
    if argv != ["--index-url"]:
        print("usage: python3 labutils/devices/cuda_build.py --index-url", file=sys.stderr)
        return 2
    tag = wheel_tag_for(driver_cuda_from_smi())
    if tag:
        print(f"{INDEX}{tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
