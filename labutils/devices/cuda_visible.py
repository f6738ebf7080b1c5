"""Which physical GPUs a CUDA process gets, read from ``CUDA_VISIBLE_DEVICES`` the way CUDA reads it.

The rule (CUDA C++ Programming Guide, "CUDA Environment Variables"; pytorch/pytorch
torch/cuda/__init__.py, ``_parse_visible_devices``, reads the variable by the same rules):

- the variable unset: every GPU, in NVML (PCI bus) order;
- a comma-separated list of ordinals (``"4,5"``), of UUIDs (``"GPU-8932f937-..."``, a unique
  prefix is enough) or of MIG devices (``"MIG-<uuid>"``); the kind is decided by the first
  entry, and CUDA numbers the devices it keeps 0, 1, ... in the order listed;
- an invalid entry (a negative or out-of-range ordinal, an unknown or ambiguous UUID, an
  entry of another kind) ends the list: only the entries before it are visible
  (``"0,2,-1,1"`` gives GPUs 0 and 2);
- a device listed twice makes the whole list empty (``"0,0"``: no device);
- an ordinal is read like C's ``strtoul``: ``"1gpu"`` is 1; an empty entry is invalid;
- MIG: a process sees at most one MIG device, the first one listed (NVIDIA's MIG user guide:
  CUDA enumerates a single MIG instance per process).

:func:`visible_devices` applies the rule to what NVML reports and gives one
:class:`VisibleDevice` per CUDA ordinal.
"""
from __future__ import annotations

from dataclasses import dataclass

ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class VisibleDevice:
    """CUDA device ``cuda_ordinal`` of this process: physical GPU ``gpu_index`` (NVML order),
    or MIG device ``mig_uuid`` on that GPU (``None`` for a whole GPU)."""

    cuda_ordinal: int
    gpu_index: int
    mig_uuid: str | None = None


def _strtoul(text: str) -> int:
    """The leading integer of ``text`` as C's strtoul reads it; -1 where there is none or it is negative."""
    text = text.strip()
    digits = text[1:] if text[:1] in "+-" else text
    count = len(digits) - len(digits.lstrip("0123456789"))
    if count == 0 or text.startswith("-"):
        return -1
    return int(digits[:count])


def _uuid_index(entry: str, uuids: list[str]) -> int:
    """The one GPU whose UUID starts with ``entry``; -1 when none or several do."""
    matches = [index for index, uuid in enumerate(uuids) if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else -1


def parse_mask(mask: str, uuids: list[str], mig_uuids: dict[str, int] | None = None) -> list[tuple[int, str | None]]:
    """``(gpu_index, mig_uuid or None)`` for each device CUDA keeps from ``mask``, in CUDA order.

    ``uuids``: each physical GPU's UUID in NVML order ("GPU-..."); ``mig_uuids``: each MIG
    device's UUID ("MIG-...") mapped to the index of its parent GPU.
    """
    mig_uuids = mig_uuids or {}
    entries = [entry.strip() for entry in mask.split(",")]
    kept: list[tuple[int, str | None]] = []
    kind = "MIG" if entries[0].startswith("MIG-") else "GPU" if entries[0].startswith("GPU-") else "ordinal"
    for entry in entries:
        if kind == "ordinal":
            index = _strtoul(entry)
            device = (index, None) if 0 <= index < len(uuids) else None
        elif kind == "GPU":
            index = _uuid_index(entry, uuids) if entry.startswith("GPU-") else -1
            device = (index, None) if index >= 0 else None
        else:
            matches = [uuid for uuid in mig_uuids if uuid.startswith(entry)] if entry.startswith("MIG-") else []
            device = (mig_uuids[matches[0]], matches[0]) if len(matches) == 1 else None
        if device is None:
            break  # the first invalid entry ends the list
        if device in kept:
            return []  # a repeated device empties the list
        kept.append(device)
    return kept


def visible_devices(mask: str | None, uuids: list[str], mig_enabled: list[bool] | None = None,
                    mig_uuids: dict[str, int] | None = None) -> list[VisibleDevice]:
    """The CUDA devices of a process with ``CUDA_VISIBLE_DEVICES=mask`` (``None``: unset).

    ``uuids``: physical GPUs' UUIDs in NVML order; ``mig_enabled``: whether each GPU is in
    MIG mode (default: none is); ``mig_uuids``: MIG device UUID -> parent GPU index. A GPU in
    MIG mode is never a CUDA device itself: it stands for its first MIG device, and a process
    gets at most one MIG device in all.
    """
    mig_enabled = list(mig_enabled) if mig_enabled is not None else [False] * len(uuids)
    mig_uuids = mig_uuids or {}
    if mask is None:
        listed = [(index, None) for index in range(len(uuids))]
    elif not mask.strip():
        listed = []
    else:
        listed = parse_mask(mask, uuids, mig_uuids)
    kept: list[tuple[int, str | None]] = []
    for index, mig in listed:
        if mig is None and mig_enabled[index]:  # a GPU in MIG mode stands for its first MIG device
            mig = next((uuid for uuid, parent in mig_uuids.items() if parent == index), None)
            if mig is None:
                continue  # MIG mode without a MIG device: nothing CUDA can use
        if mig is not None and any(other is not None for _, other in kept):
            continue  # one MIG device per process
        kept.append((index, mig))
    return [VisibleDevice(ordinal, index, mig) for ordinal, (index, mig) in enumerate(kept)]
