"""labutils.machine.interconnects: link bandwidths agree with the PCI-SIG, NVIDIA and InfiniBand Trade Association
figures, per direction vs both ways kept apart."""
from __future__ import annotations

import pytest

from labutils.machine import interconnects

GB = 1e9


@pytest.mark.parametrize("name, per_direction_GBps", [
    # PCI-SIG base specifications: x16 per direction Gen3 8 GT/s x 16 lanes x 128/130 / 8 = 15.75 GB/s,
    # Gen4 (16 GT/s) 31.5, Gen5 (32 GT/s) 63 GB/s
    ("pcie3", 15.75), ("pcie4", 31.5), ("pcie5", 63.0),
    # PCI-SIG: PCIe 6.0 x16 is 256 GB/s bidirectional, 128 GB/s each way (before FLIT overhead)
    ("pcie6", 128.0),
    # NVIDIA V100, A100, H100 and HGX B200 datasheets: NVLink per GPU 300, 600, 900, 1800 GB/s
    # bidirectional; per direction half
    ("nvlink2", 150.0), ("nvlink3", 300.0), ("nvlink4", 450.0), ("nvlink5", 900.0),
    # InfiniBand Trade Association roadmap: HDR 200 Gb/s = 25 GB/s per port, NDR 400 Gb/s = 50 GB/s;
    # XDR 800 Gb/s
    ("ib_hdr", 25.0), ("ib_ndr", 50.0), ("ib_xdr", 100.0),
    ("100gbe", 12.5), ("200gbe", 25.0), ("400gbe", 50.0),
])
def test_per_direction_matches_the_standards(name, per_direction_GBps):
    assert interconnects.per_direction(name) == pytest.approx(per_direction_GBps * GB, rel=1e-3)
    record = interconnects.link(name)
    assert record.bidirectional_Bps == pytest.approx(2 * record.per_direction_Bps)
    assert record.per_direction_GBps == pytest.approx(per_direction_GBps, rel=1e-3)


def test_pcie_per_direction_is_half_the_bidirectional_figure():
    # PCI-SIG: PCIe 5.0 x16 "~64 GB/s" is per direction (63 GB/s after 128b/130b); both ways about 126 GB/s
    assert interconnects.link("pcie5").bidirectional_GBps == pytest.approx(126.0, rel=1e-3)
    assert interconnects.link("pcie4").bidirectional_GBps == pytest.approx(63.0, rel=1e-3)


def test_nvlink_quotes_the_bidirectional_vendor_figure():
    assert [interconnects.link(f"nvlink{v}").bidirectional_GBps for v in (2, 3, 4, 5)] == \
        pytest.approx([300, 600, 900, 1800])
    assert "bidirectional" in interconnects.link("nvlink4").rate_text


def test_network_links_say_gigabits_not_gigabytes():
    hdr = interconnects.link("ib_hdr")
    assert hdr.rate_text.startswith("200 Gb/s") and hdr.per_direction_GBps == pytest.approx(25.0)
    for record in interconnects.table():
        if record.kind in ("infiniband", "ethernet"):
            assert "Gb/s" in record.rate_text and "GB/s" not in record.rate_text
            gigabits = float(record.rate_text.split()[0])
            assert record.per_direction_Bps == pytest.approx(gigabits * 1e9 / 8)


def test_table_is_complete_and_sourced():
    records = interconnects.table()
    assert [r.name for r in records] == ["pcie3", "pcie4", "pcie5", "pcie6", "nvlink2", "nvlink3", "nvlink4",
                                         "nvlink5", "ib_hdr", "ib_ndr", "ib_xdr", "100gbe", "200gbe", "400gbe"]
    assert all(r.source and r.per and r.label for r in records)
    assert {r.kind for r in records} == {"pcie", "nvlink", "infiniband", "ethernet"}
    records.clear()  # a copy: the module's table is untouched
    assert len(interconnects.table()) == 14


def test_names_are_forgiving_and_unknown_names_list_the_choices():
    assert interconnects.link("NVLink-4") is interconnects.link("nvlink4")
    assert interconnects.link("IB NDR") is interconnects.link("ib_ndr")
    assert interconnects.link("400GbE").kind == "ethernet"
    with pytest.raises(ValueError, match="unknown link 'pcie7'.*pcie3, pcie4"):
        interconnects.link("pcie7")
    with pytest.raises(ValueError, match="unknown link"):
        interconnects.per_direction(None)
