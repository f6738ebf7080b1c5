"""Where each strategy becomes communication-bound: crossovers against values derived by hand."""
from __future__ import annotations

import math

import pytest

from labutils import costmodel as cm

H100_BF16 = 989e12          # FLOP/s, dense (NVIDIA H100 SXM datasheet)
NVLINK4 = 450e9             # B/s per direction
IB_NDR = 50e9               # B/s per direction (400 Gb/s)


def test_dp_crossover_is_the_flop_to_byte_ratio_against_the_backward_only():
    # the gradients exist only in the backward (4N FLOP per token): 4 N D / P = 2 (d-1)/d x 2N / BW
    # =>  D* = (d-1)/d x P / BW; d = 8 over NDR: 7/8 x 19780 = 17307.5 (not two thirds of it)
    costs = cm.dp_step_costs(7e9, 8)
    assert cm.crossover_tokens(costs, H100_BF16, 0.0, 1 / IB_NDR) == pytest.approx(17307.5, rel=1e-5)
    assert cm.crossover_tokens(costs, H100_BF16, 0.0, 1 / NVLINK4) == pytest.approx(1923.06, rel=1e-5)
    assert costs.compute_s(1000, H100_BF16) == pytest.approx(6 * 7e9 * 1000 / H100_BF16)   # the step: 6N
    assert costs.overlap_s(1000, H100_BF16) == pytest.approx(4 * 7e9 * 1000 / H100_BF16)   # beside the comm: 4N


def test_dp_and_fsdp_share_one_bound():
    # FSDP moves 1.5x DP's bytes beside the whole step (forward gather beside the forward): the same D*
    for degree in (2, 8, 64):
        dp, fsdp = cm.dp_step_costs(1e9, degree), cm.fsdp_step_costs(1e9, degree, layers=4)
        assert cm.crossover_tokens(dp, H100_BF16, 0.0, 1 / IB_NDR) == pytest.approx(
            cm.crossover_tokens(fsdp, H100_BF16, 0.0, 1 / IB_NDR))


def test_dp_latency_adds_its_messages_to_the_crossover():
    # ring all-reduce on 4 ranks: 2(n-1) = 6 messages; N = 1e9, P = 1e12, alpha = 1 ms, beta = 0:
    # backward 4e9 D / 1e12 = 6e-3 s  =>  D* = 1.5 tokens
    assert cm.crossover_tokens(cm.dp_step_costs(1e9, 4), 1e12, 1e-3, 0.0) == pytest.approx(1.5)


def test_fsdp_moves_one_and_a_half_times_dp():
    dp, fsdp = cm.dp_step_costs(1e9, 16), cm.fsdp_step_costs(1e9, 16, layers=4)
    assert fsdp.bytes_per_step == pytest.approx(1.5 * dp.bytes_per_step)
    assert fsdp.messages_per_step == 4 * 3 * 15                 # 3 collectives per layer, n-1 steps each
    # D* = (d-1)/d x P / BW = 15/16 x 19780 = 18543.75
    assert cm.crossover_tokens(fsdp, H100_BF16, 0.0, 1 / IB_NDR) == pytest.approx(18543.75, rel=1e-6)


def test_tp_condition_is_on_hidden_over_degree_not_on_tokens():
    # h* = (2/9)(t-1) P / BW: t = 8 over NVLink4 = 2/9 x 7 x 2197.8 = 3418.8
    h_star = cm.tp_min_hidden(8, H100_BF16, NVLINK4)
    assert h_star == pytest.approx(3418.77, rel=1e-5)
    below, above = cm.tp_step_costs(3072, 8, layers=2), cm.tp_step_costs(4096, 8, layers=2)
    assert cm.crossover_tokens(below, H100_BF16, 0.0, 1 / NVLINK4) == math.inf      # comm-bound at any D
    assert cm.crossover_tokens(above, H100_BF16, 0.0, 1 / NVLINK4) == 0.0           # never comm-bound
    # at h = h* the two times agree for every D
    at = cm.tp_step_costs(round(h_star), 8)
    for tokens in (1, 1000, 1e6):
        assert at.comm_s(tokens, 0.0, 1 / NVLINK4) == pytest.approx(at.compute_s(tokens, H100_BF16), rel=1e-3)


def test_tp_latency_makes_small_batches_comm_bound():
    costs = cm.tp_step_costs(8192, 2, layers=1)         # 4 all-reduces x 2 messages, 16 KiB per token each
    # compute 72 h^2 / 2 per token; comm per token 4 x 2 x 1/2 x 2h bytes at beta
    margin = 72 * 8192**2 / 2 / 1e12 - 4 * 2 * 8192 * 1e-9
    assert cm.crossover_tokens(costs, 1e12, 1e-5, 1e-9) == pytest.approx(8 * 1e-5 / margin)


def test_pp_and_ep_hand_values():
    # PP: h L/p < (1/18) P/BW. 989e12 / 50e9 / 18 = 1098.9, so h = 1024 with L/p = 1 is comm-bound
    assert cm.crossover_tokens(cm.pp_step_costs(1024, 4, 4), H100_BF16, 0.0, 1 / IB_NDR) == math.inf
    assert cm.crossover_tokens(cm.pp_step_costs(1024, 8, 4), H100_BF16, 0.0, 1 / IB_NDR) == 0.0
    pp = cm.pp_step_costs(512, 4, 2)
    assert pp.bytes_per_token == 4 * 512 and pp.messages_per_step == 2
    # EP: f* = (2/3)(e-1)/e P/BW = 2/3 x 3/4 x 19780 = 9890 for e = 4 over NDR
    assert cm.ep_min_expert_hidden(4, H100_BF16, IB_NDR) == pytest.approx(9890.0)
    for top_k in (1, 2, 8):      # k and h cancel
        ep = cm.ep_step_costs(4096, 9890, 4, top_k=top_k)
        assert ep.comm_s(100, 0.0, 1 / IB_NDR) == pytest.approx(ep.compute_s(100, H100_BF16))


def test_crossover_curve_marks_where_the_lines_meet():
    costs = cm.dp_step_costs(1e9, 8)
    links = {"fast": (0.0, 1e-11), "slow": (1e-5, 1e-10)}
    curve = cm.crossover_curve(costs, [10, 100, 1000], 1e13, links)
    for label, (alpha, beta) in links.items():
        d_star = curve.crossover[label]
        assert costs.comm_s(d_star, alpha, beta) == pytest.approx(costs.overlap_s(d_star, 1e13))
    assert curve.compute_s == tuple(costs.overlap_s(t, 1e13) for t in (10, 100, 1000))
    assert curve.compute_label == "backward compute"
    assert cm.crossover_curve(cm.fsdp_step_costs(1e9, 8), [10, 100], 1e13, links).compute_label == "compute"


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="peak_flops"):
        cm.crossover_tokens(cm.dp_step_costs(1e9, 2), 0, 0, 1e-9)
    with pytest.raises(ValueError, match="pp_size"):
        cm.pp_step_costs(1024, 4, 1)
    with pytest.raises(ValueError, match="multiple of pp_size"):
        cm.pp_step_costs(1024, 6, 4)
    with pytest.raises(ValueError, match="tp_size"):
        cm.tp_step_costs(1024, 0)
    with pytest.raises(ValueError, match="link"):
        cm.crossover_curve(cm.dp_step_costs(1e9, 2), [1], 1e12, {})


def test_comm_vs_compute_figure_marks_the_crossover():
    from labutils import plots

    links = {"fast": (0.0, 1e-11), "slow": (0.0, 1e-9)}
    curves = [cm.crossover_curve(c, [1, 1e3, 1e6], 1e13, links)
              for c in (cm.dp_step_costs(1e8, 8), cm.tp_step_costs(1024, 4))]
    fig = plots.comm_vs_compute(curves, title="t", columns=2)
    dp_ax = fig.axes[0]
    assert [line.get_label() for line in dp_ax.get_lines()][:2] == [
        "backward compute", f"comm, fast: D_GPU* = {curves[0].crossover['fast']:.2g} tokens"]
    assert any("always comm-bound" in line.get_label() or "never comm-bound" in line.get_label()
               for line in fig.axes[1].get_lines())
    with pytest.raises(ValueError, match="two token counts"):
        plots.comm_vs_compute([cm.crossover_curve(cm.dp_step_costs(1e8, 2), [5], 1e12, links)])


def test_tp_min_hidden_self_check(capsys):
    from labutils.checks import comm_bound as check

    expected = cm.tp_min_hidden(8, H100_BF16, NVLINK4)
    for answer, message in ((expected, "correct"), (expected / 2, "bidirectional"), (8 / 7 * expected, "t-1, not t"),
                            (2 * expected, "2:4-sparse"), (None, "not answered yet"), (5.0, "not 5.0")):
        check.tp_min_hidden(answer)
        assert message in capsys.readouterr().out
