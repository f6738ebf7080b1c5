"""Activation recomputation: trade compute for the memory of activations kept for backward.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198), count the bytes one transformer layer keeps for its backward pass
(section 4.1; 16-bit values, 1-byte dropout masks; s sequence, b microbatch, h hidden,
a heads):

    no recomputation         s b h (34 + 5 a s / h)
    selective recomputation  34 s b h      (the attention core is recomputed: 5 a s^2 b gone)
    full recomputation       2 s b h       (only the layer's input is kept)

This module builds a layer whose saved tensors are exactly those of the paper, counts the
bytes autograd saves for backward on any device, and times the three variants:

    from labutils.kernels import recompute
    stack = recompute.LayerStack(layers=2, hidden=256, heads=8, recompute="selective")
    x = torch.randn(256, 2, 256, dtype=torch.bfloat16, requires_grad=True)   # (s, b, h)
    run = recompute.measure(stack.to(torch.bfloat16), x)    # bytes saved, seconds per step
    recompute.activation_bytes_per_layer(256, 2, 256, 8, "selective")
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

#: the three variants of arXiv:2205.05198 section 5
RECOMPUTE_MODES = ("none", "selective", "full")

_ACTIVE_COUNTERS: list["SavedTensorBytes"] = []


def activation_bytes_per_layer(seq_len: int, micro_batch_size: int, hidden: int, heads: int,
                               recompute: str = "none", bytes_per_value: int = 2,
                               mask_bytes: int = 1) -> float:
    """Bytes one layer keeps for backward (arXiv:2205.05198, section 4.1 and Table 2).

    In values of ``bytes_per_value`` bytes: the layer norms' inputs (2 sbh), the QKV GEMM's
    input (sbh), Q, K and V (3 sbh), the output projection's input (sbh), the MLP's first
    GEMM input (sbh), GeLU's input and output (4 sbh each): 16 sbh values; two dropout
    masks of ``mask_bytes`` (2 sbh); in the attention core the softmax output and the
    dropped-out scores (2 a s^2 b values) and their mask (a s^2 b). With 2-byte values and
    1-byte masks: sbh (34 + 5 a s / h). ``recompute``: "none", "selective" (the attention
    core is recomputed, so its a s^2 b terms go) or "full" (only the input, sbh values).
    """
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
    for name, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size),
                        ("hidden", hidden), ("heads", heads), ("bytes_per_value", bytes_per_value)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    sbh = seq_len * micro_batch_size * hidden
    if recompute == "full":
        return sbh * bytes_per_value
    kept = sbh * (16 * bytes_per_value + 2 * mask_bytes)
    if recompute == "selective":
        return kept
    return kept + heads * seq_len**2 * micro_batch_size * (2 * bytes_per_value + mask_bytes)


class SavedTensorBytes(contextlib.AbstractContextManager):
    """Bytes autograd keeps for backward while the block is open, counted per storage.

    Every tensor saved for backward passes through a ``saved_tensors_hooks`` pack hook;
    its storage is counted once however many views of it are saved (Q, K and V are views
    of one QKV buffer), and parameters (``exclude``, e.g. ``model.parameters()``) are left
    out: they are model state, not activations. ``torch.utils.checkpoint`` keeps its
    inputs by reference rather than through the hooks; the layers below report them with
    :func:`_note_kept`. ``nbytes`` is the total in bytes after the block.
    """

    def __init__(self, exclude=()):
        self._excluded = {t.untyped_storage().data_ptr() for t in exclude}
        self._storages: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.note(tensor)
        return tensor

    def note(self, tensor: torch.Tensor) -> None:
        """Count ``tensor``'s storage (once) unless it is excluded."""
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._excluded:
            self._storages[storage.data_ptr()] = storage.nbytes()

    @property
    def nbytes(self) -> int:
        return sum(self._storages.values())

    def __enter__(self):
        _ACTIVE_COUNTERS.append(self)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        _ACTIVE_COUNTERS.remove(self)
        return None


def _note_kept(*tensors: torch.Tensor) -> None:
    """Report tensors a checkpoint keeps alive to every open :class:`SavedTensorBytes`."""
    for counter in _ACTIVE_COUNTERS:
        for tensor in tensors:
            counter.note(tensor)


def _checkpointed(function, *tensors: torch.Tensor):
    """``function(*tensors)``, recomputed in backward (non-reentrant torch.utils.checkpoint)."""
    _note_kept(*tensors)
    return checkpoint(function, *tensors, use_reentrant=False)


def dropout_with_byte_mask(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout that keeps a 1-byte (bool) mask for backward on every device.

    The paper counts 1 byte per mask element, as PyTorch's fused CUDA dropout keeps; its
    CPU dropout keeps the mask in the input's dtype, so the course uses this one everywhere.
    """
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p!r}")
    keep = torch.rand_like(x) >= p                     # bool: the 1-byte mask saved for backward
    return (x * keep) * (1.0 / (1.0 - p))


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float,
                   training: bool) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) with dropout, times V; (b, a, s, d) in and out.

    The part selective recomputation recomputes: it saves the softmax output and the
    dropped-out scores (a s^2 b values each) and the dropout mask (a s^2 b bytes).
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    probabilities = dropout_with_byte_mask(scores.softmax(dim=-1), dropout, training)
    return torch.matmul(probabilities, v)


class TransformerLayer(torch.nn.Module):
    """A GPT layer as arXiv:2205.05198 counts it: x (s, b, h) -> same shape.

    x + dropout(proj(attention(ln1(x)))), then + dropout(fc2(gelu(fc1(ln2(.))))).
    ``recompute`` "selective" wraps :func:`attention_core` in a checkpoint; "full" is
    applied by :class:`LayerStack` around the whole layer.
    """

    def __init__(self, hidden: int, heads: int, dropout: float = 0.1, recompute: str = "none"):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"heads ({heads}) must divide hidden ({hidden})")
        if recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
        self.heads, self.dropout, self.recompute = heads, dropout, recompute
        self.ln1, self.ln2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        # one contiguous (3, b, a, s, d) buffer: Q, K and V are views of it, 3 sbh values in all
        q, k, v = self.qkv(x).view(s, b, 3, self.heads, -1).permute(2, 1, 3, 0, 4).contiguous()
        core = lambda q, k, v: attention_core(q, k, v, self.dropout, self.training)  # noqa: E731
        context = _checkpointed(core, q, k, v) if self.recompute == "selective" else core(q, k, v)
        return self.proj(context.permute(2, 0, 1, 3).reshape(s, b, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        drop = dropout_with_byte_mask
        x = x + drop(self._attention(self.ln1(x)), self.dropout, self.training)
        mlp = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return x + drop(mlp, self.dropout, self.training)


class LayerStack(torch.nn.Module):
    """``layers`` TransformerLayers; ``recompute`` "full" checkpoints each layer whole."""

    def __init__(self, layers: int, hidden: int, heads: int, recompute: str = "none", dropout: float = 0.1):
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers!r}")
        inner = "selective" if recompute == "selective" else "none"
        self.layers = torch.nn.ModuleList(TransformerLayer(hidden, heads, dropout, inner) for _ in range(layers))
        self.recompute = recompute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = _checkpointed(layer, x) if self.recompute == "full" else layer(x)
        return x


@dataclass
class RecomputeRun:
    """One variant measured: bytes saved for backward, seconds per forward + backward."""

    recompute: str
    saved_bytes: int
    step_s: float
    cuda_peak_bytes: int | None  # torch.cuda.max_memory_allocated during the step, CUDA only


def _step(stack: LayerStack, x: torch.Tensor, counter=None) -> None:
    with counter if counter is not None else contextlib.nullcontext():
        y = stack(x)
    y.float().square().mean().backward()


def measure(stack: LayerStack, x: torch.Tensor, iters: int = 3) -> RecomputeRun:
    """Bytes ``stack`` saves for backward on input ``x`` (s, b, h), and its median step time (s).

    The bytes are counted once with :class:`SavedTensorBytes` (any device); the time is the
    median of ``iters`` forward + backward passes after one warm-up (synchronised on CUDA).
    On CUDA the peak of ``torch.cuda.max_memory_allocated`` over one step is added.
    """
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters!r}")
    stack.train()
    counter = SavedTensorBytes(exclude=stack.parameters())
    _step(stack, x, counter)
    on_cuda = x.device.type == "cuda"
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    times = []
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        _step(stack, x)
        sync()
        times.append(time.perf_counter() - start)
    peak = None
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(x.device)
        _step(stack, x)
        peak = torch.cuda.max_memory_allocated(x.device)
    stack.zero_grad(set_to_none=True)
    return RecomputeRun(stack.recompute, counter.nbytes, sorted(times)[len(times) // 2], peak)
