"""labutils.costmodel.fsdp_overlap: prefetch timelines and HSDP against full sharding, by hand-computed cases."""
from __future__ import annotations

import pytest

from labutils.costmodel import fsdp_overlap as fo


def test_without_prefetch_every_collective_is_exposed():
    times = fo.LayerTimes(layers=3, forward_s=1.0, gather_s=0.5, reduce_scatter_s=0.5)
    step = fo.simulate_step(times, prefetch=False)
    assert step.compute_s == 3 * 1.0 + 3 * 2.0
    assert step.exposed_comm_s == pytest.approx(3 * 0.5 + 3 * 0.5 + 3 * 0.5)   # AG fwd, AG bwd, RS: nothing hidden


def test_prefetch_hides_all_but_the_first_gather_and_the_last_reduce_scatter_when_compute_dominates():
    times = fo.LayerTimes(layers=3, forward_s=1.0, gather_s=0.5, reduce_scatter_s=0.5)
    step = fo.simulate_step(times, prefetch=True)
    # exposed: AG0 before F0, AG'2 before B2 (the backward's first gather), RS0 after B0
    assert step.exposed_comm_s == pytest.approx(0.5 + 0.5 + 0.5)
    names = [i.name for i in step.intervals if i.resource == "comm"]
    assert names.index("AG'0") < names.index("RS1")     # backward prefetch: next gather before this reduce-scatter


def test_prefetch_cannot_hide_more_than_the_compute_when_communication_dominates():
    times = fo.LayerTimes(layers=4, forward_s=0.1, gather_s=1.0, reduce_scatter_s=1.0)
    step = fo.simulate_step(times, prefetch=True)
    assert step.total_s >= 4 * 1.0 * 3                   # the link alone is busy 12 s
    assert step.exposed_comm_s > 12 - step.compute_s - 1e-9


def test_layer_times_from_flops_and_the_ring():
    times = fo.layer_times(num_params=8e9, layers=8, tokens=1000, flops_per_s=1e12, gather_Bps=1e9, world_size=4)
    assert times.forward_s == pytest.approx(2 * 1e9 * 1000 / 1e12)
    assert times.gather_s == pytest.approx(3 / 4 * 2e9 / 1e9)
    with pytest.raises(ValueError, match="tokens must be positive"):
        fo.layer_times(8e9, 8, 0, 1e12, 1e9, 4)


def test_hsdp_keeps_the_collectives_in_the_node():
    full, hybrid = fo.sharding_comparison(7e9, nodes=4, gpus_per_node=8, intra_Bps=450e9, inter_Bps=50e9)
    size = 7e9 * 2
    assert full.comm_s == pytest.approx(3 * 31 / 32 * size / 50e9)
    assert hybrid.intra_node_s == pytest.approx(3 * 7 / 8 * size / 450e9)
    assert hybrid.inter_node_s == pytest.approx(2 * 3 / 4 * size / 8 / 50e9)
    assert (full.state_bytes_per_gpu, hybrid.state_bytes_per_gpu) == (16 * 7e9 / 32, 16 * 7e9 / 8)
    with pytest.raises(ValueError, match="2 or more nodes"):
        fo.sharding_comparison(7e9, 1, 8, 450e9, 50e9)
