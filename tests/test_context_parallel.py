"""labutils.kernels.context_parallel: ring attention and Ulysses on 3 gloo ranks match dense attention."""
from __future__ import annotations

import pytest
import torch

import labutils
from labutils.kernels import context_parallel as cp

SHAPE = dict(batch=2, heads=6, seq_len=24, head_width=8)   # 6 heads and 24 positions split over 3 ranks


@pytest.fixture(scope="module")
def pool():
    with labutils.Pool(3, backend="gloo", timeout=120) as p:
        yield p


def _qkv(batch, heads, seq_len, head_width, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq_len, head_width, generator=generator, dtype=torch.float64) for _ in range(3)]


def _both_kernels(shape, causal):
    """Each rank: its blocks of Q, K, V -> (ring output, Ulysses output, ring bytes sent, all-to-all bytes)."""
    import torch.distributed as dist
    from labutils.measure import commtrace
    from labutils.kernels import context_parallel as cp

    rank, n = dist.get_rank(), dist.get_world_size()
    q, k, v = (cp.sequence_block(t, rank, n) for t in _qkv(**shape))
    with commtrace.record() as ring_trace:
        ring = cp.ring_attention(q, k, v, causal=causal)
    with commtrace.record() as ulysses_trace:
        ulysses = cp.ulysses_attention(q, k, v, causal=causal)
    return {"ring": ring, "ulysses": ulysses,
            "ring_bytes": ring_trace.total_bytes("batch_isend_irecv") / 2,   # each batch sends what it receives
            "all_to_all_bytes": ulysses_trace.total_bytes("all_to_all_single"),
            "all_to_all_calls": ulysses_trace.count("all_to_all_single")}


@pytest.mark.parametrize("causal", [False, True])
def test_ring_and_ulysses_match_dense_attention_and_send_the_modelled_bytes(pool, causal):
    per_rank = pool.run(_both_kernels, SHAPE, causal)
    dense = cp.dense_attention(*_qkv(**SHAPE), causal=causal)
    for kernel in ("ring", "ulysses"):
        torch.testing.assert_close(torch.cat([r[kernel] for r in per_rank], dim=2), dense)
    n, (b, a, s, d) = 3, SHAPE.values()
    hidden, bytes_per_value = a * d, 8
    for result in per_rank:
        assert result["ring_bytes"] == cp.ring_bytes_per_rank(s, b, hidden, n, bytes_per_value)
        assert result["all_to_all_calls"] == 4
        sent = result["all_to_all_bytes"] * (n - 1) / n
        assert sent == pytest.approx(cp.ulysses_bytes_per_rank(s, b, hidden, n, bytes_per_value))


def test_online_softmax_is_exact_in_any_block_order():
    q, k, v = _qkv(1, 2, 12, 4)
    softmax = cp.OnlineSoftmax(q)
    for block in (2, 0, 1):
        softmax.update(k.chunk(3, dim=2)[block], v.chunk(3, dim=2)[block])
    torch.testing.assert_close(softmax.result(), cp.dense_attention(q, k, v))


def test_byte_models():
    # ring: (n-1)/n of K and V; Ulysses: 4 (n-1)/n^2 of s b h; their ratio is n/2
    assert cp.ring_bytes_per_rank(1024, 1, 4096, 4) == 3 / 4 * 2 * 1024 * 4096 * 2
    assert cp.ulysses_bytes_per_rank(1024, 1, 4096, 4) == 4 * 3 / 16 * 1024 * 4096 * 2
    ratio = cp.ring_bytes_per_rank(1024, 1, 4096, 8) / cp.ulysses_bytes_per_rank(1024, 1, 4096, 8)
    assert ratio == pytest.approx(8 / 2)
    assert cp.ring_bytes_per_rank(1024, 1, 4096, 4, kv_hidden=1024) == cp.ring_bytes_per_rank(1024, 1, 4096, 4) / 4
    assert cp.ring_bytes_per_rank(1024, 1, 4096, 1) == 0


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="split evenly"):
        cp.sequence_block(torch.zeros(1, 2, 10, 4), 0, 3)
    with pytest.raises(ValueError, match="heads, positions"):
        cp.dense_attention(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="world_size"):
        cp.ring_bytes_per_rank(1024, 1, 4096, 0)
