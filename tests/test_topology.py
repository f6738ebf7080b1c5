"""labutils.machine.topology: parse real `nvidia-smi topo -m` outputs and describe them in words.

Twelve real outputs, captured on real machines as they were printed (CRLF pastes and ANSI
colour codes kept), ship as labutils/data/topo; each names its source.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from labutils.machine.topology import (
    LINK_TYPES_FASTEST_FIRST,
    GpuAffinity,
    explain_link,
    format_cpu_list,
    link_rank,
    link_types_explained,
    nvlink_count,
    parse_cpu_list,
    parse_topology,
)

SHIPPED = Path(__file__).resolve().parents[1] / "labutils" / "data" / "topo"


def fixture_text(stem: str) -> str:
    """The real output ``stem``, as shipped in labutils."""
    return (SHIPPED / f"{stem}.txt").read_bytes().decode()


def matrix_by_hand(text: str) -> tuple[list[str], list[list[str]]]:
    """Devices and link cells read the simplest way, as a check on the parser: drop ANSI codes,
    take the names before "CPU Affinity" on the header (every real output prints that
    column), then the first len(devices) words of each device's row (link cells are never
    blank, unlike affinity cells)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    devices = next(line for line in lines if "CPU Affinity" in line).split("CPU Affinity")[0].split()
    rows = {line.split()[0]: line.split()[1 : 1 + len(devices)] for line in lines
            if line.split() and line.split()[0] in devices and len(line.split()) > len(devices)}
    return devices, [rows[name] for name in devices]


def gpus(n):
    return [f"GPU{i}" for i in range(n)]


# For each real output: devices, a few cells checked by eye against the file, affinity of
# some GPUs, the NIC legend (the whole matrix and summary are checked below).
CASES = {
    "01_dgx_a100_8x_nv12_mlx5x12": dict(
        devices=gpus(8) + [f"mlx5_{i}" for i in range(12)],
        cells={("GPU0", "GPU7"): "NV12", ("GPU0", "mlx5_0"): "PXB", ("GPU2", "mlx5_3"): "PXB",
               ("GPU7", "mlx5_9"): "PXB", ("mlx5_4", "mlx5_5"): "PIX", ("mlx5_10", "mlx5_11"): "PIX",
               ("GPU0", "mlx5_11"): "SYS", ("mlx5_0", "mlx5_1"): "PXB"},
        columns=("CPU Affinity", "NUMA Affinity"),
        affinity={"GPU0": GpuAffinity("48-63,176-191", "3"), "GPU2": GpuAffinity("16-31,144-159", "1"),
                  "GPU7": GpuAffinity("80-95,208-223", "5")},
        nic_names={},
    ),
    "02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity": dict(
        devices=gpus(8) + [f"NIC{i}" for i in range(6)],
        cells={("GPU0", "GPU5"): "NV18", ("GPU0", "NIC1"): "PIX", ("GPU3", "NIC2"): "PIX",
               ("GPU6", "NIC5"): "PIX", ("NIC3", "NIC4"): "PIX", ("GPU1", "NIC0"): "NODE"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        # CPU Affinity is blank for GPU0-3 and "1" for GPU4-7, as printed; GPU NUMA ID is N/A
        affinity={"GPU0": GpuAffinity(None, "0", None), "GPU3": GpuAffinity(None, "0", None),
                  "GPU4": GpuAffinity("1", "1", None), "GPU7": GpuAffinity("1", "1", None)},
        nic_names={f"NIC{i}": f"mlx5_{i}" for i in range(6)},
    ),
    "03_hgx_a800_8x_nv8_4nics": dict(
        devices=gpus(8) + [f"NIC{i}" for i in range(4)],
        cells={("GPU3", "GPU4"): "NV8", ("GPU1", "NIC0"): "PIX", ("GPU0", "NIC0"): "NODE",
               ("GPU0", "NIC2"): "SYS", ("NIC2", "NIC3"): "PIX", ("GPU7", "NIC3"): "PIX"},
        columns=("CPU Affinity", "NUMA Affinity"),
        affinity={"GPU0": GpuAffinity("0-31,64-95", "0"), "GPU7": GpuAffinity("32-63,96-127", "1")},
        nic_names={f"NIC{i}": f"mlx5_{i}" for i in range(4)},
    ),
    "04_hgx_h100_4x_nv6_4nics_issue": dict(
        devices=gpus(4) + [f"NIC{i}" for i in range(4)],
        cells={("GPU0", "GPU3"): "NV6", ("GPU2", "NIC2"): "PIX", ("GPU2", "NIC3"): "SYS",
               ("NIC0", "NIC3"): "SYS"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("6,14,22,30", "3"), "GPU1": GpuAffinity("4,12,20,28", "1"),
                  "GPU3": GpuAffinity("5,13,21,29", "5")},
        nic_names={},  # the legend was cut off
    ),
    "05_dgx1_v100_8x_hybrid_cube_mesh_mlx5x4": dict(
        devices=gpus(8) + ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"],
        cells={("GPU0", "GPU1"): "NV1", ("GPU0", "GPU3"): "NV2", ("GPU0", "GPU5"): "SYS",
               ("GPU3", "GPU7"): "NV1", ("GPU0", "mlx5_0"): "PIX", ("GPU0", "mlx5_1"): "PHB",
               ("mlx5_2", "mlx5_3"): "PHB", ("GPU7", "mlx5_3"): "PIX"},
        columns=("CPU Affinity",),
        affinity={"GPU0": GpuAffinity("0-19,40-59"), "GPU7": GpuAffinity("20-39,60-79")},
        nic_names={},
    ),
    "06_pcie_4x_rtx6000ada_4nics_node_sys_pix": dict(
        devices=gpus(4) + [f"NIC{i}" for i in range(4)],
        cells={("GPU0", "GPU1"): "NODE", ("GPU1", "GPU2"): "SYS", ("NIC0", "NIC1"): "PIX",
               ("GPU3", "NIC3"): "NODE"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("0-31", "0"), "GPU3": GpuAffinity("32-63", "1")},
        nic_names={f"NIC{i}": f"mlx5_{i}" for i in range(4)},
    ),
    "07_pcie_8x_rtx3090_pix_phb_sys_issue": dict(
        devices=gpus(8),
        cells={("GPU0", "GPU1"): "PIX", ("GPU1", "GPU3"): "PHB", ("GPU3", "GPU4"): "SYS",
               ("GPU6", "GPU7"): "PIX"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("0-13,28-41", "0"), "GPU5": GpuAffinity("14-27,42-55", "1")},
        nic_names={},
    ),
    "08_pcie_8x_gpu_pix_pxb_sys_issue": dict(
        devices=gpus(8),
        cells={("GPU0", "GPU1"): "PIX", ("GPU0", "GPU2"): "PXB", ("GPU2", "GPU3"): "PXB",
               ("GPU3", "GPU7"): "SYS"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("0-95"), "GPU7": GpuAffinity("0-95")},
        nic_names={},
    ),
    "09_nvlink_bridge_4x_rtx3090_nv4_pairs_phb_node_issue": dict(
        devices=gpus(4),
        cells={("GPU0", "GPU2"): "NV4", ("GPU1", "GPU3"): "NV4", ("GPU0", "GPU1"): "PHB",
               ("GPU0", "GPU3"): "NODE"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("0-23", "0"), "GPU3": GpuAffinity("0-23", "0")},
        nic_names={},
    ),
    "10_nvlink_bridge_3x_rtxa6000_nv4_node_ansi": dict(
        devices=gpus(3),
        cells={("GPU0", "GPU1"): "NV4", ("GPU0", "GPU2"): "NODE", ("GPU1", "GPU2"): "NODE"},
        columns=("CPU Affinity", "NUMA Affinity"),
        affinity={"GPU2": GpuAffinity("0-31,64-95", "0")},
        nic_names={},
    ),
    "11_nvlink_bridge_2gpu_nv2": dict(
        devices=gpus(2),
        cells={("GPU0", "GPU1"): "NV2"},
        columns=("CPU Affinity", "NUMA Affinity"),
        affinity={"GPU0": GpuAffinity("0-23", None), "GPU1": GpuAffinity("0-23", None)},
        nic_names={},
    ),
    "12_single_gpu_a100_5nics_issue": dict(
        devices=["GPU0"] + [f"NIC{i}" for i in range(5)],
        cells={("GPU0", "NIC3"): "PXB", ("GPU0", "NIC4"): "NODE", ("GPU0", "NIC0"): "SYS",
               ("NIC3", "NIC4"): "NODE", ("NIC0", "NIC1"): "NODE"},
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        affinity={"GPU0": GpuAffinity("32-63,96-127", "1")},
        nic_names={},
    ),
}


# The whole summary of each real output, line by line (read against the file: which GPUs
# share which link, the NUMA nodes, the nearest GPU of each NIC).
SUMMARIES = {
    "01_dgx_a100_8x_nv12_mlx5x12": [
        '8 GPUs, 12 NICs',
        'all 8 GPUs on NVSwitch: NV12 everywhere',
        'NUMA affinity: node 3: GPU0, GPU1 (CPUs 48-63,176-191); node 1: GPU2, GPU3 (CPUs '
         '16-31,144-159); node 7: GPU4, GPU5 (CPUs 112-127,240-255); node 5: GPU6, GPU7 (CPUs 80-95,208-223)',
        'mlx5_0 closest to GPU0, GPU1 (PXB)',
        'mlx5_1 closest to GPU0, GPU1 (PXB)',
        'mlx5_2 closest to GPU2, GPU3 (PXB)',
        'mlx5_3 closest to GPU2, GPU3 (PXB)',
        'mlx5_4: no GPU nearer than SYS (another NUMA node)',
        'mlx5_5: no GPU nearer than SYS (another NUMA node)',
        'mlx5_6 closest to GPU4, GPU5 (PXB)',
        'mlx5_7 closest to GPU4, GPU5 (PXB)',
        'mlx5_8 closest to GPU6, GPU7 (PXB)',
        'mlx5_9 closest to GPU6, GPU7 (PXB)',
        'mlx5_10: no GPU nearer than SYS (another NUMA node)',
        'mlx5_11: no GPU nearer than SYS (another NUMA node)',
    ],
    "02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity": [
        '8 GPUs, 6 NICs',
        'all 8 GPUs on NVSwitch: NV18 everywhere',
        'NUMA affinity: node 0: GPU0, GPU1, GPU2, GPU3; node 1: GPU4, GPU5, GPU6, GPU7 (CPUs 1)',
        'NIC0 (mlx5_0) closest to GPU0 (PIX)',
        'NIC1 (mlx5_1) closest to GPU0 (PIX)',
        'NIC2 (mlx5_2) closest to GPU3 (PIX)',
        'NIC3 (mlx5_3) closest to GPU4 (PIX)',
        'NIC4 (mlx5_4) closest to GPU4 (PIX)',
        'NIC5 (mlx5_5) closest to GPU6 (PIX)',
    ],
    "03_hgx_a800_8x_nv8_4nics": [
        '8 GPUs, 4 NICs',
        'all 8 GPUs on NVSwitch: NV8 everywhere',
        'NUMA affinity: node 0: GPU0, GPU1, GPU2, GPU3 (CPUs 0-31,64-95); node 1: GPU4, GPU5, GPU6, GPU7 '
         '(CPUs 32-63,96-127)',
        'NIC0 (mlx5_0) closest to GPU1 (PIX)',
        'NIC1 (mlx5_1) closest to GPU3 (PIX)',
        'NIC2 (mlx5_2) closest to GPU7 (PIX)',
        'NIC3 (mlx5_3) closest to GPU7 (PIX)',
    ],
    "04_hgx_h100_4x_nv6_4nics_issue": [
        '4 GPUs, 4 NICs',
        'all 4 GPUs fully meshed by NVLink: NV6 between every pair',
        'NUMA affinity: node 3: GPU0 (CPUs 6,14,22,30); node 1: GPU1 (CPUs 4,12,20,28); node 7: GPU2 '
         '(CPUs 7,15,23,31); node 5: GPU3 (CPUs 5,13,21,29)',
        'NIC0 closest to GPU0 (PIX)',
        'NIC1 closest to GPU1 (PIX)',
        'NIC2 closest to GPU2 (PIX)',
        'NIC3 closest to GPU3 (PIX)',
    ],
    "05_dgx1_v100_8x_hybrid_cube_mesh_mlx5x4": [
        '8 GPUs, 4 NICs',
        'partial NVLink mesh on 16 of 28 GPU pairs: GPU0-GPU3 (NV2), GPU0-GPU4 (NV2), GPU1-GPU2 (NV2), '
         'GPU1-GPU5 (NV2), GPU2-GPU3 (NV2), GPU4-GPU7 (NV2), GPU5-GPU6 (NV2), GPU6-GPU7 (NV2), GPU0-GPU1 '
         '(NV1), GPU0-GPU2 (NV1), GPU1-GPU3 (NV1), GPU2-GPU6 (NV1), GPU3-GPU7 (NV1), GPU4-GPU5 (NV1), '
         'GPU4-GPU6 (NV1), GPU5-GPU7 (NV1)',
        'GPU0-GPU5, GPU0-GPU6, GPU0-GPU7, GPU1-GPU4, GPU1-GPU6, GPU1-GPU7, GPU2-GPU4, GPU2-GPU5, '
         'GPU2-GPU7, GPU3-GPU4, GPU3-GPU5, GPU3-GPU6 only over SYS: cross-socket (between NUMA nodes)',
        'CPU affinity: GPU0, GPU1, GPU2, GPU3 on CPUs 0-19,40-59; GPU4, GPU5, GPU6, GPU7 on CPUs 20-39,60-79',
        'mlx5_0 closest to GPU0, GPU1 (PIX)',
        'mlx5_2 closest to GPU4, GPU5 (PIX)',
        'mlx5_1 closest to GPU2, GPU3 (PIX)',
        'mlx5_3 closest to GPU6, GPU7 (PIX)',
    ],
    "06_pcie_4x_rtx6000ada_4nics_node_sys_pix": [
        '4 GPUs, 4 NICs',
        'PCIe only: no NVLink between GPUs',
        'GPU0-GPU1, GPU2-GPU3 cross PCIe host bridges within one NUMA node (NODE)',
        '{GPU0,GPU1} and {GPU2,GPU3} only over SYS: cross-socket (between NUMA nodes)',
        'NUMA affinity: node 0: GPU0, GPU1 (CPUs 0-31); node 1: GPU2, GPU3 (CPUs 32-63)',
        'NIC0 (mlx5_0) closest to GPU0, GPU1 (NODE)',
        'NIC1 (mlx5_1) closest to GPU0, GPU1 (NODE)',
        'NIC2 (mlx5_2) closest to GPU2, GPU3 (NODE)',
        'NIC3 (mlx5_3) closest to GPU2, GPU3 (NODE)',
    ],
    "07_pcie_8x_rtx3090_pix_phb_sys_issue": [
        '8 GPUs, no NIC',
        'PCIe only: no NVLink between GPUs',
        'GPU0-GPU1, GPU2-GPU3, GPU4-GPU5, GPU6-GPU7 share a PCIe switch (PIX)',
        "{GPU0,GPU1} and {GPU2,GPU3}; {GPU4,GPU5} and {GPU6,GPU7} meet at the CPU's PCIe host bridge (PHB)",
        '{GPU0..GPU3} and {GPU4..GPU7} only over SYS: cross-socket (between NUMA nodes)',
        'NUMA affinity: node 0: GPU0, GPU1, GPU2, GPU3 (CPUs 0-13,28-41); node 1: GPU4, GPU5, GPU6, GPU7 '
         '(CPUs 14-27,42-55)',
    ],
    "08_pcie_8x_gpu_pix_pxb_sys_issue": [
        '8 GPUs, no NIC',
        'PCIe only: no NVLink between GPUs',
        'GPU0-GPU1, GPU4-GPU5 share a PCIe switch (PIX)',
        '{GPU0,GPU1}, GPU2 and GPU3; {GPU4,GPU5}, GPU6 and GPU7 go through several PCIe switches, not '
         'the CPU (PXB)',
        '{GPU0..GPU3} and {GPU4..GPU7} only over SYS: cross-socket (between NUMA nodes)',
        'CPU affinity: GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7 on CPUs 0-95',
    ],
    "09_nvlink_bridge_4x_rtx3090_nv4_pairs_phb_node_issue": [
        '4 GPUs, no NIC',
        'NVLink-bridged pairs: GPU0-GPU2 (NV4), GPU1-GPU3 (NV4)',
        "GPU0-GPU1, GPU2-GPU3 meet at the CPU's PCIe host bridge (PHB)",
        'GPU0-GPU3, GPU1-GPU2 cross PCIe host bridges within one NUMA node (NODE)',
        'NUMA affinity: node 0: GPU0, GPU1, GPU2, GPU3 (CPUs 0-23)',
    ],
    "10_nvlink_bridge_3x_rtxa6000_nv4_node_ansi": [
        '3 GPUs, no NIC',
        'NVLink-bridged pairs: GPU0-GPU1 (NV4)',
        '{GPU0,GPU1} and GPU2 cross PCIe host bridges within one NUMA node (NODE)',
        'NUMA affinity: node 0: GPU0, GPU1, GPU2 (CPUs 0-31,64-95)',
    ],
    "11_nvlink_bridge_2gpu_nv2": [
        '2 GPUs, no NIC',
        'GPU0-GPU1 joined by NVLink: NV2',
        'CPU affinity: GPU0, GPU1 on CPUs 0-23',
    ],
    "12_single_gpu_a100_5nics_issue": [
        '1 GPU, 5 NICs',
        'single GPU (GPU0): no GPU-to-GPU link',
        'NUMA affinity: node 1: GPU0 (CPUs 32-63,96-127)',
        'NIC0: no GPU nearer than SYS (another NUMA node)',
        'NIC1: no GPU nearer than SYS (another NUMA node)',
        'NIC2: no GPU nearer than SYS (another NUMA node)',
        'NIC3 closest to GPU0 (PXB)',
        'NIC4 closest to GPU0 (NODE)',
    ],
}


def test_every_real_output_has_a_case():
    assert sorted(path.stem for path in SHIPPED.glob("*.txt")) == sorted(CASES) == sorted(SUMMARIES)


@pytest.mark.parametrize("stem", sorted(CASES))
def test_real_output(stem):
    case = CASES[stem]
    topo = parse_topology(fixture_text(stem))
    assert list(topo.devices) == case["devices"]
    n = len(topo.devices)
    assert all(topo.links[i][i] == "X" for i in range(n))
    assert all(topo.links[i][j] == topo.links[j][i] for i in range(n) for j in range(n))
    for (a, b), link in case["cells"].items():
        assert topo.link(a, b) == link, (a, b)
        assert topo.link(b, a) == link, (b, a)
    assert topo.affinity_columns == case["columns"]
    assert set(topo.affinity) == set(topo.gpus)
    for gpu, affinity in case["affinity"].items():
        assert topo.affinity[gpu] == affinity, gpu
    assert topo.nic_names == case["nic_names"]
    devices, links = matrix_by_hand(fixture_text(stem))
    assert list(topo.devices) == devices
    assert [list(row) for row in topo.links] == [["SYS" if cell == "SOC" else cell for cell in row] for row in links]
    assert topo.summary().splitlines() == SUMMARIES[stem]


def test_fixture_quirks_are_really_there():
    """The files exercise what the parser claims to handle."""
    assert "\r\n" in fixture_text("03_hgx_a800_8x_nv8_4nics")
    assert "\x1b[4m" in fixture_text("10_nvlink_bridge_3x_rtxa6000_nv4_node_ansi")
    assert fixture_text("08_pcie_8x_gpu_pix_pxb_sys_issue").startswith("GPU0")
    assert "Legend" not in fixture_text("12_single_gpu_a100_5nics_issue")
    assert "\tNIC4\t" not in fixture_text("12_single_gpu_a100_5nics_issue").splitlines()[-1]


@pytest.mark.parametrize("stem", sorted(CASES))
def test_tabs_turned_into_spaces_parse_the_same(stem):
    """A paste that expands tabs (8 columns) keeps blank cells, e.g. 02's blank CPU Affinity."""
    text = fixture_text(stem)
    original, expanded = parse_topology(text), parse_topology(text.expandtabs(8))
    assert expanded == original


def test_cpu_affinity_parsed_into_cpu_numbers():
    topo = parse_topology(fixture_text("04_hgx_h100_4x_nv6_4nics_issue"))
    assert topo.affinity["GPU0"].cpus == (6, 14, 22, 30)
    topo = parse_topology(fixture_text("01_dgx_a100_8x_nv12_mlx5x12"))
    assert topo.affinity["GPU0"].cpus == tuple(range(48, 64)) + tuple(range(176, 192))
    assert parse_topology(fixture_text("02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity")).affinity["GPU0"].cpus == ()


def test_nic_legend_cut_off_keeps_what_is_there():
    text = fixture_text("02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity")
    cut = text[: text.index("  NIC3: mlx5_3")]
    assert parse_topology(cut).nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2"}
    assert parse_topology(cut).nic_label("NIC4") == "NIC4"


def test_gpu_and_nic_names_and_pairs():
    topo = parse_topology(fixture_text("09_nvlink_bridge_4x_rtx3090_nv4_pairs_phb_node_issue"))
    assert topo.gpus == tuple(gpus(4)) and topo.nics == ()
    assert topo.gpu_pairs_by_link() == {
        "NV4": [("GPU0", "GPU2"), ("GPU1", "GPU3")],
        "PHB": [("GPU0", "GPU1"), ("GPU2", "GPU3")],
        "NODE": [("GPU0", "GPU3"), ("GPU1", "GPU2")],
    }
    assert "<table>" in topo._repr_html_() and "NV4" in topo._repr_html_()
    assert str(topo) == topo.summary()
    with pytest.raises(ValueError, match="no device 'GPU9'"):
        topo.link("GPU0", "GPU9")


# ----------------------------------------------------------------------------- synthetic


def test_minimal_matrix_without_affinity_columns_or_legend():
    topo = parse_topology("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n")
    assert topo.devices == ("GPU0", "GPU1") and topo.link("GPU0", "GPU1") == "PIX"
    assert topo.affinity_columns == () and topo.affinity["GPU1"] == GpuAffinity()
    assert topo.summary().splitlines() == [
        "2 GPUs, no NIC", "PCIe only: no NVLink between GPUs", "GPU0-GPU1 share a PCIe switch (PIX)"
    ]


def test_single_gpu_without_nics():
    topo = parse_topology("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n")
    assert topo.devices == ("GPU0",) and topo.affinity["GPU0"] == GpuAffinity("0-7", "0")
    assert "single GPU (GPU0)" in topo.summary()


def test_prompt_and_text_around_the_matrix_are_ignored():
    text = "$ nvidia-smi topo -m\nsome words here\n" + fixture_text("11_nvlink_bridge_2gpu_nv2") + "\n$ exit\n"
    assert parse_topology(text).link("GPU0", "GPU1") == "NV2"


def test_old_soc_spelling_reads_as_sys():
    topo = parse_topology("\tGPU0\tGPU1\nGPU0\t X \tSOC\nGPU1\tSOC\t X \n")
    assert topo.link("GPU0", "GPU1") == "SYS"


def test_uniform_nvlink_on_sixteen_gpus_is_nvswitch():
    names = gpus(16)
    rows = ["\t" + "\t".join(names)]
    rows += [a + "\t" + "\t".join(" X " if a == b else "NV6" for b in names) for a in names]
    assert "all 16 GPUs on NVSwitch: NV6 everywhere" in parse_topology("\n".join(rows)).summary()


def test_nvlink_everywhere_with_different_counts():
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV2\tNV1\nGPU1\tNV2\t X \tNV1\nGPU2\tNV1\tNV1\t X \n"
    assert parse_topology(text).summary().splitlines()[1] == (
        "NVLink on all 3 GPU pairs, with different link counts: GPU0-GPU1 (NV2), GPU0-GPU2 (NV1), GPU1-GPU2 (NV1)"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty text"),
        ("   \n\t\n", "empty text"),
        ("hello world\nthis is not a matrix\n", "no `nvidia-smi topo -m` matrix found"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tPIX\t X \n", "'FOO' is not a link type"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n", "not symmetric"),
        ("\tGPU0\tGPU1\nGPU0\t X \t X \nGPU1\t X \t X \n", "X \\(self\\) belongs on the diagonal"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", "row GPU0 has 1 link cells"),
    ],
)
def test_bad_input_raises_a_clear_value_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_topology(text)


def test_matrix_cut_off_mid_way_is_an_error():
    lines = fixture_text("07_pcie_8x_rtx3090_pix_phb_sys_issue").splitlines()
    with pytest.raises(ValueError, match="no row for GPU6, GPU7: the matrix looks cut off"):
        parse_topology("\n".join(lines[:-2]))


def test_non_text_raises_value_error():
    with pytest.raises(ValueError, match="expected the text"):
        parse_topology(b"\tGPU0\nGPU0\t X \n")


# ----------------------------------------------------------------------------- link types


def test_link_types_in_bandwidth_order():
    assert LINK_TYPES_FASTEST_FIRST == ("NV#", "PIX", "PXB", "PHB", "NODE", "SYS")
    shuffled = ["SYS", "PIX", "NV4", "NODE", "NV18", "PHB", "PXB", "X"]
    assert sorted(shuffled, key=link_rank) == ["X", "NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert nvlink_count("NV12") == 12 and nvlink_count("PIX") == 0


def test_every_link_type_has_one_sentence():
    explained = link_types_explained()
    assert [name for name, _ in explained] == list(LINK_TYPES_FASTEST_FIRST)
    for name, sentence in explained:
        assert sentence.startswith(name + ":") and sentence.endswith(".")
    assert "12 NVLinks" in explain_link("NV12")
    assert "host bridge" in explain_link("PHB") and "socket" in explain_link("SYS")
    with pytest.raises(ValueError, match="not a link type"):
        explain_link("USB")


# ----------------------------------------------------------------------------- CPU lists


def test_cpu_lists():
    assert parse_cpu_list("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_cpu_list("6,14,22,30") == (6, 14, 22, 30)
    assert parse_cpu_list(" 5 \n") == (5,) and parse_cpu_list("") == ()
    assert format_cpu_list(parse_cpu_list("48-63,176-191")) == "48-63,176-191"
    assert format_cpu_list([30, 6, 14, 22]) == "6,14,22,30"
    with pytest.raises(ValueError, match="runs backwards"):
        parse_cpu_list("3-1")
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list("zero")


# ----------------------------------------------------------------------------- shipped examples


def test_every_shipped_example_parses_and_names_its_source():
    from labutils.machine.topology import TopologyExample, example_names, examples

    shipped = examples()
    assert len(shipped) == 12 and [e.name for e in shipped] == example_names()
    for item in shipped:
        assert isinstance(item, TopologyExample)
        assert item.topology == parse_topology(item.text)
        assert item.topology.gpus and all(link == "X" for link in
                                          (item.topology.links[i][i] for i in range(len(item.topology.devices))))
        assert item.source[:2] in ("D ", "I ") and item.machine, f"{item.name}: no source in INDEX.md"
    assert [len(e.topology.gpus) for e in shipped] == [8, 8, 8, 4, 8, 4, 8, 8, 4, 3, 2, 1]


def test_shipped_examples_keep_the_captured_bytes():
    from labutils.machine.topology import example, example_names

    for stem in example_names():
        assert example(stem).text == (SHIPPED / f"{stem}.txt").read_bytes().decode()
    assert "\r\n" in example("03").text  # the CRLF paste is kept as it was
    assert "\x1b[" in example("10").text  # and the ANSI codes


def test_example_by_prefix_and_bad_names():
    from labutils.machine.topology import example

    assert example("02").name == "02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity"
    assert example("02").topology.link("GPU0", "GPU7") == "NV18"
    assert "nvidia/nccl#1617" in example("04_hgx").source.lower()
    with pytest.raises(ValueError, match="matches no shipped topology example: pass one of 01_dgx"):
        example("99")
    with pytest.raises(ValueError, match="matches several"):
        example("0")
    with pytest.raises(ValueError, match="matches no"):
        example("")
