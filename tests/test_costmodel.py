"""labutils.costmodel against its primary sources (MPICH, ZeRO arXiv:1910.02054, PaLM arXiv:2204.02311,
Megatron-LM arXiv:1909.08053) and GPT-3's sizes (arXiv:2005.14165), single process, no ranks."""
import math

import pytest

from labutils import costmodel as cm

GPT3 = dict(layers=96, hidden=12288, seq_len=2048)  # 175e9 parameters, fp16
GB = 1e9


# -- collective_time --------------------------------------------------------------------

def test_ring_all_reduce_matches_mpich_formula():
    p, n, a, b, g = 8, 1e9, 5e-6, 1 / 450e9, 1e-12
    expected = 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    assert cm.collective_time("all_reduce", "ring", n, p, a, b, g) == pytest.approx(expected)


def test_ring_latency_term_is_linear_in_p_not_logarithmic():
    # classic mistake 4: the ring pays 2(p-1) alpha, Rabenseifner 2 lg p alpha
    ring = cm.collective_time("all_reduce", "ring", 0, 64, alpha=1.0, beta=0.0)
    rabenseifner = cm.collective_time("all_reduce", "rabenseifner", 0, 64, alpha=1.0, beta=0.0)
    assert ring == 126 and rabenseifner == 12


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter(op):
    assert cm.collective_time(op, "ring", 4e9, 4, alpha=1e-5, beta=1e-9) == pytest.approx(3e-5 + 3.0)


def test_recursive_doubling_moves_n_lg_p():
    assert cm.collective_time("all_reduce", "recursive_doubling", 1e6, 16, 1e-6, 1e-9, 1e-10) == pytest.approx(
        4e-6 + 1e6 * 4 * 1e-9 + 1e6 * 4 * 1e-10)


def test_large_messages_favour_bandwidth_optimal_algorithms():
    args = dict(nbytes=1e9, world_size=16, alpha=1e-5, beta=1e-10)
    rd = cm.collective_time("all_reduce", "recursive_doubling", **args)
    assert cm.collective_time("all_reduce", "ring", **args) < rd
    assert cm.collective_time("all_reduce", "rabenseifner", **args) < rd
    small = dict(args, nbytes=8)
    assert cm.collective_time("all_reduce", "recursive_doubling", **small) < cm.collective_time("all_reduce", "ring", **small)


def test_double_binary_tree_has_log_latency_and_ring_bandwidth():
    tree = cm.collective_time("all_reduce", "double_binary_tree", 1e9, 1024, alpha=0.0, beta=1e-9)
    ring = cm.collective_time("all_reduce", "ring", 1e9, 1024, alpha=0.0, beta=1e-9)
    assert tree == pytest.approx(ring)
    assert cm.collective_time("all_reduce", "double_binary_tree", 0, 1024, alpha=1.0, beta=0.0) == 20


def test_broadcast_algorithms():
    assert cm.collective_time("broadcast", "binomial_tree", 1e6, 8, 1e-6, 1e-9) == pytest.approx(3 * (1e-6 + 1e-3))
    assert cm.collective_time("broadcast", "ring", 1e6, 8, 1e-6, 1e-9) == pytest.approx(7e-6 + 1e-3)


def test_one_rank_costs_nothing():
    for op, algorithms in cm.COLLECTIVE_ALGORITHMS.items():
        for algorithm in algorithms:
            assert cm.collective_time(op, algorithm, 1e9, 1, 1e-5, 1e-9, 1e-10) == 0.0


def test_bad_op_or_algorithm_lists_the_choices():
    with pytest.raises(ValueError, match="all_reduce, all_gather"):
        cm.collective_time("allreduce", "ring", 1, 2, 0, 0)
    with pytest.raises(ValueError, match="ring, recursive_doubling, rabenseifner, double_binary_tree"):
        cm.collective_time("all_reduce", "tree", 1, 2, 0, 0)
    with pytest.raises(ValueError, match="world_size"):
        cm.collective_time("all_reduce", "ring", 1, 0, 0, 0)
    with pytest.raises(ValueError, match="nbytes"):
        cm.collective_time("all_reduce", "ring", -1, 2, 0, 0)


def test_ring_bytes_per_rank_matches_busbw_factors():
    assert cm.ring_bytes_per_rank("all_reduce", 1e9, 4) == pytest.approx(1.5e9)  # 2 x 3/4 of 1 GB on 4 GPUs
    assert cm.ring_bytes_per_rank("all_gather", 1e9, 4) == pytest.approx(0.75e9)
    assert cm.ring_bytes_per_rank("reduce_scatter", 1e9, 4) == pytest.approx(0.75e9)


# -- comm_volume: GPT-3 175B (arXiv:2005.14165) --------------------------------------------------

def test_dp_and_fsdp_are_per_device_2p_and_3p_in_the_large_n_limit():
    dp = cm.comm_volume("dp", params=175e9, dp_size=1024)
    fsdp = cm.comm_volume("fsdp", params=175e9, dp_size=1024, layers=96)
    assert dp.bytes_per_step == pytest.approx(2 * 1023 / 1024 * 350 * GB)
    assert dp.bytes_per_step == pytest.approx(700 * GB, rel=1e-3)
    assert fsdp.bytes_per_step == pytest.approx(1050 * GB, rel=1e-3)
    assert fsdp.bytes_per_step / dp.bytes_per_step == pytest.approx(1.5)
    assert dp.calls_per_step == 1 and fsdp.calls_per_step == 3 * 96
    assert dp.total_bytes_per_step == pytest.approx(1024 * dp.bytes_per_step)  # about 716 TB summed over the group: switch load only


def test_tp_makes_4l_all_reduces():
    tp = cm.comm_volume("tp", micro_batch_size=1, tp_size=8, **GPT3)
    assert tp.calls_per_step == 4 * 96 == 384
    assert tp.op == "all_reduce" and tp.message_bytes == 2048 * 12288 * 2


def test_quoted_tp_1228_gb_is_b32_in_the_large_t_limit():
    """Finding: 1228 GB = 4L all-reduces x 2 x B s h x 2 bytes with B = 32 sequences, t -> infinity."""
    tp8 = cm.comm_volume("tp", micro_batch_size=32, tp_size=8, **GPT3)
    large_t_limit = tp8.bytes_per_step * 8 / 7  # undo the ring's (t-1)/t
    assert large_t_limit == pytest.approx(384 * 2 * 32 * 2048 * 12288 * 2)
    assert large_t_limit == pytest.approx(1237e9, rel=1e-3)
    assert 384 * 2 * 0.8e9 * 2 == pytest.approx(1228.8e9)  # the quoted figure rounds B s h to 0.8e9
    assert large_t_limit == pytest.approx(1228e9, rel=0.01)
    assert tp8.bytes_per_step == pytest.approx(1082e9, rel=1e-3)  # what t = 8 actually moves


def test_pp_makes_2m_n_minus_1_messages_in_the_pipeline():
    pp = cm.comm_volume("pp", micro_batch_size=1, num_microbatches=32, pp_size=8, hidden=12288, seq_len=2048)
    assert pp.group_calls_per_step == 2 * 32 * 7 == 448
    assert pp.calls_per_step == 64  # one interior stage sends 2m of them


def test_quoted_pp_45_gb_is_the_whole_pipeline_counted_at_both_ends():
    """Finding: 45 GB is not per device; per device PP sends 3.2 GB."""
    pp = cm.comm_volume("pp", micro_batch_size=1, num_microbatches=32, pp_size=8, hidden=12288, seq_len=2048)
    assert pp.total_bytes_per_step == pytest.approx(22.5e9, rel=1e-2)
    assert 2 * pp.total_bytes_per_step == pytest.approx(45e9, rel=1e-2)  # sent + received, all stages
    assert pp.bytes_per_step == pytest.approx(2 * 32 * 2048 * 12288 * 2)
    assert pp.bytes_per_step == pytest.approx(3.22e9, rel=1e-3)
    dp = cm.comm_volume("dp", params=175e9, dp_size=1024)
    assert pp.bytes_per_step < dp.bytes_per_step / 100


def test_3d_layout_shards_dp_traffic_and_layers():
    dp = cm.comm_volume("dp", params=175e9, tp_size=8, pp_size=16, dp_size=8)
    assert dp.bytes_per_step == pytest.approx(2 * 7 / 8 * 175e9 / 128 * 2)
    tp = cm.comm_volume("tp", micro_batch_size=1, num_microbatches=4, tp_size=8, pp_size=16, **GPT3)
    assert tp.calls_per_step == 4 * 6 * 4


def test_sequence_parallel_doubles_calls_not_bytes():
    plain = cm.comm_volume("tp", micro_batch_size=1, tp_size=4, **GPT3)
    sp = cm.comm_volume("tp", micro_batch_size=1, tp_size=4, sequence_parallel=True, **GPT3)
    assert sp.bytes_per_step == plain.bytes_per_step and sp.calls_per_step == 2 * plain.calls_per_step


def test_a_group_of_one_rank_makes_no_calls():
    for volume in (cm.comm_volume("dp", params=1e9), cm.comm_volume("fsdp", params=1e9, layers=4),
                   cm.comm_volume("tp", micro_batch_size=1, **GPT3), cm.comm_volume("pp", micro_batch_size=1, **GPT3),
                   cm.comm_volume("dp", params=1e9, ddp_bucket_bytes=25 * 2**20)):
        assert (volume.bytes_per_step, volume.calls_per_step, volume.group_calls_per_step) == (0, 0, 0), volume.strategy
    assert cm.comm_volume("tp", micro_batch_size=1, tp_size=2, **GPT3).calls_per_step == 384


def test_ddp_buckets_set_the_number_of_calls():
    dp = cm.comm_volume("dp", params=1e9, dp_size=8, ddp_bucket_bytes=25 * 2**20)
    assert dp.calls_per_step == math.ceil(2e9 / (25 * 2**20))


def test_comm_volume_time_uses_per_direction_bandwidth():
    dp = cm.comm_volume("dp", params=175e9, dp_size=1024)
    assert dp.time_s(25.0) == pytest.approx(dp.bytes_per_step / 25e9)  # HDR: 25 GB/s per port
    assert dp.time_s(25.0, latency_s=1.0) == pytest.approx(dp.time_s(25.0) + 1.0)


def test_comm_volume_bad_input():
    with pytest.raises(ValueError, match="dp, fsdp, tp, pp"):
        cm.comm_volume("zero", params=1e9)
    with pytest.raises(ValueError, match="needs hidden, seq_len, micro_batch_size"):
        cm.comm_volume("tp", layers=4)
    with pytest.raises(ValueError, match="needs params"):
        cm.comm_volume("dp")
    with pytest.raises(ValueError, match="multiple of pp_size"):
        cm.comm_volume("tp", micro_batch_size=1, pp_size=5, **GPT3)


# -- ZeRO ---------------------------------------------------------------------------------

def test_zero_memory_table_reproduces_the_paper():
    totals = [row.total / GB for row in cm.zero_memory_table(7.5e9, 64)]
    assert [round(t, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]
    assert [row.stage for row in cm.zero_memory_table(7.5e9, 64)] == [0, 1, 2, 3]


def test_zero_memory_components():
    s2 = cm.zero_memory(7.5e9, 64, 2)
    assert s2.params == 15e9 and s2.grads == pytest.approx(15e9 / 64) and s2.optimizer_states == pytest.approx(90e9 / 64)
    assert s2.total == pytest.approx(s2.params + s2.grads + s2.optimizer_states)
    assert cm.zero_memory(1e9, 1, 3).total == cm.zero_memory(1e9, 1, 0).total == 16e9


def test_zero_comm_is_2psi_except_stage_3():
    two_psi = [cm.zero_comm_bytes(7.5e9, 64, stage) for stage in range(3)]
    assert two_psi == [pytest.approx(2 * 63 / 64 * 15e9)] * 3
    assert cm.zero_comm_bytes(7.5e9, 64, 3) == pytest.approx(1.5 * two_psi[0])


def test_zero_bad_stage():
    with pytest.raises(ValueError, match="stage must be"):
        cm.zero_memory(1e9, 8, 4)


# -- MFU and scaling ------------------------------------------------------------------------

def test_mfu_uses_palm_formula():
    per_token = 6 * 175e9 + 12 * 96 * 12288 * 2048
    assert cm.model_flops_per_token(175e9, 96, 12288, 2048) == per_token
    assert cm.mfu(1000.0, num_params=175e9, peak_flops=989e12, num_gpus=8, **GPT3) == pytest.approx(
        1000 * per_token / (8 * 989e12))


def test_scaling_efficiency_is_actual_over_linear():
    # 8 GPUs giving 7x one GPU's throughput: 87.5%, not 8/7 as the inverted ratio gives
    assert cm.scaling_efficiency(700.0, 8, 100.0) == pytest.approx(0.875)
    with pytest.raises(ValueError):
        cm.scaling_efficiency(1.0, 2, 0.0)


# -- fitting --------------------------------------------------------------------------------

def test_fit_recovers_alpha_and_beta():
    sizes = [2**k for k in range(10, 30, 2)]
    times = [cm.collective_time("all_reduce", "ring", s, 4, 20e-6, 1 / 12e9) for s in sizes]
    fit = cm.fit_alpha_beta(sizes, times, world_size=4)
    assert fit.alpha == pytest.approx(20e-6) and fit.bandwidth_GBps == pytest.approx(12.0)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.predict(1e6) == pytest.approx(cm.collective_time("all_reduce", "ring", 1e6, 4, 20e-6, 1 / 12e9))


def test_fit_with_noise_stays_close_and_nonnegative():
    sizes = [1e3, 1e4, 1e5, 1e6, 1e7]
    times = [cm.collective_time("all_gather", "ring", s, 8, 1e-5, 1e-9) * f for s, f in
             zip(sizes, [1.05, 0.97, 1.02, 0.99, 1.01])]
    fit = cm.fit_alpha_beta(sizes, times, op="all_gather", world_size=8)
    assert fit.alpha >= 0 and fit.beta == pytest.approx(1e-9, rel=0.05) and 0.99 < fit.r2 <= 1.0


def test_fit_clamps_a_negative_latency_to_zero():
    fit = cm.fit_alpha_beta([1e6, 2e6, 3e6], [0.9e-3, 2.0e-3, 3.0e-3], op="all_gather", world_size=2)
    assert fit.alpha == 0.0 and fit.beta > 0


def test_fit_bad_input():
    with pytest.raises(ValueError, match="two distinct"):
        cm.fit_alpha_beta([1e3, 1e3], [1.0, 1.0], world_size=2)
    with pytest.raises(ValueError, match="differ in length"):
        cm.fit_alpha_beta([1e3, 1e4], [1.0], world_size=2)


def test_relative_weighting_recovers_the_latency_that_absolute_misses():
    """8 B to 256 MiB with +-3% noise: an absolute fit lets the big messages' noise swamp alpha."""
    import random

    noise = random.Random(0)
    sizes = [2**k for k in range(3, 29)]
    true_alpha, true_beta = 20e-6, 1 / 1e9
    times = [cm.collective_time("all_reduce", "ring", s, 4, true_alpha, true_beta) * noise.uniform(0.97, 1.03)
             for s in sizes]
    absolute = cm.fit_alpha_beta(sizes, times, world_size=4)
    relative = cm.fit_alpha_beta(sizes, times, world_size=4, weighting="relative")
    assert relative.weighting == "relative" and absolute.weighting == "absolute"
    assert relative.alpha == pytest.approx(true_alpha, rel=0.05)
    assert absolute.alpha > 2 * true_alpha  # 3% of a 0.4 s time is 600 times alpha
    assert relative.beta == pytest.approx(true_beta, rel=0.05) and 0.99 < relative.r2 <= 1.0
    assert relative.predict(sizes[0]) == pytest.approx(times[0], rel=0.05)
    assert absolute.predict(sizes[0]) > 2 * times[0]


def test_relative_fit_is_exact_on_exact_data_and_stays_nonnegative():
    sizes = [1e3, 1e5, 1e7]
    times = [cm.collective_time("all_gather", "ring", s, 8, 2e-5, 1e-9) for s in sizes]
    fit = cm.fit_alpha_beta(sizes, times, op="all_gather", world_size=8, weighting="relative")
    assert fit.alpha == pytest.approx(2e-5) and fit.beta == pytest.approx(1e-9) and fit.r2 == pytest.approx(1.0)
    clamped = cm.fit_alpha_beta([1e6, 2e6, 3e6], [0.9e-3, 2.0e-3, 3.0e-3], op="all_gather", world_size=2,
                                weighting="relative")
    assert clamped.alpha == 0.0 and clamped.beta > 0


def test_fit_weighting_bad_input():
    with pytest.raises(ValueError, match="absolute, relative"):
        cm.fit_alpha_beta([1e3, 1e4], [1.0, 2.0], world_size=2, weighting="log")
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        cm.fit_alpha_beta([1e3, 1e4], [0.0, 2.0], world_size=2, weighting="relative")


# -- all-to-all and point-to-point ---------------------------------------------------------

def test_all_to_all_pairwise_matches_mpich_cost():
    """MPICH alltoall_intra_pairwise.c: (p-1) alpha + n' beta, n' = bytes sent to the others = (p-1)/p n."""
    p, n, a, b = 8, 1e9, 5e-6, 1 / 50e9
    expected = (p - 1) * a + (p - 1) / p * n * b
    assert cm.collective_time("all_to_all", "pairwise", n, p, a, b) == pytest.approx(expected)
    assert cm.collective_time("all_to_all", "ring", n, p, a, b) == pytest.approx(expected)
    assert cm.ring_bytes_per_rank("all_to_all", 1e9, 4) == pytest.approx(0.75e9)  # busbw factor (n-1)/n


def test_sendrecv_is_one_message():
    assert cm.collective_time("sendrecv", "point_to_point", 1e6, 2, 10e-6, 1e-9) == pytest.approx(10e-6 + 1e-3)
    assert cm.collective_time("sendrecv", "point_to_point", 1e6, 64, 10e-6, 1e-9) == pytest.approx(10e-6 + 1e-3)
    assert cm.ring_bytes_per_rank("sendrecv", 1e6, 4) == 1e6
    sizes = [1e3, 1e5, 1e7]
    fit = cm.fit_alpha_beta(sizes, [3e-6 + s / 20e9 for s in sizes], op="sendrecv", algorithm="point_to_point",
                            world_size=2)
    assert fit.alpha == pytest.approx(3e-6) and fit.bandwidth_GBps == pytest.approx(20.0)


# -- mixture of experts ------------------------------------------------------------------------

def test_expert_capacity_counts_every_assignment():
    # T k / E x factor: 4096 tokens, top-2 over 8 experts, factor 1.25 -> 1280 per expert
    assert cm.expert_capacity(4096, 8, top_k=2, capacity_factor=1.25) == 1280
    assert cm.expert_capacity(4096, 8, top_k=1, capacity_factor=1.0) == 512
    assert cm.expert_capacity(10, 4, top_k=1, capacity_factor=1.0) == 3  # ceil(2.5)
    # the classic mistake (capacity from T, not T k) would give 512 for top-2: half of 1024
    assert cm.expert_capacity(4096, 8, top_k=2, capacity_factor=1.0) == 1024
    # exact arithmetic: 1000 / 10 x 1.1 is 110, where floats give 110.00000000000001
    assert math.ceil(1000 / 10 * 1.1) == 111 and cm.expert_capacity(1000, 10, 1, 1.1) == 110


@pytest.mark.parametrize("kwargs, message", [
    (dict(tokens=0, num_experts=8), "tokens"),
    (dict(tokens=8, num_experts=8, top_k=9), "cannot exceed"),
    (dict(tokens=8, num_experts=8, capacity_factor=0), "capacity_factor"),
    (dict(tokens=8, num_experts=8, capacity_factor=float("nan")), "capacity_factor"),
])
def test_expert_capacity_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cm.expert_capacity(**kwargs)


def test_load_balancing_loss_equals_alpha_under_uniform_routing():
    torch = pytest.importorskip("torch")
    tokens, experts = 64, 8
    probs = torch.full((tokens, experts), 1 / experts)
    round_robin = torch.arange(tokens) % experts
    assert cm.load_balancing_loss(probs, round_robin).item() == pytest.approx(1e-2)
    assert cm.load_balancing_loss(probs, round_robin, alpha=0.5).item() == pytest.approx(0.5)
    top2 = torch.stack([round_robin, (round_robin + 1) % experts], dim=1)
    assert cm.load_balancing_loss(probs, top2).item() == pytest.approx(1e-2)


def test_load_balancing_loss_grows_with_imbalance_and_matches_the_formula():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(32, 4), dim=-1)
    index = probs.argmax(dim=-1)
    f = torch.bincount(index, minlength=4).double() / 32
    expected = 1e-2 * 4 * torch.sum(f * probs.double().mean(0))
    assert cm.load_balancing_loss(probs, index).item() == pytest.approx(expected.item())
    collapsed = torch.zeros(32, 4)
    collapsed[:, 0] = 1.0
    assert cm.load_balancing_loss(collapsed, torch.zeros(32, dtype=torch.long)).item() == pytest.approx(4e-2)


def test_load_balancing_loss_does_not_differentiate_the_token_share():
    """The gradient reaches the router only through P_i: d loss / d probs[t, i] = alpha E f_i / T."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    logits = torch.randn(16, 4, requires_grad=True)
    probs = torch.softmax(logits, dim=-1)
    probs.retain_grad()
    index = probs.argmax(dim=-1)
    loss = cm.load_balancing_loss(probs, index, alpha=0.1)
    loss.backward()
    f = torch.bincount(index, minlength=4).float() / 16
    assert torch.allclose(probs.grad, (0.1 * 4 * f / 16).expand(16, 4))
    assert logits.grad is not None and logits.grad.abs().sum() > 0


@pytest.mark.parametrize("probs_shape, index, message", [
    ((8,), [0] * 8, "tokens, experts"),
    ((8, 4), [0] * 7, "shape"),
    ((8, 4), [4] * 8, "0..3"),
])
def test_load_balancing_loss_bad_input(probs_shape, index, message):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=message):
        cm.load_balancing_loss(torch.rand(*probs_shape), torch.tensor(index))
