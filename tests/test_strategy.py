"""labutils.costmodel.strategy.suggest: the decision guide of its module docstring (single process)."""
import pytest

from labutils.costmodel import zero_memory
from labutils.costmodel.strategy import activation_bytes_per_layer, suggest

GPT3 = dict(layers=96, hidden=12288, heads=96)


def test_a_model_that_fits_gets_plain_data_parallelism():
    s = suggest(1.3e9, 8, 8, 80e9)
    assert (s.tp, s.pp, s.dp, s.zero_stage, s.fits) == (1, 1, 8, 0, True)
    assert s.memory_per_gpu_bytes == pytest.approx(16 * 1.3e9)
    assert "plain data parallelism" in s.reasons[0]


def test_zero_before_model_parallelism_lowest_stage_that_fits():
    s = suggest(7.5e9, 64, 8, 80e9)
    assert (s.tp, s.pp, s.dp, s.zero_stage) == (1, 1, 64, 1)
    assert s.memory_per_gpu_bytes == pytest.approx(zero_memory(7.5e9, 64, 1).total)
    s = suggest(7.5e9, 64, 8, 24e9)
    assert (s.tp, s.pp, s.zero_stage) == (1, 1, 2)
    assert any("no extra communication" in r for r in s.reasons)


def test_tensor_parallelism_stays_inside_the_nvlink_domain():
    s = suggest(30e9, 16, 8, 80e9)
    assert (s.tp, s.pp, s.dp) == (2, 1, 8) and s.fits
    big = suggest(175e9, 1024, 8, 80e9, **GPT3)
    assert big.tp == 8 and big.pp > 1 and big.tp * big.pp * big.dp == 1024 and big.fits
    assert GPT3["layers"] % big.pp == 0
    assert any("across nodes" in r for r in big.reasons)


def test_tp_divides_the_heads():
    s = suggest(30e9, 16, 8, 40e9, layers=48, hidden=6144, heads=12)
    assert 12 % s.tp == 0 and s.tp <= 8


def test_pcie_never_uses_tensor_parallelism():
    s = suggest(30e9, 16, 8, 80e9, intra_node="pcie")
    assert s.tp == 1 and any("PCIe" in r for r in s.reasons)
    assert s.pp > 1 or s.zero_stage > 0


def test_activations_count_when_the_shape_is_given():
    without = suggest(1.3e9, 8, 8, 80e9)
    shape = dict(layers=24, hidden=2048, heads=16)
    with_act = suggest(1.3e9, 8, 8, 80e9, seq_len=2048, **shape)
    assert with_act.memory_per_gpu_bytes == pytest.approx(
        without.memory_per_gpu_bytes + 24 * activation_bytes_per_layer(2048, 1, 2048, 16))
    assert any("not counted" in r for r in without.reasons)


def test_activation_formula_reduces_to_34_plus_5as_over_h_without_tp():
    s, b, h, a = 2048, 1, 12288, 96
    assert activation_bytes_per_layer(s, b, h, a) == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert activation_bytes_per_layer(s, b, h, a, tp=8) == pytest.approx(s * b * h * (10 + 24 / 8 + 5 * a * s / (h * 8)))


def test_zero_3_when_nothing_else_is_enough():
    s = suggest(30e9, 8, 8, 80e9, intra_node="pcie", layers=1, hidden=1024, heads=8)
    assert (s.tp, s.pp, s.zero_stage) == (1, 1, 3) and s.fits  # 1 layer: no pipeline possible
    assert any("1.5x" in r for r in s.reasons)


def test_too_big_says_so():
    s = suggest(1e12, 8, 8, 80e9)
    assert not s.fits and s.memory_per_gpu_bytes > 80e9
    assert "No layout fits" in s.reasons[-1] and "does NOT fit" in str(s)


def test_usable_memory_fraction_tightens_the_budget():
    assert suggest(4.5e9, 8, 8, 80e9).zero_stage == 0  # 72 GB
    assert suggest(4.5e9, 8, 8, 80e9, usable_memory_fraction=0.8).zero_stage == 1


def test_bad_input():
    with pytest.raises(ValueError, match="nvlink, pcie"):
        suggest(1e9, 8, 8, 80e9, intra_node="infiniband")
    with pytest.raises(ValueError, match="multiple of gpus_per_node"):
        suggest(1e9, 12, 8, 80e9)
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        suggest(1e9, 8, 8, 0)
