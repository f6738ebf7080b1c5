"""CUDA-event timing on a faked GPU clock: cold calls are cold, and ranks agree on how many
calls (hence collectives) each timed sample runs."""
from __future__ import annotations

import pytest
import torch
from fakegpu.cuda_clock import FakeCudaClock

from labutils.measure import _cuda_timing as cuda_timing
from labutils.measure import bench

pytestmark = pytest.mark.fakegpu
CUDA0 = torch.device("cuda", 0)
MiB = 2**20


def test_16_mib_memcpy_is_timed_cold_every_call_so_l2_bandwidth_is_not_reported_as_hbm():
    # HBM: 32 MiB read + written in 10 us; from L2 in 4 us. Every timed call must see HBM.
    with FakeCudaClock(cold_s=10e-6, warm_s=4e-6) as clock:
        timing = bench.time_iterations(clock.op, CUDA0, iters=4, warmup=2, working_set_bytes=32 * MiB)
    assert timing.calls_per_sample > 1  # each sample averages many cold calls
    assert timing.samples_s == pytest.approx((10e-6,) * 4)


def test_every_cold_call_gets_its_own_l2_flush_not_one_per_batch():
    with FakeCudaClock(cold_s=10e-6, warm_s=4e-6) as clock:
        timing = bench.time_iterations(clock.op, CUDA0, iters=3, warmup=0, working_set_bytes=MiB)
    assert clock.flushes == 3 * timing.calls_per_sample


def test_working_set_larger_than_l2_is_batched_without_flushes_so_launch_cost_stays_hidden():
    with FakeCudaClock(cold_s=5e-6, warm_s=5e-6) as clock:
        timing = bench.time_iterations(clock.op, CUDA0, iters=3, warmup=1, working_set_bytes=2**30)
    assert clock.flushes == 0 and timing.calls_per_sample == 200


def test_unknown_l2_size_falls_back_to_the_h100_figure_so_a_small_copy_is_still_flushed():
    with FakeCudaClock(cold_s=10e-6, warm_s=4e-6, l2_bytes=cuda_timing.DEFAULT_L2_BYTES) as clock:
        clock.install(l2_in_properties=False)
        timing = bench.time_iterations(clock.op, CUDA0, iters=2, warmup=0, working_set_bytes=32 * MiB)
        clock.uninstall()
    assert timing.samples_s == pytest.approx((10e-6, 10e-6))


def test_without_a_working_set_a_timing_is_warm_and_says_how_many_calls_each_sample_holds():
    with FakeCudaClock(cold_s=2e-3) as clock:
        timing = bench.time_iterations(clock.op, CUDA0, iters=2, warmup=0)
    assert timing.calls_per_sample == 1 and clock.flushes == 0


def _timed_with_collectives(group_name, one_call_s):
    """In a rank: time a step holding an all-reduce, this rank's step taking ``one_call_s[rank]``."""
    import torch.distributed as dist
    from fakegpu.cuda_clock import FakeCudaClock

    from labutils.measure import bench

    issued = []
    clock = FakeCudaClock(cold_s=one_call_s[dist.get_rank()])

    def step():
        clock.op()
        dist.all_reduce(torch.ones(1))
        issued.append(1)

    group = dist.group.WORLD if group_name == "world" else None
    with clock:
        timing = bench.time_iterations(step, torch.device("cuda", 0), iters=3, warmup=1, group=group)
    return timing.calls_per_sample, len(issued)


@pytest.mark.parametrize("group_name, calls", [("world", 200), (None, 1)])
def test_timed_batch_size_agrees_across_ranks_so_nccl_does_not_hang(no_leftover_processes, group_name, calls):
    import labutils

    # rank 0's step takes 5 us (it alone would time 200 per batch), rank 1's 2 ms (1 per batch)
    results = labutils.launch(_timed_with_collectives, 2, group_name, [5e-6, 2e-3], backend="gloo", timeout=120)
    assert results[0] == results[1] == (calls, 1 + 1 + 3 * calls)  # warmup + first timing + samples


def _rank_zero_times_alone():
    """In a rank: chapter 8's dense baseline, rank 0 timing alone while rank 1 waits at a barrier."""
    import torch.distributed as dist
    from fakegpu.cuda_clock import FakeCudaClock

    from labutils.measure import bench

    dist.barrier()
    if dist.get_rank() != 0:
        dist.barrier()
        return None
    with FakeCudaClock(cold_s=5e-6) as clock:
        calls = bench.time_iterations(clock.op, torch.device("cuda", 0), iters=2, warmup=1).calls_per_sample
    dist.barrier()
    return calls


def test_a_rank_timing_alone_issues_no_hidden_collective_so_the_waiting_barrier_still_pairs(no_leftover_processes):
    import labutils

    assert labutils.launch(_rank_zero_times_alone, 2, backend="gloo", timeout=120) == [1, None]


def test_outside_a_process_group_the_batch_is_still_chosen_from_the_first_call():
    assert not cuda_timing.in_process_group()
    assert cuda_timing.agreed_calls(137, CUDA0) == 137
    with FakeCudaClock(cold_s=5e-6) as clock:
        assert bench.time_iterations(clock.op, CUDA0, iters=1, warmup=0).calls_per_sample == 200
