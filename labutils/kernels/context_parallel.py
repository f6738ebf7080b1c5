"""Context parallelism: attention over a sequence split across n ranks.

Each of the n ranks holds one contiguous block of s/n positions of Q, K and V, laid out
(b, a, s/n, d) with d = h/a the head width. Two ways to compute exact attention:

Ring attention (Liu, Zaharia, Abbeel, arXiv:2310.01889). The K/V blocks travel round the
ring; each rank folds every block into its queries' output with the online softmax (a
running maximum and sum per query, as in FlashAttention, arXiv:2205.14135)::

    step 0: rank r attends to its own K_r V_r        sends K_r V_r to r+1, receives from r-1
    step j: rank r attends to K_{r-j} V_{r-j}         ... n-1 sends in all
    per rank per layer (forward): (n-1)/n x (bytes of K + bytes of V)

Ulysses (DeepSpeed-Ulysses, Jacobs et al., arXiv:2309.14509). An all-to-all turns the
sequence split into a head split: each rank then holds all s positions of a/n heads,
runs ordinary attention, and a second all-to-all turns the output back::

    (b, a, s/n, d) --all_to_all--> (b, a/n, s, d) --attention--> --all_to_all--> (b, a, s/n, d)
    per rank per layer (forward): 4 all-to-alls (Q, K, V, output) of (n-1)/n x bytes of one
    (b, a, s/n, d) block: 4 (n-1)/n^2 x b s h x bytes per value

Run on ranks (``labutils.launch`` or a ``Pool``); every rank calls the same function::

    from labutils.kernels import context_parallel as cp
    out = cp.ring_attention(q_block, k_block, v_block, causal=True)
    out = cp.ulysses_attention(q_block, k_block, v_block, causal=True)

Both run in forward only (no autograd) and take an optional process ``group``.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V on whole tensors (b, a, s, d): the single-process reference."""
    _check_blocks(q, k, v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s_q, s_k = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(dim=-1) @ v


def sequence_block(x: torch.Tensor, rank: int, world_size: int, dim: int = 2) -> torch.Tensor:
    """Rank ``rank``'s contiguous block of ``x`` along the sequence dimension ``dim``."""
    if x.shape[dim] % world_size:
        raise ValueError(f"the sequence ({x.shape[dim]}) must split evenly over {world_size} ranks")
    return x.chunk(world_size, dim=dim)[rank].contiguous()


def _check_blocks(q, k, v) -> None:
    if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"expected Q, K, V as (batch, heads, positions, head width); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


class OnlineSoftmax:
    """Attention output of one block of queries, folded in one K/V block at a time.

    Keeps per query the running maximum score ``m``, the running sum ``l`` of exp(score - m)
    and the running weighted sum of values; :meth:`result` divides the two. Exact: the
    order of the blocks changes only the float rounding.
    """

    def __init__(self, q: torch.Tensor):
        self.q, self.scale = q, 1.0 / math.sqrt(q.shape[-1])
        self.max = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
        self.sum = torch.zeros_like(self.max)
        self.weighted = torch.zeros_like(q)

    def update(self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Fold in one block; ``mask`` (positions_q, positions_k) is True where a score is dropped."""
        scores = self.q @ k.transpose(-2, -1) * self.scale
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        new_max = torch.maximum(self.max, scores.amax(dim=-1, keepdim=True))
        rescale = torch.exp(self.max - new_max)          # 0 at the first block (max was -inf)
        weights = torch.exp(scores - new_max)
        self.sum = self.sum * rescale + weights.sum(dim=-1, keepdim=True)
        self.weighted = self.weighted * rescale + weights @ v
        self.max = new_max

    def result(self) -> torch.Tensor:
        return self.weighted / self.sum


def _ring_exchange(send: list[torch.Tensor], to_rank: int, from_rank: int, group) -> tuple[list, list]:
    """Post the sends of ``send`` to ``to_rank`` and matching receives from ``from_rank``.

    One ``batch_isend_irecv``: NCCL groups the calls, so every rank sending before it
    receives cannot deadlock. Returns (the receive buffers, the requests to wait on).
    """
    received = [torch.empty_like(t) for t in send]
    ops = [dist.P2POp(dist.isend, t, dist.get_global_rank(group, to_rank) if group is not None else to_rank, group)
           for t in send]
    ops += [dist.P2POp(dist.irecv, t, dist.get_global_rank(group, from_rank) if group is not None else from_rank, group)
            for t in received]
    return received, dist.batch_isend_irecv(ops)


@torch.no_grad()
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   group=None) -> torch.Tensor:
    """This rank's block of the attention output; Q, K, V are its (b, a, s/n, d) blocks.

    At each of the n steps the next K/V block is already on its way (posted before the
    local compute, so the transfer overlaps it). With ``causal``, rank r attends to the
    blocks of ranks 0..r only (its own with a triangular mask): the later ranks do more
    work, the load imbalance that balanced layouts fix.
    """
    _check_blocks(q, k, v)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    softmax = OnlineSoftmax(q)
    block = (k.contiguous(), v.contiguous())
    diagonal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    for step in range(world_size):
        pending = None
        if step < world_size - 1:
            pending = _ring_exchange(list(block), (rank + 1) % world_size, (rank - 1) % world_size, group)
        source = (rank - step) % world_size               # whose K/V block this rank holds now
        if not causal or source < rank:
            softmax.update(*block)
        elif source == rank:
            softmax.update(*block, mask=diagonal)
        if pending is not None:
            received, requests = pending
            for request in requests:
                request.wait()
            block = tuple(received)
    return softmax.result()


def _all_to_all(x: torch.Tensor, split_dim: int, concat_dim: int, group) -> torch.Tensor:
    """Send the n slices of ``x`` along ``split_dim`` to ranks 0..n-1; concatenate what comes
    back along ``concat_dim`` (slice i from rank i)."""
    world_size = dist.get_world_size(group)
    if x.shape[split_dim] % world_size:
        raise ValueError(f"dimension {split_dim} of size {x.shape[split_dim]} must split evenly over {world_size} ranks")
    send = torch.stack(x.chunk(world_size, dim=split_dim)).contiguous()   # (n, ...): slice i for rank i
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(received.unbind(0), dim=concat_dim)


@torch.no_grad()
def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      group=None) -> torch.Tensor:
    """This rank's block of the attention output via two all-to-all re-layouts.

    Q, K, V (b, a, s/n, d) -> (b, a/n, s, d): all s positions of a/n heads; attention as on
    one process; the output goes back to (b, a, s/n, d). The heads a must divide by n.
    """
    _check_blocks(q, k, v)
    world_size = dist.get_world_size(group)
    if q.shape[1] % world_size:
        raise ValueError(f"Ulysses splits the {q.shape[1]} heads over {world_size} ranks: they must divide evenly")
    q_heads, k_heads, v_heads = (_all_to_all(t, split_dim=1, concat_dim=2, group=group) for t in (q, k, v))
    out_heads = dense_attention(q_heads, k_heads, v_heads, causal=causal)
    return _all_to_all(out_heads, split_dim=2, concat_dim=1, group=group)


def ring_bytes_per_rank(seq_len: int, micro_batch_size: int, hidden: int, world_size: int,
                        bytes_per_value: int = 2, kv_hidden: int | None = None) -> float:
    """Bytes one rank sends in one layer's ring-attention forward: (n-1)/n x (K + V).

    K and V are s b h_kv values each (``kv_hidden`` = h unless grouped-query attention
    makes it smaller).
    """
    _check_shape(seq_len, micro_batch_size, hidden, world_size)
    kv_hidden = hidden if kv_hidden is None else kv_hidden
    return (world_size - 1) / world_size * 2 * seq_len * micro_batch_size * kv_hidden * bytes_per_value


def ulysses_bytes_per_rank(seq_len: int, micro_batch_size: int, hidden: int, world_size: int,
                           bytes_per_value: int = 2) -> float:
    """Bytes one rank sends in one layer's Ulysses forward: 4 all-to-alls of its s/n b h block,
    each sending (n-1)/n of it: 4 (n-1)/n^2 x s b h x bytes."""
    _check_shape(seq_len, micro_batch_size, hidden, world_size)
    block = seq_len * micro_batch_size * hidden * bytes_per_value / world_size
    return 4 * (world_size - 1) / world_size * block


def _check_shape(seq_len, micro_batch_size, hidden, world_size) -> None:
    for name, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size),
                        ("hidden", hidden), ("world_size", world_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value!r}")
