"""A GPU's stream and clock faked at ``torch.cuda``'s boundary, so CUDA-event timing runs on CPU.

``FakeCudaClock`` replaces ``torch.cuda.Event``, ``synchronize`` and ``device`` and maps tensors
asked for on a CUDA device to the CPU (a buffer of at least the L2's size becomes a flush
buffer whose ``zero_()`` evicts L2). Work advances a simulated clock: ``clock.op`` costs
``cold_s`` when its data is not in L2 and ``warm_s`` when it is (then it is), as a memcpy
that fits in L2 does on a GPU. Events read the clock, so timings are exact and
deterministic. ``install()`` patches the torch module in place (``uninstall()`` undoes
it): usable inside a rank, where pytest's monkeypatch is not.
"""
from __future__ import annotations

import contextlib

import torch

L2_BYTES = 50 * 2**20  # an H100 SXM's L2 (NVIDIA H100 datasheet)


class _Event:
    def __init__(self, clock, enable_timing=False):
        self.clock, self.at = clock, None

    def record(self, stream=None):
        self.at = self.clock.now_s

    def elapsed_time(self, end) -> float:
        return (end.at - self.at) * 1e3  # ms, as CUDA reports it


class _FlushBuffer:
    def __init__(self, clock, nbytes):
        self.clock, self.nbytes = clock, nbytes

    def zero_(self):
        self.clock.now_s += self.nbytes / 3e12  # written at about HBM speed
        self.clock.l2_holds_data = False
        self.clock.flushes += 1
        return self


class FakeCudaClock:
    """See the module docstring. ``calls``: how many times ``op`` ran; ``flushes``: L2 flushes."""

    def __init__(self, cold_s: float, warm_s: float | None = None, l2_bytes: int = L2_BYTES):
        self.cold_s, self.warm_s = cold_s, cold_s if warm_s is None else warm_s
        self.l2_bytes, self.now_s, self.l2_holds_data = l2_bytes, 0.0, False
        self.calls = self.flushes = 0
        self._saved: dict = {}

    def op(self):
        """One call of the timed operation: cold unless its data sits in L2."""
        self.now_s += self.warm_s if self.l2_holds_data else self.cold_s
        self.l2_holds_data = True
        self.calls += 1

    def _on_cpu(self, real):
        def make(*args, device=None, **kwargs):
            if device is not None and torch.device(device).type == "cuda":
                if real is self._saved["empty"] and args and isinstance(args[0], int) and args[0] >= self.l2_bytes:
                    return _FlushBuffer(self, args[0])
                device = "cpu"
            return real(*args, device=device, **kwargs)
        return make

    def install(self, l2_in_properties: bool = True):
        import types

        cuda = torch.cuda
        self._saved = {"Event": cuda.Event, "synchronize": cuda.synchronize, "device": cuda.device,
                       "get_device_properties": cuda.get_device_properties,
                       "empty": torch.empty, "tensor": torch.tensor}
        cuda.Event = lambda enable_timing=False: _Event(self, enable_timing)
        cuda.synchronize = lambda device=None: None
        cuda.device = lambda device: contextlib.nullcontext()
        props = types.SimpleNamespace(L2_cache_size=self.l2_bytes if l2_in_properties else None)
        cuda.get_device_properties = lambda device=None: props
        torch.empty = self._on_cpu(self._saved["empty"])
        torch.tensor = self._on_cpu(self._saved["tensor"])
        return self

    def uninstall(self):
        for name in ("Event", "synchronize", "device", "get_device_properties"):
            setattr(torch.cuda, name, self._saved[name])
        torch.empty, torch.tensor = self._saved["empty"], self._saved["tensor"]

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()
