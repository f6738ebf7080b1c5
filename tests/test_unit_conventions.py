"""Every vendor memory total quoted next to another total names its unit convention (SI or binary)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from unit_conventions import markdown_units, needs_convention, print_units, unlabelled_totals

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*/*.ipynb"),
                    *(ROOT / "labs").glob("*/*.ipynb")])

UNLABELLED = [
    # the course's own earlier wording: an SI total printed beside NVIDIA's binary-style one
    "(NVL72 counted with HGX B200's 180 GB per GPU; NVIDIA's GB200 NVL72 page lists up to 13.4 TB of HBM3e, "
    "its GB200 GPUs carry a little more memory)",
    "Grace carries up to 480 GB; with 96 GB of HBM3 that is 576 GB in all, with 144 GB of HBM3e 624 GB "
    "(NVIDIA GH200 product page).",
    "8 x H100: HBM {} TB (NVIDIA's DGX H100 datasheet: 640 GB)",
    "the DGX B200 has 1,440 GB of GPU memory (NVIDIA), 8 x 180 GB, which this table counts as 1.55 TB",
]
LABELLED_OR_NOT_A_TOTAL = [
    "HBM 0.69 TB SI = 640 GB as NVIDIA counts (GiB)",
    "NVIDIA lists 640 GB for DGX H100, its GB being 2^30 B; that is 0.69 TB in the course's 10^9 B",
    "the 13.4 TB NVIDIA lists are binary-style TB, 1,000 of its GB",
    "An H100 SXM has 132 SMs, a 50 MB L2 and 80 GB of HBM3 (NVIDIA H100 datasheet).",
    "H100 NVLink4: 900 GB/s bidirectional, 450 GB/s per direction (NVIDIA datasheet)",
    "a 70e9-parameter model sends 35.0 GB per rank in BF16 and 17.5 GB in FP8",
    "2 GB of fp16 gradients in 4 ms on 8 x H100, 14 GB in 31 ms (NVIDIA's H100 datasheet: 450 GB/s per direction)",
]


@pytest.mark.parametrize("text", UNLABELLED)
def test_a_vendor_total_beside_another_without_its_convention_is_flagged(text):
    assert needs_convention(text), text


@pytest.mark.parametrize("text", LABELLED_OR_NOT_A_TOTAL)
def test_a_named_convention_a_single_figure_or_no_vendor_passes(text):
    assert not needs_convention(text), text


def test_units_are_paragraphs_list_items_and_print_calls():
    assert markdown_units("a\nb\n\nc\n- d\n- e") == ["a\nb", "c", "- d", "- e"]
    code = 'x = 1\nprint(f"HBM {x:.2f} TB", "and 640 GB")\nprint("NVIDIA")'
    assert print_units(code) == ["HBM {} TBand 640 GB", "NVIDIA"]


def test_the_old_chapter_2_cell_is_flagged():
    cell = {"cell_type": "code", "source": UNLABELLED[0].join(['print("', '")'])}
    assert [hit.where for hit in unlabelled_totals("ch", [cell])] == ["ch, cell 0"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_notebook_vendor_totals_name_their_convention(path):
    hits = unlabelled_totals(str(path.relative_to(ROOT)), json.loads(path.read_text(encoding="utf-8"))["cells"])
    assert not hits, ("a vendor's memory total beside another, with no word on SI (1e9 B) or binary (2^30 B) "
                      "bytes:\n" + "\n".join(map(str, hits)))


def test_readme_vendor_totals_name_their_convention():
    units = markdown_units((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [unit for unit in units if needs_convention(unit)] == []
