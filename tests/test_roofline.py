"""labutils.costmodel.roofline against NVIDIA's datasheets (V100, A100, H100, H200, HGX B200), single process."""
import pytest

from labutils.costmodel import roofline as rf

DATASHEET_RIDGES = {"v100": 139, "a100": 153, "h100": 295, "h200": 206, "b200": 281}


@pytest.mark.parametrize("key, ridge", DATASHEET_RIDGES.items())
def test_ridge_points_match_datasheet_peak_over_bandwidth(key, ridge):
    device = rf.DEVICES[key]
    dtype = "fp16" if key == "v100" else "bf16"
    assert round(rf.ridge_point(device, dtype)) == ridge


def test_dense_peaks_and_bandwidths():
    assert rf.DEVICES["h100"].peak("bf16") == 989e12 and rf.DEVICES["h100"].mem_bandwidth == 3.35e12
    assert rf.DEVICES["a100"].peak("bf16") == 312e12  # 624 is sparse
    assert rf.DEVICES["b200"].peak("bf16") == 2250e12
    assert rf.DEVICES["h200"].mem_bandwidth == 4.8e12
    assert rf.DEVICES["h100"].nvlink_bidirectional == 900e9


def test_memory_capacity_is_the_datasheet_figure_in_gib_as_nvidia_smi_reports():
    from labutils.machine.hardware import GiB

    assert rf.DEVICES["h100"].memory_bytes == 80 * GiB == 85_899_345_920  # 81920 MiB, 85.9 GB
    assert rf.DEVICES["h200"].memory_bytes == 141 * GiB
    assert rf.DEVICES["a100"].memory_bytes == rf.datasheet_memory(80) > 80e9
    assert all(d.memory_bytes % GiB == 0 for d in rf.DEVICES.values() if d.memory_bytes)


def test_every_datasheet_device_names_its_own_document():
    for key, device in rf.DEVICES.items():
        assert key.upper() in device.source and "datasheet" in device.source and "dense" in device.source


def test_v100_has_no_bf16():
    with pytest.raises(ValueError, match="no bf16"):
        rf.DEVICES["v100"].peak("bf16")
    assert rf.DEVICES["v100"].peak(" fp16".strip()) == 125e12


@pytest.mark.parametrize("n", [256, 1024, 8192])
def test_square_gemm_intensity_is_n_over_3_in_two_byte_types(n):
    for dtype in ("bf16", "fp16"):
        assert rf.gemm(n, n, n, dtype).intensity == pytest.approx(n / 3)
    assert rf.gemm(n, n, n, "fp32").intensity == pytest.approx(n / 6)


@pytest.mark.parametrize("n", [256, 1024, 8192])
def test_fp8_gemm_with_a_bf16_output_has_intensity_n_over_2(n):
    assert rf.gemm(n, n, n, "fp8", out_dtype="bf16").intensity == pytest.approx(n / 2)
    assert rf.gemm(n, n, n, "fp8").intensity == pytest.approx(2 * n / 3)     # FP8 written out too


def test_fp8_ridge_doubles_so_mid_sized_square_gemms_turn_memory_bound():
    h100 = rf.DEVICES["h100"]
    assert rf.ridge_point(h100, "bf16") == pytest.approx(295, abs=1)
    assert rf.ridge_point(h100, "fp8") == pytest.approx(591, abs=1)
    bf16, fp8 = rf.gemm(1024, 1024, 1024, "bf16"), rf.gemm(1024, 1024, 1024, "fp8", out_dtype="bf16")
    assert bf16.intensity > rf.ridge_point(h100, "bf16") and fp8.intensity < rf.ridge_point(h100, "fp8")


def test_gemm_counts():
    op = rf.gemm(2, 3, 4, "fp32")
    assert op.flops == 48 and op.bytes == (8 + 12 + 6) * 4


def test_elementwise_is_memory_bound_everywhere():
    op = rf.elementwise(1 << 20, "bf16")
    assert op.intensity == pytest.approx(1 / 6)
    for key, device in rf.DEVICES.items():
        dtype = "fp16" if key == "v100" else "bf16"
        assert rf.bound(op, device, dtype) == "memory"
        assert rf.attainable(op.intensity, device, dtype) == pytest.approx(device.mem_bandwidth / 6)


def test_attainable_is_the_minimum_of_the_two_roofs():
    h100 = rf.DEVICES["h100"]
    assert rf.attainable(10.0, h100, "bf16") == pytest.approx(33.5e12)
    assert rf.attainable(1e4, h100, "bf16") == 989e12
    big = rf.gemm(8192, 8192, 8192, "bf16")
    assert rf.bound(big, h100, "bf16") == "compute"
    assert rf.min_time(big, h100, "bf16") == pytest.approx(2 * 8192**3 / 989e12)


def test_softmax_layernorm_attention():
    assert rf.softmax(4, 8, "bf16").intensity == pytest.approx(5 / 4)
    ln = rf.layernorm(16, 8, "fp32")
    assert ln.flops == 8 * 128 and ln.bytes == (2 * 128 + 16) * 4
    fused = rf.attention(1, 16, 4096, 128, "bf16")
    unfused = rf.attention(1, 16, 4096, 128, "bf16", fused=False)
    assert fused.flops == unfused.flops == 4 * 16 * 4096**2 * 128
    assert fused.intensity == pytest.approx(4096 / 2)  # 4 s^2 d / (4 s d x 2 bytes)
    assert unfused.intensity < rf.ridge_point(rf.DEVICES["h100"]) < fused.intensity


def test_dtype_aliases_and_errors():
    assert rf.canonical_dtype("bfloat16") == "bf16" and rf.dtype_bytes("float32") == 4
    with pytest.raises(ValueError, match="choose one of"):
        rf.gemm(8, 8, 8, "fp12")
    with pytest.raises(ValueError, match="whole number"):
        rf.gemm(0, 8, 8)


def test_get_device_by_name():
    assert rf.get_device("H100 SXM") is rf.DEVICES["h100"]
    with pytest.raises(ValueError, match="v100, a100, h100, h200, b200"):
        rf.get_device("mi300")


def test_device_from_measurements():
    cpu = rf.device_from_measurements("laptop", 1e11, 2e10)
    assert cpu.peak("fp32") == 1e11 and rf.ridge_point(cpu, "fp32") == pytest.approx(5.0)
    with pytest.raises(ValueError, match="mem_bandwidth"):
        rf.device_from_measurements("x", {"fp32": 1e9}, 0)


def test_measured_cpu_device_gives_positive_numbers():
    cpu = rf.measured_cpu_device(matmul_size=64, copy_bytes=1 << 20, repeats=2)
    assert cpu.peak("fp32") > 0 and cpu.mem_bandwidth > 0 and "measured" in cpu.source
