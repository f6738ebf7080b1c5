"""ZeRO: model-state memory per GPU and communication per step, per stage (arXiv:1910.02054).

The ZeRO paper writes the parameter count as Psi; the course writes N for it elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from labutils.costmodel._checks import check_nonnegative, check_positive_int
from labutils.costmodel.collectives import ring_bytes_per_rank


@dataclass(frozen=True)
class ZeroMemory:
    """Model-state bytes per GPU for one ZeRO stage (0 = DDP): parameters, gradients,
    optimizer states and their ``total`` (activations, buffers and fragmentation excluded)."""

    stage: int
    params: float
    grads: float
    optimizer_states: float
    total: float


def zero_memory(
    num_params: float,
    world_size: int,
    stage: int,
    optimizer_bytes_per_param: float = 12,
    param_bytes_per_param: float = 2,
    grad_bytes_per_param: float = 2,
) -> ZeroMemory:
    """Bytes per GPU of the model states under ZeRO ``stage`` over ``world_size`` (N) ranks.

    Mixed-precision Adam (arXiv:1910.02054, section 3.1): fp16 parameters 2 Psi, fp16
    gradients 2 Psi, optimizer states K Psi with K = 12 (fp32 master weights, momentum,
    variance). Stage 0 (DDP) keeps all; stage 1 shards the optimizer states (4 Psi + 12 Psi/N);
    stage 2 also the gradients (2 Psi + 14 Psi/N); stage 3 also the parameters (16 Psi/N).
    Psi = 7.5e9, N = 64 gives 120 / 31.4 / 16.6 / 1.9 GB (GB = 1e9 B).
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    check_positive_int(world_size=world_size)
    check_nonnegative(optimizer_bytes_per_param=optimizer_bytes_per_param,
                       param_bytes_per_param=param_bytes_per_param,
                       grad_bytes_per_param=grad_bytes_per_param)
    n = int(world_size)
    params = num_params * param_bytes_per_param / (n if stage >= 3 else 1)
    grads = num_params * grad_bytes_per_param / (n if stage >= 2 else 1)
    optimizer = num_params * optimizer_bytes_per_param / (n if stage >= 1 else 1)
    return ZeroMemory(stage, params, grads, optimizer, params + grads + optimizer)


def zero_memory_table(num_params: float, world_size: int, **bytes_per_param) -> list[ZeroMemory]:
    """:func:`zero_memory` for stages 0 (DDP), 1, 2 and 3, in that order."""
    return [zero_memory(num_params, world_size, stage, **bytes_per_param) for stage in range(4)]


def zero_comm_bytes(num_params: float, world_size: int, stage: int, bytes_per_value: int = 2) -> float:
    """Bytes one GPU sends per step under ZeRO ``stage`` (arXiv:1910.02054, section 7).

    DDP, stage 1 and stage 2: 2(N-1)/N Psi values (an all-reduce, or a reduce-scatter of
    the gradients plus an all-gather of the updated parameters); stage 3: 3(N-1)/N Psi
    (parameters gathered in forward and in backward, gradients reduce-scattered): 1.5x.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    buffer = num_params * bytes_per_value
    passes = 3 if stage == 3 else 2
    return passes * ring_bytes_per_rank("all_gather", buffer, world_size)

