"""Every number a chapter states right after a measurement is computed by that cell or sourced.

``prose_claims.unbacked_claims`` reads an executed chapter: in each markdown cell that
follows a measuring code cell, a number with a unit of a measured quantity must appear in
that cell's output (at the precision the prose gives), or stand in a sourced or modelled
sentence. The first tests pin that rule on small notebooks; the slow one runs every
chapter in QUICK mode on this CPU (gloo) through the nightly runner and reads them all.
Set ``COURSE_NIGHTLY_DIR`` to a nightly run's folder to read its executed chapters instead.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prose_claims import ALLOWED, unbacked_claims

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _notebook(code: str, printed: str, prose: str) -> list[dict]:
    return [{"cell_type": "code", "source": code, "outputs": [{"output_type": "stream", "text": printed}]},
            {"cell_type": "markdown", "source": prose}]


def _claims(code: str, printed: str, prose: str) -> list[str]:
    return [claim.text for claim in unbacked_claims("ch.ipynb", _notebook(code, printed, prose))]


def test_a_measured_number_the_run_did_not_print_is_flagged():
    assert _claims("t = bench.time_it(f)", "all-reduce: 2.31 ms, 4.10 GB/s\n",
                   "The all-reduce takes about 5 ms here, at 12 GB/s.") == ["5 ms", "12 GB/s"]


def test_a_number_the_run_printed_passes_at_the_prose_precision():
    assert _claims("t = bench.time_it(f)", "all-reduce: 2.31 ms, 4.10 GB/s, overlap 41.3%\n",
                   "It takes 2.3 ms at 4.1 GB/s, and 41% is hidden.") == []
    assert _claims("t = bench.time_it(f)", "efficiency 0.874\n", "An efficiency of 87% here.") == []
    assert _claims("t = bench.time_it(f)", "2.31 ms\n", "It takes 2.4 ms.") == ["2.4 ms"]


def test_speedups_are_claims_and_products_are_not():
    assert _claims("s = pool.run(f)", "speedup 1.7\n", "Two ranks run 3x faster.") == ["3x"]
    assert _claims("s = pool.run(f)", "speedup 1.7\n", "Two ranks on 8 × H100 nodes.") == []


def test_sourced_and_modelled_sentences_pass():
    for prose in ("NVLink4 gives 450 GB/s per direction on an H100 (NVIDIA datasheet).",
                  "The model predicts 12 ms for 1 GiB.",
                  "ZeRO-3 cuts it to 3% (arXiv:1910.02054).",
                  "A ring needs $T = 2(n-1)/n \\cdot S / BW$, 8 ms at 1 GB."):
        assert _claims("t = bench.time_it(f)", "2.31 ms\n", prose) == [], prose


def test_prose_after_a_cell_that_measures_nothing_is_not_read():
    assert _claims("x = costmodel.zero_memory(7e9, 8, 3)", "", "It needs 5 ms.") == []
    assert unbacked_claims("ch.ipynb", [{"cell_type": "markdown", "source": "It takes 5 ms."}]) == []


@pytest.mark.parametrize(("chapter", "words"), sorted(ALLOWED), ids=[name for name, _ in sorted(ALLOWED)])
def test_every_allow_list_entry_still_names_a_sentence_of_its_chapter(chapter, words):
    cells = json.loads((ROOT / "notebooks" / chapter).read_text())["cells"]
    prose = " ".join(" ".join("".join(cell["source"]).split()) for cell in cells if cell["cell_type"] == "markdown")
    assert words in prose, f"{chapter} no longer says {words!r}: drop it from prose_claims.ALLOWED"


@pytest.fixture(scope="module")
def executed_chapters(request) -> dict[str, list[dict]]:
    """Chapter file name -> cells of its executed copy (QUICK, 2 ranks, this machine's backend): the
    folder COURSE_NIGHTLY_DIR names, else the session's one QUICK run (conftest's quick_chapter_run)."""
    folder = os.environ.get("COURSE_NIGHTLY_DIR")
    if not folder:
        _run, folder = request.getfixturevalue("quick_chapter_run")
    executed = {path.name: Path(folder) / "notebooks" / path.name for path in CHAPTERS}
    missing = [name for name, path in executed.items() if not path.is_file()]
    assert not missing, f"no executed copy of {missing} in {folder}"
    return {name: json.loads(path.read_text())["cells"] for name, path in executed.items()}


@pytest.mark.slow
@pytest.mark.quick_chapter_run
@pytest.mark.parametrize("chapter", [path.name for path in CHAPTERS])
def test_chapter_prose_states_only_numbers_its_run_computed_or_a_source_gives(chapter, executed_chapters):
    claims = unbacked_claims(chapter, executed_chapters[chapter])
    assert not claims, ("numbers stated beside a measurement that this run did not print and no source gives "
                        "(print them from the run, or word them to hold on CPU/gloo and GPU/NCCL alike):\n"
                        + "\n".join(map(str, claims)))
