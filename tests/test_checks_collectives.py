"""labutils.checks.collectives: the right answer passes, each named mistake gets its message."""
from __future__ import annotations

from check_verdicts import verdict_test

from labutils.checks import collectives as check

S_GATHER, T_GATHER, N_GATHER = 1073741824, 4000e-6, 8
ALGBW = S_GATHER / T_GATHER / 1e9  # 268.4 GB/s


test_all_gather_busbw = verdict_test(check.all_gather_busbw, [
    (ALGBW * 7 / 8, "correct: algbw = S / T = 268.4 GB/s, busbw = algbw x (n-1)/n = 234.9 GB/s"),
    (ALGBW * 2 * 7 / 8, "you used the all-reduce factor"),
    (ALGBW, "that is algbw"),
    (ALGBW * 7 / 8 / 8, "do not divide it by n"),
    (ALGBW * 7 / 8 * 1e9 / 2**30, "not GiB/s"),
    (1.0, "not quite"),
    (None, "not answered yet"),
    ("235", "give a finite number of GB/s"),
    (float("nan"), "give a finite number of GB/s"),
    (True, "give a finite number of GB/s"),
])


test_ring_allreduce_time = verdict_test(check.ring_allreduce_time, [
    (2 * 15 * 50e-6 + 2 * 15 / 16 * 1e9 * 1e-11, "correct: 2(n-1) alpha + 2(n-1)/n S beta"),
    (2 * 4 * 50e-6 + 2 * 15 / 16 * 1e9 * 1e-11, "is a tree's"),
    (2 * 15 / 16 * 1e9 * 1e-11, "you left out the latency term"),
    (2 * 15 * 50e-6 + 2 * 1e9 * 1e-11, "not 2 S"),
    (15 * 50e-6 + 15 / 16 * 1e9 * 1e-11, "that is one half"),
    (1.0, "not quite"),
    (None, "not answered yet"),
])


test_allreduce_bytes_per_rank = verdict_test(check.allreduce_bytes_per_rank, [
    (1.5e9, "correct: 2(n-1)/n x S"),
    (2e9, "2 S is the limit"),
    (6e9, "the total over all 4 GPUs"),
    (0.75e9, "that is one half"),
    (1.5, "give bytes, not GB"),
    (1e9, "not quite"),
    ([1.5e9], "give a finite number of bytes"),
])


test_moe_token_exchange = verdict_test(check.moe_token_exchange, [
    ("all-to-all", "correct"), ("All_To_All", "correct"), ("alltoall", "correct"),
    ("all-gather", "every rank all the data"), ("broadcast", "the same data"),
    ("all_reduce", "moved, not added"), ("reduce-scatter", "moved, not added"),
    ("send/recv", "has a name"), ("gossip", "is not one of the collectives"),
    (None, "not answered yet"), (3, "as a string"),
])
