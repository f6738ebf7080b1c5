"""Every chapter executes headless in QUICK mode, as the nightly job runs it, without an error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PARAMETERS = {"QUICK": True, "WORLD_SIZE": 2, "BACKEND": "auto"}


def test_there_are_ten_chapters_and_a_landing_page():
    numbers = [p.name[:2] for p in CHAPTERS]
    assert [n for n in numbers if n != "00"] == [f"{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_has_a_parameters_cell(path):
    cells = json.loads(path.read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters', expected 1"
    source = "".join(tagged[0]["source"])
    for name in PARAMETERS:
        assert f"{name} =" in source, f"{path.name}: the parameters cell does not set {name}"


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_headless_in_quick_mode(path, tmp_path):
    import papermill

    try:
        papermill.execute_notebook(
            str(path), str(tmp_path / path.name), parameters=PARAMETERS, kernel_name="python3",
            cwd=str(path.parent), execution_timeout=300, progress_bar=False, log_output=False,
        )
    except papermill.PapermillExecutionError as exc:
        pytest.fail(f"{path.name}: cell {exc.exec_count} raised {exc.ename}: {exc.evalue}", pytrace=False)
