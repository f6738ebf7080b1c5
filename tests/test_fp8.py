"""labutils.kernels.fp8: the OCP formats against torch's dtypes, scaling, round-trip errors, the FP8 all-gather."""
from __future__ import annotations

import pytest
import torch

from labutils import plots
from labutils.kernels import fp8
from labutils.ranks.launch import launch


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_formats_match_torch_and_the_spec(name):
    fmt = fp8.fp8_format(name)
    info = torch.finfo(fmt.dtype)
    assert (info.max, info.smallest_normal, info.eps) == (fmt.max_normal, fmt.min_normal, fmt.spacing)
    # max normal = (2 - 2 spacing) x 2^(emax): E4M3 reuses the all-ones exponent (only S.1111.111 is NaN)
    top_exponent = 2**fmt.exponent_bits - 1 - fmt.bias - (1 if fmt.has_infinity else 0)
    mantissa = 2 - 2 * fmt.spacing if not fmt.has_infinity else 2 - fmt.spacing
    assert mantissa * 2.0**top_exponent == fmt.max_normal
    assert fmt.min_subnormal == fmt.min_normal * fmt.spacing
    assert torch.tensor([fmt.min_subnormal]).to(fmt.dtype).float().item() == fmt.min_subnormal
    assert torch.tensor([fmt.min_subnormal * 0.49]).to(fmt.dtype).float().item() == 0.0


def test_448_and_57344_and_the_aliases():
    assert fp8.FORMATS["e4m3"].max_normal == 448 and fp8.FORMATS["e5m2"].max_normal == 57344
    assert fp8.fp8_format(torch.float8_e5m2) is fp8.FORMATS["e5m2"]
    assert fp8.fp8_format("float8_e4m3fn") is fp8.FORMATS["e4m3"]
    with pytest.raises(ValueError, match="e4m3"):
        fp8.fp8_format("e3m4")


def test_amax_scale_puts_amax_on_the_top_of_the_format():
    assert fp8.amax_scale(3.5, "e4m3") == 128.0
    assert fp8.amax_scale(3.5, "e4m3", margin=2) == 32.0
    assert fp8.amax_scale(0.0) == 1.0
    with pytest.raises(ValueError, match="amax"):
        fp8.amax_scale(-1.0)
    x = torch.tensor([3.5, -1.0, 0.25])
    q = fp8.quantize(x, "e4m3", 128.0)
    assert q.dtype == torch.float8_e4m3fn and q.float()[0].item() == 448.0
    assert torch.equal(fp8.dequantize(q, 128.0), x)            # these values are exact in E4M3


def test_quantize_saturates_instead_of_overflowing():
    q = fp8.quantize(torch.tensor([1e6, -1e6]), "e5m2", 1.0)
    assert q.float().tolist() == [57344.0, -57344.0]


def test_scale_sweep_shows_flush_clip_and_the_best_in_between():
    x = fp8.tensor_with_outliers(4096, std=1e-3)
    best = fp8.amax_scale(float(x.abs().max()), "e4m3")
    unscaled, right, too_big = (fp8.quantization_error(x, "e4m3", s) for s in (1.0, best, 64 * best))
    assert unscaled.flushed > 0.5 and unscaled.median_relative == 1.0        # most values became 0
    assert right.saturated == 0.0 and right.median_relative < 2 * 2.0**-4     # half a step of 2^-3, with slack
    assert too_big.saturated > 0 and too_big.relative_rmse > 0.5              # the outliers are clipped
    with pytest.raises(ValueError, match="non-zero"):
        fp8.quantization_error(torch.zeros(4))


def test_delayed_scaling_lags_a_spike_and_current_scaling_does_not():
    amaxes = [1.0, 1.0, 8.0, 1.0]
    assert fp8.history_scales(amaxes, "e4m3", history_len=2) == [448.0, 448.0, 448.0, 56.0]
    assert fp8.history_scales(amaxes, "e4m3", delayed=False) == [448.0, 448.0, 56.0, 448.0]


def test_summing_in_fp8_loses_what_bf16_and_fp32_keep():
    parts = [torch.randn(2048, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    errors = {s: fp8.accumulation_error(parts, s) for s in ("fp32", "bf16", "e4m3", "e5m2")}
    assert errors["fp32"] < 1e-6 < errors["bf16"] < 0.01 < errors["e4m3"] < errors["e5m2"] < 0.3


def test_scaled_matmul_matches_the_float_product_and_names_why_it_is_slow_here():
    a = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    b = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))
    out, error = fp8.scaled_matmul(a, b)
    assert out.shape == (32, 16) and out.dtype == torch.bfloat16 and error < 0.1
    assert "emulation" in fp8.fp8_matmul_unavailable("cpu")
    with pytest.raises(ValueError, match="multiple of 16"):
        fp8.scaled_matmul(torch.ones(8, 16), torch.ones(16, 16))


def _gather_rank_shard():
    import torch.distributed as dist

    return fp8.fp8_all_gather(fp8.tensor_with_outliers(1024, seed=dist.get_rank()), "e4m3")


def test_fp8_all_gather_halves_the_bytes_and_stays_close():
    results = launch(_gather_rank_shard, 2, backend="gloo", timeout=60)
    for result in results:
        assert result["bf16_bytes"] == 2 * result["fp8_bytes"] == 2048
        assert result["bf16_error"] < 0.01 < result["fp8_error"] < 0.1
    assert results[0]["scale"] == results[1]["scale"]                      # one scale for the whole weight


def test_fp8_scale_sweep_figure():
    x = fp8.tensor_with_outliers(512)
    sweeps = {"E4M3": [fp8.quantization_error(x, "e4m3", s) for s in (0.1, 1.0, 10.0)]}
    fig = plots.fp8_scale_sweep(sweeps, {"E4M3": fp8.amax_scale(float(x.abs().max()))}, title="t")
    error_ax, share_ax = fig.axes
    assert len(error_ax.get_lines()) == 3 and len(share_ax.get_lines()) == 3     # two curves and the amax line
    assert list(error_ax.get_lines()[0].get_ydata()) == [e.relative_rmse for e in sweeps["E4M3"]]
    with pytest.raises(ValueError, match="two scales"):
        plots.fp8_scale_sweep({"E4M3": sweeps["E4M3"][:1]})


def test_e4m3_scale_self_check(capsys):
    from labutils.checks import fp8 as check

    for answer, message in ((128, "correct"), (1 / 128, "1/s"), (16384, "E5M2"), (240 / 3.5, "240"),
                            (None, "not answered yet"), (3, "not 3")):
        check.e4m3_scale(answer)
        assert message in capsys.readouterr().out
