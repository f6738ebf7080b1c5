"""Which GPUs each student's server sees on a shared node: ``CUDA_VISIBLE_DEVICES`` by policy.

The hub sets ``CUDA_VISIBLE_DEVICES`` for each student's server before it starts, from the
course's roster and one of these policies (``grading/hub/course_hub.toml``):

- ``blocks``: N whole GPUs per student, never shared; a student beyond the node's blocks
  gets a clear refusal instead of a server (the instructor adds a node or lowers N);
- ``round_robin``: N whole GPUs per student, blocks handed out in turn, so with more
  students than blocks several students share a block (each still sees only its GPUs);
- ``mig``: one MIG slice per student (an A100/H100 partitioned with ``nvidia-smi mig``),
  never shared.

Devices are named by UUID (``GPU-...``, ``MIG-...``), which CUDA accepts in
``CUDA_VISIBLE_DEVICES`` and which, unlike ordinals, do not change with the mask. On a node
without GPUs every student gets the empty mask: the labs run on gloo (CPU).
"""
from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("blocks", "round_robin", "mig")


class NoDeviceLeft(RuntimeError):
    """The policy has no device for this student; the message says why and what to change."""


@dataclass(frozen=True)
class NodeDevices:
    """What the node has: whole GPUs and MIG slices, by UUID, in NVML's order."""

    gpus: tuple[str, ...] = ()
    mig_slices: tuple[str, ...] = ()


def discover() -> NodeDevices:
    """The node's GPUs and MIG slices from NVML; none when NVML (a driver) is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: a CPU node
        return NodeDevices()
    try:
        gpus, slices = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(_text(pynvml.nvmlDeviceGetUUID(handle)))
            slices += _mig_slices(pynvml, handle)
        return NodeDevices(tuple(gpus), tuple(slices))
    finally:
        pynvml.nvmlShutdown()


def _mig_slices(pynvml, handle) -> list[str]:
    """UUIDs of the MIG devices of one GPU (empty when MIG is off or unsupported)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return []
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return []
    slices = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            slices.append(_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))))
        except pynvml.NVMLError:  # an empty slot
            continue
    return slices


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_devices(policy: str, student: str, roster: list[str], node: NodeDevices,
                    gpus_per_student: int = 1) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value for ``student`` (comma-separated UUIDs, or "")."""
    if policy not in POLICIES:
        raise ValueError(f"unknown GPU policy {policy!r}: choose one of {', '.join(POLICIES)}")
    if gpus_per_student < 1:
        raise ValueError(f"gpus_per_student must be at least 1, got {gpus_per_student}")
    if student not in roster:
        raise NoDeviceLeft(f"{student} is not on the course roster, so no GPU is assigned")
    position = sorted(roster).index(student)
    if policy == "mig":
        return _exclusive(node.mig_slices, position, 1, student, "MIG slice") if node.mig_slices or node.gpus else ""
    if not node.gpus:
        return ""
    if policy == "blocks":
        return _exclusive(node.gpus, position, gpus_per_student, student, "block of GPUs")
    blocks = _blocks(node.gpus, gpus_per_student, student)
    return ",".join(blocks[position % len(blocks)])


def _blocks(devices: tuple[str, ...], size: int, student: str) -> list[tuple[str, ...]]:
    if size > len(devices):
        raise NoDeviceLeft(f"{student} would need {size} GPUs per student; this node has {len(devices)}")
    return [devices[start:start + size] for start in range(0, len(devices) - size + 1, size)]


def _exclusive(devices: tuple[str, ...], position: int, size: int, student: str, what: str) -> str:
    blocks = _blocks(devices, size, student) if devices else []
    if position >= len(blocks):
        raise NoDeviceLeft(f"no {what} left for {student}: the node has {len(blocks)} and {student} is "
                           f"student {position + 1} of the roster (use round_robin to share, or add a node)")
    return ",".join(blocks[position])
