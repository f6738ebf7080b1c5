"""How well a training job uses its GPUs: model FLOPs per token, MFU, scaling efficiency."""
from __future__ import annotations

from labutils.costmodel._checks import check_nonnegative, check_positive_int


def model_flops_per_token(num_params: float, layers: int, hidden: int, seq_len: int) -> float:
    """Training FLOPs per token, PaLM's 6N + 12 L H Q T (arXiv:2204.02311, appendix B).

    N parameters, L layers, H Q = ``hidden`` (heads x head dim), T = ``seq_len``. 6N is the
    matmuls' forward (2N) plus backward (4N); 12 L H Q T the attention scores and values.
    (PaLM counts the full T x T attention; Megatron today halves it for causal masks.)
    """
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")
    check_positive_int(layers=layers, hidden=hidden, seq_len=seq_len)
    return 6 * num_params + 12 * layers * hidden * seq_len


def mfu(
    tokens_per_second: float,
    *,
    num_params: float,
    layers: int,
    hidden: int,
    seq_len: int,
    peak_flops: float,
    num_gpus: int = 1,
) -> float:
    """Model FLOPs utilisation: tokens/s x (6N + 12 L H Q T) / (num_gpus x peak FLOP/s).

    ``tokens_per_second`` of the whole job, ``peak_flops`` the *dense* peak of one GPU in
    the training dtype (e.g. 989e12 for H100 SXM bf16; never the sparse figure, and V100 has
    no bf16). Recomputed activations do not count: MFU uses the model's FLOPs only. Hardware
    FLOPs utilisation (HFU, arXiv:2205.05198) counts the FLOPs the GPU actually ran,
    recomputation included, so HFU >= MFU.
    """
    check_nonnegative(tokens_per_second=tokens_per_second)
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be > 0 (dense FLOP/s of one GPU), got {peak_flops!r}")
    check_positive_int(num_gpus=num_gpus)
    flops = tokens_per_second * model_flops_per_token(num_params, layers, hidden, seq_len)
    return flops / (num_gpus * peak_flops)


def scaling_efficiency(throughput_n: float, n: int, throughput_1: float) -> float:
    """Scaling efficiency = actual throughput on n GPUs / (n x throughput on 1 GPU).

    1.0 is linear scaling; the inverse ratio (n x throughput_1 / throughput_n) is a common
    slip that makes sub-linear scaling look better than linear. Megatron-LM's "52% at 3072
    GPUs" (arXiv:2104.04473) is a share of peak FLOP/s, MFU-like, not scaling efficiency.
    """
    check_nonnegative(throughput_n=throughput_n)
    check_positive_int(n=n)
    if not throughput_1 > 0:
        raise ValueError(f"throughput_1 must be > 0, got {throughput_1!r}")
    return throughput_n / (n * throughput_1)

