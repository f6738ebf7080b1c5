"""Every chapter executes headless in QUICK mode without an error, through the nightly runner.

The chapters run once per session, two at a time, exactly as `course nightly` runs them
(each in its own kernel, QUICK / WORLD_SIZE / BACKEND injected); each chapter is then a
test of its own row in the report.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PARAMETERS = ("QUICK", "WORLD_SIZE", "BACKEND")


def test_there_are_ten_chapters_and_a_landing_page():
    numbers = [p.name[:2] for p in CHAPTERS]
    assert numbers[0] == "00", "notebooks/00_start_here.ipynb, the landing page, is missing"
    assert numbers[1:] == [f"{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_has_a_parameters_cell(path):
    cells = json.loads(path.read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters', expected 1"
    source = "".join(tagged[0]["source"])
    for name in PARAMETERS:
        assert f"{name} =" in source, f"{path.name}: the parameters cell does not set {name}"


@pytest.fixture(scope="module")
def nightly_rows(quick_chapter_run):
    run, _folder = quick_chapter_run
    return {row.name: row for row in run.results}


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_headless_in_quick_mode(path, nightly_rows):
    row = nightly_rows.get(f"notebooks/{path.name}")
    assert row is not None, f"{path.stem} is missing from the nightly report: {sorted(nightly_rows)}"
    assert row.ok, (f"{path.name}: {row.status} at cell {row.cell} (In [{row.execution_count}]): "
                    f"{row.error}\n{row.excerpt}")
    # no process outlives it and nothing stays in its temporary directory (a student runs it again and again)
    assert row.notes == [], f"{path.name}: {row.notes}"
