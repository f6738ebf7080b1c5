"""labutils.checks.long_sequences: chapter 8's recomputation and context-parallel self-checks."""
from __future__ import annotations

from check_verdicts import verdict_test

from labutils.checks import long_sequences as check

SBH = 2048 * 1 * 12288  # s b h values of one layer's activation
KV = 2 * 131072 * 4096 * 2  # bytes of K and V for the whole sequence

test_selective_memory = verdict_test(check.selective_memory, [
    (34 * SBH, "correct"),
    (34 * SBH / 1e9, "wrong unit"),
    (SBH * (34 + 5 * 96 * 2048 / 12288), "without recomputation"),
    (5 * 96 * 2048**2, "what it keeps"),
    (2 * SBH, "full recomputation"),
    (12345, "not quite"),
])


test_ring_bytes = verdict_test(check.ring_bytes, [
    (7 / 8 * KV, "correct"),
    (KV, "(n-1)/n"),
    (7 / 16 * KV, "both K and V"),
    (4 * 7 / 64 * KV / 2, "Ulysses"),
    (None, "not answered yet"),
])
